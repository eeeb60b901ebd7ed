//! SMB: requests are identical in all four versions; v1alpha1 and v1beta1 responses carry an
//! `error` string that stays empty (failures travel as gRPC statuses).

use super::{empty_responses, grpc_service, into_op};
use crate::ops::smb::*;
use csi_proxy_host::types::Secret;
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2};

// What each version serves: `RpcName => Op: trait_method(Request) -> Response;` (see grpc_service!).

grpc_service!(v1alpha1::smb_server::Smb {
    NewSmbGlobalMapping => NewSmbGlobalMapping:
        new_smb_global_mapping(NewSmbGlobalMappingRequest) -> NewSmbGlobalMappingResponse;
    RemoveSmbGlobalMapping => RemoveSmbGlobalMapping:
        remove_smb_global_mapping(RemoveSmbGlobalMappingRequest) -> RemoveSmbGlobalMappingResponse;
});

grpc_service!(v1beta1::smb_server::Smb {
    NewSmbGlobalMapping => NewSmbGlobalMapping:
        new_smb_global_mapping(NewSmbGlobalMappingRequest) -> NewSmbGlobalMappingResponse;
    RemoveSmbGlobalMapping => RemoveSmbGlobalMapping:
        remove_smb_global_mapping(RemoveSmbGlobalMappingRequest) -> RemoveSmbGlobalMappingResponse;
});

grpc_service!(v1beta2::smb_server::Smb {
    NewSmbGlobalMapping => NewSmbGlobalMapping:
        new_smb_global_mapping(NewSmbGlobalMappingRequest) -> NewSmbGlobalMappingResponse;
    RemoveSmbGlobalMapping => RemoveSmbGlobalMapping:
        remove_smb_global_mapping(RemoveSmbGlobalMappingRequest) -> RemoveSmbGlobalMappingResponse;
});

grpc_service!(v1::smb_server::Smb {
    NewSmbGlobalMapping => NewSmbGlobalMapping:
        new_smb_global_mapping(NewSmbGlobalMappingRequest) -> NewSmbGlobalMappingResponse;
    RemoveSmbGlobalMapping => RemoveSmbGlobalMapping:
        remove_smb_global_mapping(RemoveSmbGlobalMappingRequest) -> RemoveSmbGlobalMappingResponse;
});

// How each version's messages convert.

macro_rules! all {
    ($($v:ident),*) => {$(
        into_op!($v::NewSmbGlobalMappingRequest => NewSmbGlobalMapping, |r| NewSmbGlobalMapping {
            remote_path: r.remote_path,
            local_path: r.local_path,
            username: r.username,
            password: Secret::new(r.password),
        });
        into_op!($v::RemoveSmbGlobalMappingRequest => RemoveSmbGlobalMapping,
            |r| RemoveSmbGlobalMapping { remote_path: r.remote_path });
        empty_responses!($v::NewSmbGlobalMappingResponse, $v::RemoveSmbGlobalMappingResponse);
    )*};
}
all!(v1alpha1, v1beta1, v1beta2, v1);
