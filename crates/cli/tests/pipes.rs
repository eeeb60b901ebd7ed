#![cfg(windows)]
//! The real `csi-proxyctl` binary over the real named pipes (under Wine in CI): discovery and the
//! read-only listings. The server is in this process: the memory host's sample disks and
//! volumes, the native backend for the system API (Wine's service control manager).
//!
//! Pipe names are global to the machine (the Wine prefix): this file holds ONE test, and cargo
//! runs test binaries one at a time.

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::Hosts;
use csi_proxy_server::{Config, Context};
use csi_proxy_stack_tests::pipes::PipeServer;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

/// The CLI cargo built beside this test (`target/<triple>/debug/csi-proxyctl.exe`; the test is in
/// `deps/`): the cross build does not set CARGO_BIN_EXE_*.
fn ctl_exe() -> std::path::PathBuf {
    let me = std::env::current_exe().unwrap();
    let exe = me.parent().and_then(|deps| deps.parent()).unwrap().join("csi-proxyctl.exe");
    assert!(exe.exists(), "{} not built", exe.display());
    exe
}

async fn ctl(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || Command::new(ctl_exe()).args(&args).stdin(Stdio::null()).output().unwrap())
        .await
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_over_the_pipes() {
    let memory = Arc::new(MemoryHost::sample());
    let mut hosts = Hosts::from_one(memory);
    hosts.system = csi_proxy_host::native(Default::default()).system;
    let server = PipeServer::start(csi_proxy_client_apis(), Context::new(hosts, Config::default()));

    // The pipes may take a moment to exist: wait for discovery to see them all.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let out = loop {
        let out = ctl(&["apis"]).await;
        if text(&out.stdout).contains("23 of 23 APIs answer") && !text(&out.stdout).contains("NOT_SERVING") {
            break out;
        }
        assert!(std::time::Instant::now() < deadline, "{}{}", text(&out.stdout), text(&out.stderr));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().filter(|l| l.contains(" SERVING ")).count(), 23, "{stdout}");
    assert!(stdout.contains(r"\\.\pipe\csi-proxy-disk-v1"), "{stdout}");

    let out = ctl(&["disks"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("DISK ") && stdout.contains("SERIAL-"), "{stdout}");

    // The sample disks are blank: partition one (a mutating call, run with --yes), then list.
    let out = ctl(&["--yes", "call", "disk/v1", "PartitionDisk", r#"{"disk_number": 0}"#]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = ctl(&["--json", "volumes"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let volumes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(volumes[0]["id"], "vol-0-1", "{volumes}");
    assert_eq!(volumes[0]["disk"], 0, "{volumes}");

    let out = ctl(&["service", "PlugPlay"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("Plug and Play Service") && stdout.contains("RUNNING"), "{stdout}");

    let out = ctl(&["call", "disk/v1", "GetDiskStats", r#"{"disk_number": 4242}"#]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("code NotFound (5)"), "{}", text(&out.stderr));

    server.stop().await;
}

fn csi_proxy_client_apis() -> &'static [csi_proxy_client::Api] {
    csi_proxy_client::APIS
}
