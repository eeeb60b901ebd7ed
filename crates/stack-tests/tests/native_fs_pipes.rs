#![cfg(windows)]
//! Every filesystem RPC of every version over the real named pipes
//! (`\\.\pipe\csi-proxy-filesystem-<version>`), served by the native Windows host against a real
//! directory tree: what a CSI driver on a node sees, minus real symlinks (under Wine,
//! CreateSymbolicLinkW is a stub; CreateSymlink must then fail rather than claim success).
//!
//! Pipe names are global, so this file serves them once, from its single test.

use csi_proxy_host::paths::Roots;
use csi_proxy_host::Config as HostConfig;
use csi_proxy_server::{Config, Context};
use csi_proxy_stack_tests::pipes::{channel, PipeServer};
use csi_proxy_stack_tests::{assert_status, Scratch};
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, v2alpha1, Api, Group, APIS};
use std::path::{Path, PathBuf};
use tonic::Code;

/// `<temp>\csi-native-fs-<pid>` holding the root, a prefix sibling `root-evil` and `outside`.
struct Tree {
    base: Scratch,
    root: String,
}

impl Tree {
    fn new() -> Tree {
        let base = Scratch::new("csi-native-fs");
        for d in ["root", "root-evil", "outside"] {
            base.dir(d);
            std::fs::write(base.join(d).join("sentinel"), "s").unwrap();
        }
        Tree { root: base.p("root"), base }
    }
    fn p(&self, rel: &str) -> String {
        format!(r"{}\{rel}", self.root)
    }
    fn b(&self, rel: &str) -> String {
        self.base.p(rel)
    }
    fn real(&self, rel: &str) -> PathBuf {
        Path::new(&self.root).join(rel)
    }
    fn sentinels_intact(&self) {
        for d in ["root-evil", "outside"] {
            let entries: Vec<_> =
                std::fs::read_dir(self.base.join(d)).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(entries, ["sentinel"], "{d} changed");
        }
    }
}

/// v1alpha1 and v1beta1: `context` on requests, `error` on responses, LinkPath and IsMountPoint.
macro_rules! old_shape {
    ($t:expr, $v:ident) => {{
        let t: &Tree = $t;
        let v = stringify!($v);
        let mut c = $v::filesystem_client::FilesystemClient::new(channel(Group::Filesystem, v).await);
        let d = |rel: &str| t.p(&format!(r"{v}\{rel}"));

        let mk = |p: String| $v::MkdirRequest { path: p, context: $v::PathContext::Pod as i32 };
        assert_eq!(c.mkdir(mk(d(r"a\b"))).await.unwrap().into_inner().error, "");
        assert!(t.real(&format!(r"{v}\a\b")).is_dir(), "{v}");
        c.mkdir(mk(d(r"a\b"))).await.unwrap();
        assert_status(c.mkdir(mk(t.b(r"outside\x"))).await, Code::PermissionDenied, r"outside\x");
        assert_status(c.mkdir(mk(t.b(r"root-evil\x"))).await, Code::PermissionDenied, r"root-evil\x");
        assert_status(c.mkdir(mk(d(r"..\..\outside\x"))).await, Code::InvalidArgument, "`..`");
        assert_status(c.mkdir(mk(d("CON"))).await, Code::InvalidArgument, "device CON");

        let exists = |p: String| $v::PathExistsRequest { path: p, context: 0 };
        let r = c.path_exists(exists(d(r"a\b"))).await.unwrap().into_inner();
        assert!(r.exists && r.error.is_empty(), "{v}: {r:?}");
        assert!(!c.path_exists(exists(d("nope"))).await.unwrap().into_inner().exists);
        assert_status(c.path_exists(exists(t.b(r"outside\sentinel"))).await, Code::PermissionDenied, "outside");

        let link = |src: String, tgt: String| $v::LinkPathRequest { source_path: src, target_path: tgt };
        match c.link_path(link(d("a"), d("lnk"))).await {
            Ok(r) => {
                assert_eq!(r.into_inner().error, "");
                let r = c.is_mount_point($v::IsMountPointRequest { path: d("lnk") }).await.unwrap();
                assert!(r.into_inner().is_mount_point, "{v}");
            }
            Err(s) => {
                assert_eq!(s.code(), Code::Internal, "{v}: {s:?}");
                assert!(s.message().contains("no link exists"), "{v}: {s:?}");
            }
        }
        assert_status(c.link_path(link(t.b("outside"), d("out"))).await, Code::PermissionDenied, "outside");
        assert_status(c.link_path(link(d("a"), t.b(r"outside\l"))).await, Code::PermissionDenied, "outside");

        let is_mp = |p: String| $v::IsMountPointRequest { path: p };
        let r = c.is_mount_point(is_mp(d("a"))).await.unwrap().into_inner();
        assert!(!r.is_mount_point && r.error.is_empty(), "{v}: {r:?}");
        assert_status(c.is_mount_point(is_mp(d("nope"))).await, Code::NotFound, "nope");
        assert_status(c.is_mount_point(is_mp(t.b("outside"))).await, Code::PermissionDenied, "outside");

        let rm = |p: String, force: bool| $v::RmdirRequest { path: p, context: 0, force };
        assert_status(c.rmdir(rm(d("a"), false)).await, Code::FailedPrecondition, "not empty");
        assert_eq!(c.rmdir(rm(d("a"), true)).await.unwrap().into_inner().error, "");
        assert!(!t.real(&format!(r"{v}\a")).exists(), "{v}");
        assert_status(c.rmdir(rm(d("a"), false)).await, Code::NotFound, "does not exist");
        c.rmdir(rm(d("a"), true)).await.unwrap();
        assert_status(c.rmdir(rm(t.b("outside"), true)).await, Code::PermissionDenied, "outside");
        assert_status(c.rmdir(rm(t.b("root-evil"), true)).await, Code::PermissionDenied, "root-evil");
        t.sentinels_intact();
    }};
}

