#![cfg(unix)]
//! Every filesystem RPC of every version, through a real socket, against the in-memory host.
//!
//! The memory host's paths are unix-like (`/a/b`); the server layer only refuses empty paths.

use csi_proxy_host::memory::Node;
use csi_proxy_stack_tests::{assert_status, TestServer};
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, v2alpha1, Group};
use tonic::transport::Channel;
use tonic::Code;

fn node(s: &TestServer, path: &str) -> Option<Node> {
    s.host.with(|st| st.tree.get(path).cloned())
}

/// `/d` with `/d/f` (a file) and `/d/sub/g` inside.
fn arrange_tree(s: &TestServer, d: &str) {
    s.host.with(|st| {
        st.tree.insert(d.into(), Node::Dir);
        st.tree.insert(format!("{d}/f"), Node::File);
        st.tree.insert(format!("{d}/sub"), Node::Dir);
        st.tree.insert(format!("{d}/sub/g"), Node::File);
    });
}

/// v1alpha1 and v1beta1: `context` (ignored) on requests, an `error` string on responses that
/// stays empty, LinkPath and IsMountPoint.
macro_rules! old_shape_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c =
                $v::filesystem_client::FilesystemClient::new(s.channel(Group::Filesystem, stringify!($v)).await);
            let pod = $v::PathContext::Pod as i32;

            // Mkdir creates parents; PathContext changes nothing.
            let mk = |p: &str, ctx: i32| $v::MkdirRequest { path: p.into(), context: ctx };
            let r = c.mkdir(mk("/a/b/c", pod)).await.unwrap().into_inner();
            assert_eq!(r.error, "");
            assert_eq!(node(&s, "/a/b"), Some(Node::Dir));
            assert_eq!(node(&s, "/a/b/c"), Some(Node::Dir));
            c.mkdir(mk("/a/b/c/", 0)).await.unwrap();
            s.host.with(|st| st.tree.insert("/file".into(), Node::File));
            assert_status(c.mkdir(mk("/file/x", 0)).await, Code::AlreadyExists, "/file");
            assert_status(c.mkdir(mk("", pod)).await, Code::InvalidArgument, "path is empty");

            // PathExists: `exists` is field 2 here, after `error`.
            let exists = |p: &str, ctx: i32| $v::PathExistsRequest { path: p.into(), context: ctx };
            let r = c.path_exists(exists("/a/b", pod)).await.unwrap().into_inner();
            assert!(r.exists);
            assert_eq!(r.error, "");
            assert!(c.path_exists(exists("/a/b/c", 0)).await.unwrap().into_inner().exists);
            assert!(!c.path_exists(exists("/nope", 0)).await.unwrap().into_inner().exists);
            assert_status(c.path_exists(exists("", 0)).await, Code::InvalidArgument, "path is empty");

            // LinkPath creates the link at target_path pointing to source_path.
            let link = |src: &str, tgt: &str| $v::LinkPathRequest { source_path: src.into(), target_path: tgt.into() };
            let r = c.link_path(link("/a/b", "/lnk")).await.unwrap().into_inner();
            assert_eq!(r.error, "");
            assert_eq!(node(&s, "/lnk"), Some(Node::Link("/a/b".into())));
            assert_eq!(node(&s, "/a/b"), Some(Node::Dir));
            c.link_path(link("/a/b", "/lnk")).await.unwrap();
            assert_status(c.link_path(link("/a", "/lnk")).await, Code::AlreadyExists, "/lnk");
            assert_status(c.link_path(link("/a", "")).await, Code::InvalidArgument, "target_path is empty");
            assert_status(c.link_path(link("", "/lnk2")).await, Code::InvalidArgument, "source_path is empty");
            assert_eq!(node(&s, "/lnk2"), None);

            // IsMountPoint = IsSymlink: a link whose target exists.
            let is_mp = |p: &str| $v::IsMountPointRequest { path: p.into() };
            let r = c.is_mount_point(is_mp("/lnk")).await.unwrap().into_inner();
            assert!(r.is_mount_point);
            assert_eq!(r.error, "");
            assert!(!c.is_mount_point(is_mp("/a/b")).await.unwrap().into_inner().is_mount_point);
            c.link_path(link("/gone", "/dangling")).await.unwrap();
            assert!(c.path_exists(exists("/dangling", 0)).await.unwrap().into_inner().exists);
            assert!(!c.is_mount_point(is_mp("/dangling")).await.unwrap().into_inner().is_mount_point);
            assert_status(c.is_mount_point(is_mp("/nope")).await, Code::NotFound, "/nope");
            assert_status(c.is_mount_point(is_mp("")).await, Code::InvalidArgument, "path is empty");

            // Rmdir: `force` (field 3) removes non-empty and missing directories.
            let rm = |p: &str, ctx: i32, force: bool| $v::RmdirRequest { path: p.into(), context: ctx, force };
            arrange_tree(&s, "/d");
            assert_status(c.rmdir(rm("/d", pod, false)).await, Code::FailedPrecondition, "/d");
            assert_eq!(node(&s, "/d/sub/g"), Some(Node::File));
            let r = c.rmdir(rm("/d", 0, true)).await.unwrap().into_inner();
            assert_eq!(r.error, "");
            assert!(s.host.with(|st| !st.tree.keys().any(|k| k == "/d" || k.starts_with("/d/"))));
            assert_status(c.rmdir(rm("/d", 0, false)).await, Code::NotFound, "/d");
            c.rmdir(rm("/d", 0, true)).await.unwrap();
            // A link is removed as a link; its target stays.
            c.rmdir(rm("/lnk", 0, false)).await.unwrap();
            assert_eq!(node(&s, "/lnk"), None);
            assert_eq!(node(&s, "/a/b"), Some(Node::Dir));
            c.rmdir(rm("/a/b/c", pod, false)).await.unwrap();
            assert_eq!(node(&s, "/a/b/c"), None);
            assert_status(c.rmdir(rm("", 0, true)).await, Code::InvalidArgument, "path is empty");
        }
    };
}
old_shape_test!(v1alpha1_old_shape, v1alpha1);
old_shape_test!(v1beta1_old_shape, v1beta1);

