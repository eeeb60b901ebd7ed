//! Every API version as data. Each group file (`volume.rs`, `disk.rs`, ...) holds two things:
//!
//! - what each version serves: one flat `grpc_service!` list per version, one line per RPC,
//!   naming the internal operation of [`crate::ops`] the RPC maps to;
//! - how each version's messages convert: request → operation (`into_op!`) and the operation's
//!   output → response (`from_output!`). Versions whose messages read alike share one
//!   conversion macro, invoked once per version, so older versions map onto the current
//!   operations instead of copying logic.
//!
//! The service table below picks the server of each API. The build checks the table against
//! `csi_proxy_wire::APIS` and each RPC list against its .proto (see `check.rs`).

mod check;
mod disk;
mod filesystem;
mod iscsi;
mod smb;
mod system;
mod volume;

use crate::{ApiService, Context};
use csi_proxy_wire::*;
use tower::util::BoxCloneSyncService;

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

/// One version's gRPC service, as a flat list with one line per RPC, in the .proto's order:
///
/// `RpcName => Op: trait_method(Request) -> Response;`
///
/// `RpcName` is the name on the wire (also used in logs and metrics), `Op` the operation of
/// [`crate::ops`] the request converts into. The rest is what the generated trait needs. Every
/// RPC forwards to [`Context::unary`]. The build fails if the names differ from the .proto or a
/// request does not convert into the `Op` given.
macro_rules! grpc_service {
    ($v:ident :: $module:ident :: $trait:ident {
        $($rpc:ident => $op:ident: $method:ident($req:ident) -> $resp:ident;)*
    }) => {
        const _: () = $crate::versions::check::rpcs_match_proto($v::$module::SERVICE_NAME, &[$(stringify!($rpc)),*]);
        $(const _: () = $crate::versions::check::converts_into::<$v::$req, $op>();)*

        #[tonic::async_trait]
        impl $v::$module::$trait for $crate::versions::Handler {
            $(
                async fn $method(
                    &self,
                    request: tonic::Request<$v::$req>,
                ) -> Result<tonic::Response<$v::$resp>, tonic::Status> {
                    self.0.unary($v::$module::SERVICE_NAME, stringify!($rpc), request).await
                }
            )*
        }
    };
}

pub(crate) use {empty_responses, from_output, grpc_service, into_op};

/// The service table: per group, its generated server and the versions served, written in the
/// order of `csi_proxy_wire::APIS`. The build fails unless both list the same APIs in the same
/// order.
macro_rules! service_table {
    ($($group:ident => $module:ident::$server:ident: [$($version:ident),*],)*) => {
        /// Every API of the table, in table order.
        const SERVED: &[Api] = &[$($(Api { group: Group::$group, version: stringify!($version) },)*)*];

        const _: () = check::table_matches_apis(SERVED);

        /// The server of `api`; `None` only for an `Api` value outside `APIS`.
        fn server<B>(api: Api, h: Handler) -> Option<ApiService<B>>
        where
            B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
            B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
        {
            Some(match (api.group, api.version) {
                $($((Group::$group, stringify!($version)) => BoxCloneSyncService::new(
                    $version::$module::$server::new(h).max_decoding_message_size(crate::MAX_REQUEST_BYTES),
                ),)*)*
                _ => return None,
            })
        }
    };
}

service_table! {
    Disk => disk_server::DiskServer: [v1alpha1, v1beta1, v1beta2, v1beta3, v1],
    Filesystem => filesystem_server::FilesystemServer: [v1alpha1, v1beta1, v1beta2, v1, v2alpha1],
    Volume => volume_server::VolumeServer: [v1alpha1, v1beta1, v1beta2, v1beta3, v1, v2alpha1],
    Smb => smb_server::SmbServer: [v1alpha1, v1beta1, v1beta2, v1],
    Iscsi => iscsi_server::IscsiServer: [v1alpha1, v1alpha2],
    System => system_server::SystemServer: [v1alpha1],
}

/// The HTTP service that answers gRPC calls for `api` in `ctx`: exactly that version's service,
/// as upstream serves one service per pipe; any other path answers `Unimplemented`.
pub fn service<B>(ctx: &Context, api: Api) -> ApiService<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    server(api, Handler(ctx.clone())).unwrap_or_else(|| unknown_api(api))
}

/// `Api` is plain data, so a caller can name an API that `APIS` lacks. Such a service answers
/// every call with Unimplemented, as an unknown path does, instead of taking the process down.
fn unknown_api<B: Send + 'static>(api: Api) -> ApiService<B> {
    BoxCloneSyncService::new(tower::service_fn(move |_: http::Request<B>| {
        let status = tonic::Status::unimplemented(format!("csi-proxy serves no API {} {}", api.group, api.version));
        std::future::ready(Ok(status.into_http()))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    fn ctx() -> Context {
        Context::new(
            csi_proxy_host::Hosts::from_one(std::sync::Arc::new(csi_proxy_host::memory::MemoryHost::new())),
            Default::default(),
        )
    }

    #[test]
    fn every_api_has_a_server() {
        for api in APIS {
            assert!(server::<tonic::body::Body>(*api, Handler(ctx())).is_some(), "{api:?}");
        }
    }

    #[tokio::test]
    async fn an_api_outside_apis_answers_unimplemented() {
        let api = Api { group: Group::Disk, version: "v9" };
        let request = http::Request::new(tonic::body::Body::empty());
        let response = service::<tonic::body::Body>(&ctx(), api).oneshot(request).await.unwrap();
        let status = tonic::Status::from_header_map(response.headers()).expect("a grpc-status header");
        assert_eq!(status.code(), tonic::Code::Unimplemented);
        assert_eq!(status.message(), "csi-proxy serves no API disk v9");
    }
}
