#![cfg(target_os = "linux")]
//! Every filesystem RPC of every version through a real socket, against the native Linux
//! backend on real directories, with containment errors arriving as gRPC codes.

use csi_proxy_stack_tests::{assert_status, Scratch, TestServer};
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, v2alpha1, Group};
use std::fs;
use std::path::PathBuf;
use tonic::Code;

/// `<tmp>/kubelet` (the root) and `<tmp>/outside` with a file in it.
struct Tree {
    base: Scratch,
}

impl Tree {
    fn new(tag: &str) -> Self {
        let base = Scratch::new(&format!("csi-proxy-nfs-{tag}"));
        base.dir("kubelet");
        base.dir("outside");
        fs::write(base.join("outside/keep"), "k").unwrap();
        Tree { base }
    }
    fn p(&self, rel: &str) -> String {
        self.base.p(rel)
    }
    fn root(&self) -> Vec<String> {
        vec![self.p("kubelet")]
    }
}

macro_rules! old_shape {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let t = Tree::new(stringify!($v));
            let s = TestServer::start_native_fs(t.root()).await;
            let mut c =
                $v::filesystem_client::FilesystemClient::new(s.channel(Group::Filesystem, stringify!($v)).await);
            let (dir, link) = (t.p("kubelet/pods/a"), t.p("kubelet/pods/l"));
            c.mkdir($v::MkdirRequest { path: dir.clone(), context: 0 }).await.unwrap();
            assert!(t.base.join("kubelet/pods/a").is_dir());
            let exists = |p: &str| $v::PathExistsRequest { path: p.into(), context: 0 };
            assert!(c.path_exists(exists(&dir)).await.unwrap().into_inner().exists);
            assert!(!c.path_exists(exists(&t.p("kubelet/none"))).await.unwrap().into_inner().exists);
            c.link_path($v::LinkPathRequest { source_path: dir.clone(), target_path: link.clone() }).await.unwrap();
            assert_eq!(fs::read_link(&link).unwrap(), PathBuf::from(&dir));
            let mp = c.is_mount_point($v::IsMountPointRequest { path: link.clone() }).await.unwrap().into_inner();
            assert!(mp.is_mount_point);
            c.rmdir($v::RmdirRequest { path: link.clone(), context: 0, force: false }).await.unwrap();
            c.rmdir($v::RmdirRequest { path: t.p("kubelet/pods"), context: 0, force: true }).await.unwrap();
            assert!(!t.base.join("kubelet/pods").exists());

            let out = t.p("kubelet/../outside/keep");
            assert_status(
                c.rmdir($v::RmdirRequest { path: out, context: 0, force: true }).await,
                Code::InvalidArgument,
                "..",
            );
            let out = t.p("outside");
            assert_status(
                c.mkdir($v::MkdirRequest { path: out.clone(), context: 0 }).await,
                Code::PermissionDenied,
                &out,
            );
            assert!(t.base.join("outside/keep").is_file());
        }
    };
}
old_shape!(v1alpha1_native, v1alpha1);
old_shape!(v1beta1_native, v1beta1);

macro_rules! current_shape {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let t = Tree::new(stringify!($v));
            let s = TestServer::start_native_fs(t.root()).await;
            let mut c =
                $v::filesystem_client::FilesystemClient::new(s.channel(Group::Filesystem, stringify!($v)).await);
            let (global, publish) = (t.p("kubelet/plugins/g"), t.p("kubelet/pods/p/mount"));
            c.mkdir($v::MkdirRequest { path: global.clone() }).await.unwrap();
            c.mkdir($v::MkdirRequest { path: t.p("kubelet/pods/p") }).await.unwrap();
            c.mkdir($v::MkdirRequest { path: global.clone() }).await.unwrap();
            fs::write(t.base.join("kubelet/plugins/g/data"), "d").unwrap();
            let ln =
                |src: &str, tgt: &str| $v::CreateSymlinkRequest { source_path: src.into(), target_path: tgt.into() };
            c.create_symlink(ln(&global, &publish)).await.unwrap();
            c.create_symlink(ln(&global, &publish)).await.unwrap();
            assert_status(c.create_symlink(ln(&t.p("kubelet/pods"), &publish)).await, Code::AlreadyExists, &publish);
            let is_ln = |p: &str| $v::IsSymlinkRequest { path: p.into() };
            assert!(c.is_symlink(is_ln(&publish)).await.unwrap().into_inner().is_symlink);
            assert!(!c.is_symlink(is_ln(&global)).await.unwrap().into_inner().is_symlink);
            let exists = |p: &str| $v::PathExistsRequest { path: p.into() };
            assert!(c.path_exists(exists(&format!("{publish}/data"))).await.unwrap().into_inner().exists);
            assert_status(
                c.rmdir($v::RmdirRequest { path: global.clone(), force: false }).await,
                Code::FailedPrecondition,
                "not empty",
            );
            c.rmdir($v::RmdirRequest { path: publish.clone(), force: false }).await.unwrap();
            assert!(t.base.join("kubelet/plugins/g/data").is_file(), "only the link went");
            c.rmdir($v::RmdirRequest { path: global.clone(), force: true }).await.unwrap();
            c.rmdir($v::RmdirRequest { path: global.clone(), force: true }).await.unwrap();
            assert_status(
                c.rmdir($v::RmdirRequest { path: global.clone(), force: false }).await,
                Code::NotFound,
                &global,
            );

            // A link planted inside the root that leads out can't be used.
            std::os::unix::fs::symlink(t.p("outside"), t.base.join("kubelet/esc")).unwrap();
            let via = t.p("kubelet/esc/keep");
            assert_status(c.path_exists(exists(&via)).await, Code::PermissionDenied, "working directories");
            assert_status(
                c.rmdir($v::RmdirRequest { path: via, force: true }).await,
                Code::PermissionDenied,
                "working directories",
            );
            assert_status(
                c.is_symlink(is_ln(&t.p("kubelet/esc"))).await,
                Code::PermissionDenied,
                "working directories",
            );
            assert!(t.base.join("outside/keep").is_file());
        }
    };
}
current_shape!(v1beta2_native, v1beta2);
current_shape!(v1_native, v1);
current_shape!(v2alpha1_native, v2alpha1);

#[tokio::test]
async fn v2alpha1_rmdir_contents_native() {
    let t = Tree::new("contents");
    let s = TestServer::start_native_fs(t.root()).await;
    let mut c = v2alpha1::filesystem_client::FilesystemClient::new(s.channel(Group::Filesystem, "v2alpha1").await);
    fs::create_dir_all(t.base.join("kubelet/d/sub")).unwrap();
    fs::write(t.base.join("kubelet/d/sub/f"), "f").unwrap();
    std::os::unix::fs::symlink(t.p("outside"), t.base.join("kubelet/d/esc")).unwrap();
    c.rmdir_contents(v2alpha1::RmdirContentsRequest { path: t.p("kubelet/d") }).await.unwrap();
    assert!(t.base.join("kubelet/d").is_dir());
    assert_eq!(fs::read_dir(t.base.join("kubelet/d")).unwrap().count(), 0);
    assert!(t.base.join("outside/keep").is_file());
    let root = t.p("kubelet");
    assert_status(
        c.rmdir_contents(v2alpha1::RmdirContentsRequest { path: root }).await,
        Code::PermissionDenied,
        "refusing",
    );
}
