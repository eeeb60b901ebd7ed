//! Filesystem: v1alpha1 = v1beta1 (old RPC names, unused `context` and `error` fields, `force`
//! as field 3); v1beta2 = v1 (current names, `force` as field 2); v2alpha1 adds RmdirContents.

use super::{empty_responses, from_output, grpc_service, into_op};
use crate::ops::filesystem::*;
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, v2alpha1};

// What each version serves: `RpcName => Op: trait_method(Request) -> Response;` (see grpc_service!).

grpc_service!(v1alpha1::filesystem_server::Filesystem {
    PathExists => PathExists: path_exists(PathExistsRequest) -> PathExistsResponse;
    Mkdir => Mkdir: mkdir(MkdirRequest) -> MkdirResponse;
    Rmdir => Rmdir: rmdir(RmdirRequest) -> RmdirResponse;
    LinkPath => CreateSymlink: link_path(LinkPathRequest) -> LinkPathResponse;
    IsMountPoint => IsSymlink: is_mount_point(IsMountPointRequest) -> IsMountPointResponse;
});

grpc_service!(v1beta1::filesystem_server::Filesystem {
    PathExists => PathExists: path_exists(PathExistsRequest) -> PathExistsResponse;
    Mkdir => Mkdir: mkdir(MkdirRequest) -> MkdirResponse;
    Rmdir => Rmdir: rmdir(RmdirRequest) -> RmdirResponse;
    LinkPath => CreateSymlink: link_path(LinkPathRequest) -> LinkPathResponse;
    IsMountPoint => IsSymlink: is_mount_point(IsMountPointRequest) -> IsMountPointResponse;
});

grpc_service!(v1beta2::filesystem_server::Filesystem {
    PathExists => PathExists: path_exists(PathExistsRequest) -> PathExistsResponse;
    Mkdir => Mkdir: mkdir(MkdirRequest) -> MkdirResponse;
    Rmdir => Rmdir: rmdir(RmdirRequest) -> RmdirResponse;
    CreateSymlink => CreateSymlink: create_symlink(CreateSymlinkRequest) -> CreateSymlinkResponse;
    IsSymlink => IsSymlink: is_symlink(IsSymlinkRequest) -> IsSymlinkResponse;
});

grpc_service!(v1::filesystem_server::Filesystem {
    PathExists => PathExists: path_exists(PathExistsRequest) -> PathExistsResponse;
    Mkdir => Mkdir: mkdir(MkdirRequest) -> MkdirResponse;
    Rmdir => Rmdir: rmdir(RmdirRequest) -> RmdirResponse;
    CreateSymlink => CreateSymlink: create_symlink(CreateSymlinkRequest) -> CreateSymlinkResponse;
    IsSymlink => IsSymlink: is_symlink(IsSymlinkRequest) -> IsSymlinkResponse;
});

grpc_service!(v2alpha1::filesystem_server::Filesystem {
    PathExists => PathExists: path_exists(PathExistsRequest) -> PathExistsResponse;
    Mkdir => Mkdir: mkdir(MkdirRequest) -> MkdirResponse;
    Rmdir => Rmdir: rmdir(RmdirRequest) -> RmdirResponse;
    RmdirContents => RmdirContents: rmdir_contents(RmdirContentsRequest) -> RmdirContentsResponse;
    CreateSymlink => CreateSymlink: create_symlink(CreateSymlinkRequest) -> CreateSymlinkResponse;
    IsSymlink => IsSymlink: is_symlink(IsSymlinkRequest) -> IsSymlinkResponse;
});

// How each version's messages convert.

/// Requests that read the same in every version.
macro_rules! common {
    ($($v:ident),*) => {$(
        into_op!($v::PathExistsRequest => PathExists, |r| PathExists { path: r.path });
        into_op!($v::MkdirRequest => Mkdir, |r| Mkdir { path: r.path });
        into_op!($v::RmdirRequest => Rmdir, |r| Rmdir { path: r.path, force: r.force });
        empty_responses!($v::MkdirResponse, $v::RmdirResponse);
    )*};
}
common!(v1alpha1, v1beta1, v1beta2, v1, v2alpha1);

/// The PathContext enum of these versions is ignored, as upstream has done since v1.0.
macro_rules! old {
    ($($v:ident),*) => {$(
        from_output!($v::PathExistsResponse, bool, |o| $v::PathExistsResponse { exists: o, ..Default::default() });
        into_op!($v::LinkPathRequest => CreateSymlink,
            |r| CreateSymlink { source_path: r.source_path, target_path: r.target_path });
        empty_responses!($v::LinkPathResponse);
        into_op!($v::IsMountPointRequest => IsSymlink, |r| IsSymlink { path: r.path });
        from_output!($v::IsMountPointResponse, bool, |o| $v::IsMountPointResponse { is_mount_point: o, ..Default::default() });
    )*};
}
old!(v1alpha1, v1beta1);

macro_rules! current {
    ($($v:ident),*) => {$(
        from_output!($v::PathExistsResponse, bool, |o| $v::PathExistsResponse { exists: o });
        into_op!($v::CreateSymlinkRequest => CreateSymlink,
            |r| CreateSymlink { source_path: r.source_path, target_path: r.target_path });
        empty_responses!($v::CreateSymlinkResponse);
        into_op!($v::IsSymlinkRequest => IsSymlink, |r| IsSymlink { path: r.path });
        from_output!($v::IsSymlinkResponse, bool, |o| $v::IsSymlinkResponse { is_symlink: o });
    )*};
}
current!(v1beta2, v1, v2alpha1);

into_op!(v2alpha1::RmdirContentsRequest => RmdirContents, |r| RmdirContents { path: r.path });
empty_responses!(v2alpha1::RmdirContentsResponse);