/// v1beta2, v1 and v2alpha1: CreateSymlink, IsSymlink, `force` as field 2.
macro_rules! current_shape_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c =
                $v::filesystem_client::FilesystemClient::new(s.channel(Group::Filesystem, stringify!($v)).await);

            let mk = |p: &str| $v::MkdirRequest { path: p.into() };
            c.mkdir(mk("/var/lib/kubelet/pods")).await.unwrap();
            assert_eq!(node(&s, "/var/lib"), Some(Node::Dir));
            assert_eq!(node(&s, "/var/lib/kubelet/pods"), Some(Node::Dir));
            c.mkdir(mk("/var/lib/kubelet/pods")).await.unwrap();
            s.host.with(|st| st.tree.insert("/var/f".into(), Node::File));
            assert_status(c.mkdir(mk("/var/f")).await, Code::AlreadyExists, "/var/f");
            assert_status(c.mkdir(mk("")).await, Code::InvalidArgument, "path is empty");

            let exists = |p: &str| $v::PathExistsRequest { path: p.into() };
            assert!(c.path_exists(exists("/var/lib/kubelet")).await.unwrap().into_inner().exists);
            assert!(c.path_exists(exists("/var/f")).await.unwrap().into_inner().exists);
            assert!(!c.path_exists(exists("/var/g")).await.unwrap().into_inner().exists);
            assert_status(c.path_exists(exists("")).await, Code::InvalidArgument, "path is empty");

            // CreateSymlink: the link is created at target_path and points to source_path.
            let ln =
                |src: &str, tgt: &str| $v::CreateSymlinkRequest { source_path: src.into(), target_path: tgt.into() };
            c.create_symlink(ln("/var/lib/kubelet/pods", "/pv")).await.unwrap();
            assert_eq!(node(&s, "/pv"), Some(Node::Link("/var/lib/kubelet/pods".into())));
            c.create_symlink(ln("/var/lib/kubelet/pods", "/pv")).await.unwrap();
            assert_status(c.create_symlink(ln("/var", "/pv")).await, Code::AlreadyExists, "/pv");
            assert_status(c.create_symlink(ln("/var", "/var/f")).await, Code::AlreadyExists, "/var/f");
            assert_status(c.create_symlink(ln("", "")).await, Code::InvalidArgument, "target_path is empty");
            assert_status(c.create_symlink(ln("", "/pv2")).await, Code::InvalidArgument, "source_path is empty");
            assert_status(c.create_symlink(ln("/var", "")).await, Code::InvalidArgument, "target_path is empty");
            assert_eq!(node(&s, "/pv2"), None);

            let is_ln = |p: &str| $v::IsSymlinkRequest { path: p.into() };
            assert!(c.is_symlink(is_ln("/pv")).await.unwrap().into_inner().is_symlink);
            assert!(c.is_symlink(is_ln("/pv/")).await.unwrap().into_inner().is_symlink);
            assert!(!c.is_symlink(is_ln("/var/lib")).await.unwrap().into_inner().is_symlink);
            assert!(!c.is_symlink(is_ln("/var/f")).await.unwrap().into_inner().is_symlink);
            c.create_symlink(ln("/missing", "/dangling")).await.unwrap();
            // A dangling link still exists (upstream uses Lstat).
            assert!(c.path_exists(exists("/dangling")).await.unwrap().into_inner().exists);
            assert!(!c.is_symlink(is_ln("/dangling")).await.unwrap().into_inner().is_symlink);
            assert_status(c.is_symlink(is_ln("/nope")).await, Code::NotFound, "/nope");
            assert_status(c.is_symlink(is_ln("")).await, Code::InvalidArgument, "path is empty");

            // Rmdir: `force` (field 2 from v1beta2 on).
            let rm = |p: &str, force: bool| $v::RmdirRequest { path: p.into(), force };
            arrange_tree(&s, "/d");
            assert_status(c.rmdir(rm("/d", false)).await, Code::FailedPrecondition, "not empty");
            assert_eq!(node(&s, "/d/sub/g"), Some(Node::File));
            c.rmdir(rm("/d", true)).await.unwrap();
            assert!(s.host.with(|st| !st.tree.keys().any(|k| k == "/d" || k.starts_with("/d/"))));
            assert_status(c.rmdir(rm("/d", false)).await, Code::NotFound, "/d");
            c.rmdir(rm("/d", true)).await.unwrap();
            c.rmdir(rm("/pv", false)).await.unwrap();
            assert_eq!(node(&s, "/pv"), None);
            assert_eq!(node(&s, "/var/lib/kubelet/pods"), Some(Node::Dir));
            c.rmdir(rm("/var/lib/kubelet/pods", false)).await.unwrap();
            assert_eq!(node(&s, "/var/lib/kubelet/pods"), None);
            assert_eq!(node(&s, "/var/lib/kubelet"), Some(Node::Dir));
            assert_status(c.rmdir(rm("", true)).await, Code::InvalidArgument, "path is empty");
        }
    };
}
current_shape_test!(v1beta2_current_shape, v1beta2);
current_shape_test!(v1_current_shape, v1);
current_shape_test!(v2alpha1_current_shape, v2alpha1);

