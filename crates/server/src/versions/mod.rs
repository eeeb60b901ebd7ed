//! Every API version as data: each wire request converts into one internal operation of
//! [`crate::ops`], each operation's output converts back into the version's response, and each
//! version's gRPC service is a list of one-line forwards into [`crate::Context::unary`].
//!
//! Versions with identical messages share one conversion macro invoked once per version.

mod disk;
mod filesystem;
mod iscsi;
mod smb;
mod system;
mod volume;

use crate::Context;
use csi_proxy_wire::Api;

/// The value every generated service trait is implemented on.
#[derive(Clone)]
pub struct Handler(pub(crate) Context);

/// `impl IntoOp for <request>`.
macro_rules! into_op {
    ($req:ty => $op:ty, |$r:ident| $body:expr) => {
        impl $crate::call::IntoOp for $req {
            type Op = $op;
            #[allow(unused_variables)]
            fn into_op(self) -> csi_proxy_host::Result<$op> {
                let $r = self;
                Ok($body)
            }
        }
    };
}

/// `impl FromOutput<T> for <response>`.
macro_rules! from_output {
    ($resp:ty, $t:ty, |$o:ident| $body:expr) => {
        impl $crate::call::FromOutput<$t> for $resp {
            #[allow(unused_variables)]
            fn from_output($o: $t) -> csi_proxy_host::Result<Self> {
                Ok($body)
            }
        }
    };
}

/// Responses without payload (some older ones carry an `error` string upstream never filled).
macro_rules! empty_responses {
    ($($resp:ty),* $(,)?) => {
        $($crate::versions::from_output!($resp, (), |o| <$resp>::default());)*
    };
}

/// Implements a version's generated service trait: every RPC forwards to `Context::unary`.
macro_rules! grpc_service {
    ($v:ident :: $module:ident :: $trait:ident {
        $($rpc:ident => $method:ident($req:ident) -> $resp:ident;)*
    }) => {
        #[tonic::async_trait]
        impl $v::$module::$trait for $crate::versions::Handler {
            $(
                async fn $method(
                    &self,
                    request: tonic::Request<$v::$req>,
                ) -> Result<tonic::Response<$v::$resp>, tonic::Status> {
                    self.0
                        .unary(concat!(stringify!($v), ".", stringify!($trait)), stringify!($rpc), request)
                        .await
                }
            )*
        }
    };
}

pub(crate) use {empty_responses, from_output, grpc_service, into_op};

pub(crate) fn service<B>(api: Api, ctx: Context) -> crate::ApiService<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    let h = Handler(ctx);
    macro_rules! pick {
        ($($group:ident, $version:literal => $server:path;)*) => {
            match (api.group, api.version) {
                $((Group::$group, $version) => tower::util::BoxCloneSyncService::new(
                    <$server>::new(h).max_decoding_message_size(crate::MAX_REQUEST_BYTES),
                ),)*
                (g, v) => unreachable!("no API {g} {v}: csi_proxy_wire::APIS and this table disagree"),
            }
        };
    }
    use csi_proxy_wire::Group;
    use csi_proxy_wire::*;
    pick! {
        Disk, "v1alpha1" => v1alpha1::disk_server::DiskServer<Handler>;
        Disk, "v1beta1" => v1beta1::disk_server::DiskServer<Handler>;
        Disk, "v1beta2" => v1beta2::disk_server::DiskServer<Handler>;
        Disk, "v1beta3" => v1beta3::disk_server::DiskServer<Handler>;
        Disk, "v1" => v1::disk_server::DiskServer<Handler>;
        Filesystem, "v1alpha1" => v1alpha1::filesystem_server::FilesystemServer<Handler>;
        Filesystem, "v1beta1" => v1beta1::filesystem_server::FilesystemServer<Handler>;
        Filesystem, "v1beta2" => v1beta2::filesystem_server::FilesystemServer<Handler>;
        Filesystem, "v1" => v1::filesystem_server::FilesystemServer<Handler>;
        Filesystem, "v2alpha1" => v2alpha1::filesystem_server::FilesystemServer<Handler>;
        Volume, "v1alpha1" => v1alpha1::volume_server::VolumeServer<Handler>;
        Volume, "v1beta1" => v1beta1::volume_server::VolumeServer<Handler>;
        Volume, "v1beta2" => v1beta2::volume_server::VolumeServer<Handler>;
        Volume, "v1beta3" => v1beta3::volume_server::VolumeServer<Handler>;
        Volume, "v1" => v1::volume_server::VolumeServer<Handler>;
        Volume, "v2alpha1" => v2alpha1::volume_server::VolumeServer<Handler>;
        Smb, "v1alpha1" => v1alpha1::smb_server::SmbServer<Handler>;
        Smb, "v1beta1" => v1beta1::smb_server::SmbServer<Handler>;
        Smb, "v1beta2" => v1beta2::smb_server::SmbServer<Handler>;
        Smb, "v1" => v1::smb_server::SmbServer<Handler>;
        Iscsi, "v1alpha1" => v1alpha1::iscsi_server::IscsiServer<Handler>;
        Iscsi, "v1alpha2" => v1alpha2::iscsi_server::IscsiServer<Handler>;
        System, "v1alpha1" => v1alpha1::system_server::SystemServer<Handler>;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_api_has_a_service() {
        let ctx = crate::Context::new(
            csi_proxy_host::Hosts::from_one(std::sync::Arc::new(csi_proxy_host::memory::MemoryHost::new())),
            Default::default(),
        );
        for api in csi_proxy_wire::APIS {
            let _ = ctx.service::<tonic::body::Body>(*api);
        }
    }
}
