#![cfg(windows)]
//! `csi-proxyctl conformance` over the real named pipes (under Wine in CI), served in this
//! process by the native Windows backend confined to a scratch kubelet directory. What it shows
//! is the honest Windows story so far: the filesystem steps run; every disk step, and every step
//! of the named Windows checks, reports "needs Windows: CreateVirtualDisk" (the scratch VHDX's
//! probe child dies calling Wine's stub); the run says how many steps could not run; and nothing
//! is left behind (no file, directory or probe VHDX in the kubelet or scratch directory).
//! Under Wine CreateSymbolicLinkW is a stub, so CreateSymlink may fail: then the run fails, as
//! it must on a node where links cannot be made.
//!
//! Pipe names are global to the machine (the Wine prefix): this file holds ONE test.

use csi_proxy_host::paths::Roots;
use csi_proxy_host::Config as HostConfig;
use csi_proxy_server::{Config, Context};
use csi_proxy_stack_tests::pipes::PipeServer;
use csi_proxy_stack_tests::Scratch;
use serde_json::Value;
use std::process::{Command, Stdio};

/// The named Windows checks (crates/cli/src/conformance/named.rs).
const NAMED: [&str; 8] = [
    "partition-right-after-online",
    "format-with-empty-label",
    "storage-provider-accepts-calls",
    "mount-point-calls-take-plain-paths",
    "paths-below-a-staged-volume-are-inside-the-roots",
    "get-volume-name-of-a-link-says-not-a-mount-point",
    "rmdir-of-a-mounted-folder-shares-with-the-mount-manager",
    "mount-point-unknown-to-mount-manager-is-removed",
];

/// The CLI cargo built beside this test: the cross build does not set CARGO_BIN_EXE_*.
fn ctl_exe() -> std::path::PathBuf {
    let me = std::env::current_exe().unwrap();
    let exe = me.parent().and_then(|deps| deps.parent()).unwrap().join("csi-proxyctl.exe");
    assert!(exe.exists(), "{} not built", exe.display());
    exe
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_over_the_pipes_reports_what_needs_windows() {
    let base = Scratch::new("csi-conformance-pipes");
    let kubelet = base.dir("kubelet");
    let scratch = base.dir("scratch");
    let hosts = csi_proxy_host::native(HostConfig { roots: Roots::new(vec![kubelet.clone()]), ..Default::default() });
    let server = PipeServer::start(csi_proxy_client::APIS, Context::new(hosts, Config::default()));

    let run = |json: bool| {
        let mut args = vec!["-timeout", "20s", "conformance", "-kubelet-path", &kubelet, "-scratch-dir", &scratch];
        if json {
            args.insert(0, "-json");
        }
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        tokio::task::spawn_blocking(move || Command::new(ctl_exe()).args(&args).stdin(Stdio::null()).output().unwrap())
    };
    let out = run(true).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let steps = r["steps"].as_array().unwrap();
    let step = |check: &str, step: &str| {
        steps.iter().find(|s| s["check"] == check && s["step"] == step).unwrap_or_else(|| panic!("{check} {step}"))
    };

    for s in ["Mkdir", "PathExists", "IsSymlink of a directory", "Rmdir", "PathExists after Rmdir"] {
        assert_eq!(step("filesystem", s)["result"], "ok", "{s}: {r:#}");
    }
    for s in steps.iter().filter(|s| s["check"] == "disk" || s["check"] == "volume" || s["check"] == "flow ebs") {
        assert_eq!(s["result"], "needs-windows", "{s}");
        assert!(s["detail"].as_str().unwrap().starts_with("CreateVirtualDisk"), "{s}");
    }
    assert!(r["needs_windows"].as_u64().unwrap() > 40, "{r:#}");
    // The named checks only a real Windows node can settle (R1–R8): each has its rows, and each
    // says which API this host lacks (Wine's CreateVirtualDisk is a stub: the probe child dies
    // calling it), not a pass or a failure.
    for name in NAMED {
        let rows: Vec<_> = steps.iter().filter(|s| s["check"] == name).collect();
        assert!(rows.len() >= 2, "{name}: {r:#}");
        for s in rows {
            assert_eq!(s["result"], "needs-windows", "{s}");
            assert!(s["detail"].as_str().unwrap().starts_with("CreateVirtualDisk"), "{s}");
        }
    }
    let symlink = &step("filesystem links", "CreateSymlink")["result"];
    let failed = r["failed"].as_u64().unwrap();
    if symlink == "ok" {
        assert_eq!(failed, 0, "{r:#}");
        assert_eq!(out.status.code(), Some(0), "{stderr}");
    } else {
        assert!(failed > 0, "{r:#}");
        assert_eq!(out.status.code(), Some(1), "{stderr}");
    }
    assert_eq!(step("cleanup", "remove mounts, links, directories, disks, files")["result"], "ok", "{r:#}");
    // The table ends with the counts and how many steps could not run here.
    let table = run(false).await.unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    eprintln!("{table}");
    let want = format!(
        "{} passed, {failed} failed, {} skipped ({} need Windows APIs this host lacks)",
        r["passed"], r["skipped"], r["needs_windows"]
    );
    assert_eq!(table.lines().rfind(|l| l.contains(" passed, ")), Some(want.as_str()), "{table}");
    for dir in [&kubelet, &scratch] {
        let left: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "{dir}: {left:?}");
    }
    server.stop().await;
}