#[tokio::test]
async fn v2alpha1_rmdir_contents_keeps_the_directory() {
    let s = TestServer::start().await;
    let mut c = v2alpha1::filesystem_client::FilesystemClient::new(s.channel(Group::Filesystem, "v2alpha1").await);
    arrange_tree(&s, "/d");
    s.host.with(|st| st.tree.insert("/dx".into(), Node::File));
    let rc = |p: &str| v2alpha1::RmdirContentsRequest { path: p.into() };
    c.rmdir_contents(rc("/d")).await.unwrap();
    assert_eq!(node(&s, "/d"), Some(Node::Dir));
    assert!(s.host.with(|st| !st.tree.keys().any(|k| k.starts_with("/d/"))));
    // A sibling that merely shares the name prefix is not a child.
    assert_eq!(node(&s, "/dx"), Some(Node::File));
    c.rmdir_contents(rc("/d")).await.unwrap();
    assert_status(c.rmdir_contents(rc("/nope")).await, Code::NotFound, "/nope");
    assert_status(c.rmdir_contents(rc("/dx")).await, Code::NotFound, "/dx");
    assert_status(c.rmdir_contents(rc("")).await, Code::InvalidArgument, "path is empty");
}

/// Hand-encoded protobuf over the real socket, so the field numbers themselves are checked rather
/// than whatever the generated code of the same .proto files agrees on.
mod raw {
    use bytes::{Buf, BufMut};
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    use tonic::transport::Channel;
    use tonic::Status;

    pub struct Bytes;
    impl Encoder for Bytes {
        type Item = Vec<u8>;
        type Error = Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            dst.put_slice(&item);
            Ok(())
        }
    }
    impl Decoder for Bytes {
        type Item = Vec<u8>;
        type Error = Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
            Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
        }
    }
    pub struct RawCodec;
    impl Codec for RawCodec {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Bytes;
        type Decoder = Bytes;
        fn encoder(&mut self) -> Bytes {
            Bytes
        }
        fn decoder(&mut self) -> Bytes {
            Bytes
        }
    }

    pub async fn call(ch: Channel, path: &'static str, body: Vec<u8>) -> Result<Vec<u8>, Status> {
        let mut g = tonic::client::Grpc::new(ch);
        g.ready().await.expect("ready");
        let path = http::uri::PathAndQuery::from_static(path);
        g.unary(tonic::Request::new(body), path, RawCodec).await.map(|r| r.into_inner())
    }

    /// A length-delimited field (short strings only).
    pub fn string(field: u8, s: &str) -> Vec<u8> {
        assert!(s.len() < 128);
        let mut v = vec![(field << 3) | 2, s.len() as u8];
        v.extend_from_slice(s.as_bytes());
        v
    }

    /// A varint field with a one-byte value.
    pub fn varint(field: u8, value: u8) -> Vec<u8> {
        assert!(value < 128);
        vec![field << 3, value]
    }
}