/// v1beta2, v1 and v2alpha1: CreateSymlink, IsSymlink, and (v2alpha1) RmdirContents.
macro_rules! current_shape {
    ($t:expr, $v:ident) => {{
        let t: &Tree = $t;
        let v = stringify!($v);
        let mut c = $v::filesystem_client::FilesystemClient::new(channel(Group::Filesystem, v).await);
        let d = |rel: &str| t.p(&format!(r"{v}\{rel}"));

        let mk = |p: String| $v::MkdirRequest { path: p };
        c.mkdir(mk(d(r"pods\x\volumes"))).await.unwrap();
        assert!(t.real(&format!(r"{v}\pods\x\volumes")).is_dir(), "{v}");
        c.mkdir(mk(d(r"PODS\X"))).await.unwrap();
        std::fs::write(t.real(&format!(r"{v}\file")), "x").unwrap();
        assert_status(c.mkdir(mk(d("file"))).await, Code::AlreadyExists, "file");
        assert_status(c.mkdir(mk(t.b(r"root-evil\x"))).await, Code::PermissionDenied, "root-evil");
        assert_status(c.mkdir(mk(d(r"x:stream"))).await, Code::InvalidArgument, "alternate data stream");
        assert_status(c.mkdir(mk(format!(r"\\?\{}", d("x")))).await, Code::InvalidArgument, "device namespace");
        assert_status(c.mkdir(mk(String::new())).await, Code::InvalidArgument, "path is empty");

        let exists = |p: String| $v::PathExistsRequest { path: p };
        assert!(c.path_exists(exists(d(r"pods\x"))).await.unwrap().into_inner().exists);
        assert!(c.path_exists(exists(d("file"))).await.unwrap().into_inner().exists);
        assert!(!c.path_exists(exists(d("nope"))).await.unwrap().into_inner().exists);
        assert_status(c.path_exists(exists(t.b("outside"))).await, Code::PermissionDenied, "outside");

        let ln = |src: String, tgt: String| $v::CreateSymlinkRequest { source_path: src, target_path: tgt };
        match c.create_symlink(ln(d(r"pods\x"), d("pv"))).await {
            Ok(_) => {
                let r = c.is_symlink($v::IsSymlinkRequest { path: d("pv") }).await.unwrap();
                assert!(r.into_inner().is_symlink, "{v}");
                c.rmdir($v::RmdirRequest { path: d("pv"), force: false }).await.unwrap();
                assert!(t.real(&format!(r"{v}\pods\x")).is_dir(), "{v}");
            }
            Err(s) => {
                assert_eq!(s.code(), Code::Internal, "{v}: {s:?}");
                assert!(s.message().contains("no link exists"), "{v}: {s:?}");
            }
        }
        assert_status(c.create_symlink(ln(d("pods"), d("file"))).await, Code::AlreadyExists, "file");
        assert_status(c.create_symlink(ln(t.b("outside"), d("out"))).await, Code::PermissionDenied, "outside");
        assert_status(c.create_symlink(ln(d("pods"), t.b(r"outside\l"))).await, Code::PermissionDenied, "outside");
        assert_status(c.create_symlink(ln(d("pods"), String::new())).await, Code::InvalidArgument, "target_path");

        let is_ln = |p: String| $v::IsSymlinkRequest { path: p };
        assert!(!c.is_symlink(is_ln(d("pods"))).await.unwrap().into_inner().is_symlink);
        assert!(!c.is_symlink(is_ln(d("file"))).await.unwrap().into_inner().is_symlink);
        assert_status(c.is_symlink(is_ln(d("nope"))).await, Code::NotFound, "nope");
        assert_status(c.is_symlink(is_ln(t.b("outside"))).await, Code::PermissionDenied, "outside");

        let rm = |p: String, force: bool| $v::RmdirRequest { path: p, force };
        assert_status(c.rmdir(rm(d("pods"), false)).await, Code::FailedPrecondition, "not empty");
        c.rmdir(rm(d(r"pods\x\volumes"), false)).await.unwrap();
        c.rmdir(rm(d("pods"), true)).await.unwrap();
        c.rmdir(rm(d("file"), false)).await.unwrap();
        assert_status(c.rmdir(rm(d("pods"), false)).await, Code::NotFound, "pods");
        c.rmdir(rm(d("pods"), true)).await.unwrap();
        assert_status(c.rmdir(rm(t.b("outside"), true)).await, Code::PermissionDenied, "outside");
        assert!(std::fs::read_dir(t.real(v)).unwrap().next().is_none(), "{v} left entries behind");
        t.sentinels_intact();
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_filesystem_rpc_of_every_version_on_real_pipes() {
    let t = Tree::new();
    let apis: Vec<Api> = APIS.iter().copied().filter(|a| a.group == Group::Filesystem).collect();
    assert_eq!(apis.len(), 5);
    let hosts = csi_proxy_host::native(HostConfig { roots: Roots::new(vec![t.root.clone()]), ..Default::default() });
    let server = PipeServer::start(&apis, Context::new(hosts, Config::default()));

    old_shape!(&t, v1alpha1);
    old_shape!(&t, v1beta1);
    current_shape!(&t, v1beta2);
    current_shape!(&t, v1);
    current_shape!(&t, v2alpha1);

    // RmdirContents exists from v2alpha1 on.
    let mut c = v2alpha1::filesystem_client::FilesystemClient::new(channel(Group::Filesystem, "v2alpha1").await);
    for f in [r"rc\a\b\f", r"rc\g"] {
        std::fs::create_dir_all(t.real(f).parent().unwrap()).unwrap();
        std::fs::write(t.real(f), "x").unwrap();
    }
    let rc = |p: String| v2alpha1::RmdirContentsRequest { path: p };
    c.rmdir_contents(rc(t.p("rc"))).await.unwrap();
    assert!(t.real("rc").is_dir() && std::fs::read_dir(t.real("rc")).unwrap().next().is_none());
    c.rmdir_contents(rc(t.p("rc"))).await.unwrap();
    assert_status(c.rmdir_contents(rc(t.p("nope"))).await, Code::NotFound, "nope");
    assert_status(c.rmdir_contents(rc(t.b("outside"))).await, Code::PermissionDenied, "outside");
    assert_status(c.rmdir_contents(rc(t.b("root-evil"))).await, Code::PermissionDenied, "root-evil");
    assert_status(c.rmdir_contents(rc(t.base.display().to_string())).await, Code::PermissionDenied, "root");
    t.sentinels_intact();
    drop(c);

    server.stop().await;
}
