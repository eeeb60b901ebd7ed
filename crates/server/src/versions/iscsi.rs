//! iSCSI: v1alpha2 = v1alpha1 + SetMutualChapSecret; messages otherwise identical.
//!
//! A request without `target_portal` is refused with InvalidArgument (upstream's process
//! crashed on it); port 0 means the iSCSI default 3260, as upstream.

use super::{empty_responses, from_output, grpc_service, into_op};
use crate::ops::iscsi::*;
use csi_proxy_host::types::{AuthType, ConnectTarget as Connect, Secret, TargetPortal};
use csi_proxy_host::{Error, Result};
use csi_proxy_wire::{v1alpha1, v1alpha2};

// What each version serves: `RpcName => Op: trait_method(Request) -> Response;` (see grpc_service!).

grpc_service!(v1alpha1::iscsi_server::Iscsi {
    AddTargetPortal => AddTargetPortal: add_target_portal(AddTargetPortalRequest) -> AddTargetPortalResponse;
    DiscoverTargetPortal => DiscoverTargetPortal:
        discover_target_portal(DiscoverTargetPortalRequest) -> DiscoverTargetPortalResponse;
    RemoveTargetPortal => RemoveTargetPortal:
        remove_target_portal(RemoveTargetPortalRequest) -> RemoveTargetPortalResponse;
    ListTargetPortals => ListTargetPortals: list_target_portals(ListTargetPortalsRequest) -> ListTargetPortalsResponse;
    ConnectTarget => ConnectTarget: connect_target(ConnectTargetRequest) -> ConnectTargetResponse;
    DisconnectTarget => DisconnectTarget: disconnect_target(DisconnectTargetRequest) -> DisconnectTargetResponse;
    GetTargetDisks => GetTargetDisks: get_target_disks(GetTargetDisksRequest) -> GetTargetDisksResponse;
});

grpc_service!(v1alpha2::iscsi_server::Iscsi {
    AddTargetPortal => AddTargetPortal: add_target_portal(AddTargetPortalRequest) -> AddTargetPortalResponse;
    DiscoverTargetPortal => DiscoverTargetPortal:
        discover_target_portal(DiscoverTargetPortalRequest) -> DiscoverTargetPortalResponse;
    RemoveTargetPortal => RemoveTargetPortal:
        remove_target_portal(RemoveTargetPortalRequest) -> RemoveTargetPortalResponse;
    ListTargetPortals => ListTargetPortals: list_target_portals(ListTargetPortalsRequest) -> ListTargetPortalsResponse;
    ConnectTarget => ConnectTarget: connect_target(ConnectTargetRequest) -> ConnectTargetResponse;
    DisconnectTarget => DisconnectTarget: disconnect_target(DisconnectTargetRequest) -> DisconnectTargetResponse;
    GetTargetDisks => GetTargetDisks: get_target_disks(GetTargetDisksRequest) -> GetTargetDisksResponse;
    SetMutualChapSecret => SetMutualChapSecret:
        set_mutual_chap_secret(SetMutualChapSecretRequest) -> SetMutualChapSecretResponse;
});

// How each version's messages convert.

const DEFAULT_PORT: u16 = 3260;

fn portal(address: &str, port: u32) -> Result<TargetPortal> {
    if address.is_empty() {
        return Err(Error::invalid("target_portal.target_address is empty"));
    }
    let port = match port {
        0 => DEFAULT_PORT,
        p => u16::try_from(p)
            .map_err(|_| Error::invalid(format!("target_portal.target_port {p} is out of range: expected 0-65535")))?,
    };
    Ok(TargetPortal { address: address.to_string(), port })
}

fn auth(value: i32) -> Result<AuthType> {
    match value {
        0 => Ok(AuthType::None),
        1 => Ok(AuthType::OneWayChap),
        2 => Ok(AuthType::MutualChap),
        n => Err(Error::invalid(format!(
            "auth_type {n} is not valid: expected 0 (NONE), 1 (ONE_WAY_CHAP) or 2 (MUTUAL_CHAP)"
        ))),
    }
}

macro_rules! all {
    ($($v:ident),*) => {$(
        /// The request's portal, which every RPC but ListTargetPortals requires.
        fn $v(p: Option<$v::TargetPortal>) -> Result<TargetPortal> {
            let p = p.ok_or_else(|| Error::invalid("target_portal is missing"))?;
            portal(&p.target_address, p.target_port)
        }

        into_op!($v::AddTargetPortalRequest => AddTargetPortal, |r| AddTargetPortal { portal: $v(r.target_portal)? });
        into_op!($v::DiscoverTargetPortalRequest => DiscoverTargetPortal,
            |r| DiscoverTargetPortal { portal: $v(r.target_portal)? });
        from_output!($v::DiscoverTargetPortalResponse, Vec<String>, |o| $v::DiscoverTargetPortalResponse { iqns: o });
        into_op!($v::RemoveTargetPortalRequest => RemoveTargetPortal,
            |r| RemoveTargetPortal { portal: $v(r.target_portal)? });
        into_op!($v::ListTargetPortalsRequest => ListTargetPortals, |r| ListTargetPortals {});
        from_output!($v::ListTargetPortalsResponse, Vec<TargetPortal>, |o| $v::ListTargetPortalsResponse {
            target_portals: o
                .into_iter()
                .map(|p| $v::TargetPortal { target_address: p.address, target_port: p.port.into() })
                .collect(),
        });
        into_op!($v::ConnectTargetRequest => ConnectTarget, |r| ConnectTarget {
            request: Connect {
                portal: $v(r.target_portal)?,
                iqn: r.iqn,
                auth: auth(r.auth_type)?,
                chap_username: r.chap_username,
                chap_secret: Secret::new(r.chap_secret),
            },
        });
        into_op!($v::DisconnectTargetRequest => DisconnectTarget,
            |r| DisconnectTarget { portal: $v(r.target_portal)?, iqn: r.iqn });
        into_op!($v::GetTargetDisksRequest => GetTargetDisks,
            |r| GetTargetDisks { portal: $v(r.target_portal)?, iqn: r.iqn });
        from_output!($v::GetTargetDisksResponse, Vec<u32>,
            |o| $v::GetTargetDisksResponse { disk_i_ds: o.into_iter().map(|n| n.to_string()).collect() });
        empty_responses!(
            $v::AddTargetPortalResponse,
            $v::RemoveTargetPortalResponse,
            $v::ConnectTargetResponse,
            $v::DisconnectTargetResponse,
        );
    )*};
}
all!(v1alpha1, v1alpha2);

into_op!(v1alpha2::SetMutualChapSecretRequest => SetMutualChapSecret,
    |r| SetMutualChapSecret { secret: Secret::new(r.mutual_chap_secret) });
empty_responses!(v1alpha2::SetMutualChapSecretResponse);