async fn raw_rmdir(ch: Channel, method: &'static str, fields: &[Vec<u8>]) -> Result<Vec<u8>, tonic::Status> {
    raw::call(ch, method, fields.concat()).await
}

#[tokio::test]
async fn rmdir_force_is_field_3_before_v1beta2_and_field_2_after() {
    let s = TestServer::start().await;
    for v in ["v1alpha1", "v1beta1"] {
        let method: &'static str =
            if v == "v1alpha1" { "/v1alpha1.Filesystem/Rmdir" } else { "/v1beta1.Filesystem/Rmdir" };
        arrange_tree(&s, "/r");
        // Field 2 is `context` (POD = 1) here, not `force`.
        let r =
            raw_rmdir(s.channel(Group::Filesystem, v).await, method, &[raw::string(1, "/r"), raw::varint(2, 1)]).await;
        assert_status(r, Code::FailedPrecondition, "not empty");
        assert_eq!(node(&s, "/r/f"), Some(Node::File), "{v}");
        let r = raw_rmdir(s.channel(Group::Filesystem, v).await, method, &[raw::string(1, "/r"), raw::varint(3, 1)])
            .await
            .unwrap();
        // RmdirResponse{1 error}: nothing set, so an empty message.
        assert!(r.is_empty(), "{v}: {r:?}");
        assert_eq!(node(&s, "/r"), None, "{v}");
    }
    for (v, method) in [
        ("v1beta2", "/v1beta2.Filesystem/Rmdir"),
        ("v1", "/v1.Filesystem/Rmdir"),
        ("v2alpha1", "/v2alpha1.Filesystem/Rmdir"),
    ] {
        arrange_tree(&s, "/r");
        // Field 3 is unknown from v1beta2 on and must be ignored, not read as `force`.
        let r =
            raw_rmdir(s.channel(Group::Filesystem, v).await, method, &[raw::string(1, "/r"), raw::varint(3, 1)]).await;
        assert_status(r, Code::FailedPrecondition, "not empty");
        assert_eq!(node(&s, "/r/sub/g"), Some(Node::File), "{v}");
        let r = raw_rmdir(s.channel(Group::Filesystem, v).await, method, &[raw::string(1, "/r"), raw::varint(2, 1)])
            .await
            .unwrap();
        assert!(r.is_empty(), "{v}: {r:?}");
        assert_eq!(node(&s, "/r"), None, "{v}");
    }
}

#[tokio::test]
async fn path_exists_and_is_symlink_answer_in_each_versions_field() {
    let s = TestServer::start().await;
    s.host.with(|st| {
        st.tree.insert("/e".into(), Node::Dir);
        st.tree.insert("/l".into(), Node::Link("/e".into()));
    });
    // exists: field 2 (after `error`) in v1alpha1/v1beta1, field 1 from v1beta2 on.
    let cases: [(&str, &'static str, &'static str, u8); 5] = [
        ("v1alpha1", "/v1alpha1.Filesystem/PathExists", "/v1alpha1.Filesystem/IsMountPoint", 2),
        ("v1beta1", "/v1beta1.Filesystem/PathExists", "/v1beta1.Filesystem/IsMountPoint", 2),
        ("v1beta2", "/v1beta2.Filesystem/PathExists", "/v1beta2.Filesystem/IsSymlink", 1),
        ("v1", "/v1.Filesystem/PathExists", "/v1.Filesystem/IsSymlink", 1),
        ("v2alpha1", "/v2alpha1.Filesystem/PathExists", "/v2alpha1.Filesystem/IsSymlink", 1),
    ];
    for (v, exists, is_link, field) in cases {
        let r = raw::call(s.channel(Group::Filesystem, v).await, exists, raw::string(1, "/e")).await.unwrap();
        assert_eq!(r, raw::varint(field, 1), "{v} PathExists");
        let r = raw::call(s.channel(Group::Filesystem, v).await, is_link, raw::string(1, "/l")).await.unwrap();
        assert_eq!(r, raw::varint(field, 1), "{v} IsSymlink/IsMountPoint");
        // false is proto3's default and is not sent at all; `error` stays unset.
        let r = raw::call(s.channel(Group::Filesystem, v).await, exists, raw::string(1, "/x")).await.unwrap();
        assert!(r.is_empty(), "{v}: {r:?}");
    }
}
