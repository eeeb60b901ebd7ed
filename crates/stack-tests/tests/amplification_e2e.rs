#![cfg(target_os = "linux")]
//! Huge request values that fail validation come back, and go to the log, bounded (and requests
//! over `MAX_REQUEST_BYTES` are not decoded at all): a 3 MB
//! volume ID used to produce a 3 MB status message (which grpcio refuses, so the client saw
//! RESOURCE_EXHAUSTED instead of the real code) and a 3 MB log line per call.

use csi_proxy_host::error::MESSAGE_MAX;
use csi_proxy_stack_tests::{logs, Scratch, TestServer};
use csi_proxy_wire::{v1, v1beta1, Group};
use tonic::Code;

/// Under the request limit, far over every message limit.
const BIG: usize = 900 << 10;

fn bounded(r: Result<impl std::fmt::Debug, tonic::Status>, code: Code) -> String {
    let status = r.expect_err("refused");
    assert_eq!(status.code(), code, "{}", &status.message()[..200.min(status.message().len())]);
    let m = status.message().to_string();
    assert!(m.len() <= MESSAGE_MAX + 64, "a status message of {} bytes", m.len());
    m
}

#[tokio::test]
async fn huge_values_in_refusals_are_cut_in_statuses_and_logs() {
    logs::install();
    let base = Scratch::new("csi-proxy-amp");
    let s = TestServer::start_native(vec![base.dir("kubelet")], Default::default()).await;

    let mut volume = v1::volume_client::VolumeClient::new(s.channel(Group::Volume, "v1").await);
    let id = "v".repeat(BIG);
    let m = bounded(
        volume.is_volume_formatted(v1::IsVolumeFormattedRequest { volume_id: id }).await,
        Code::InvalidArgument,
    );
    assert!(m.contains("bytes cut]") && m.contains("vvvv") && m.contains("malformed"), "{m}");

    let mut disk = v1beta1::disk_client::DiskClient::new(s.channel(Group::Disk, "v1beta1").await);
    let m =
        bounded(disk.disk_stats(v1beta1::DiskStatsRequest { disk_id: "9".repeat(BIG) }).await, Code::InvalidArgument);
    assert!(m.contains("out of range") && m.contains("more bytes cut]"), "{m}");

    let mut fs = v1::filesystem_client::FilesystemClient::new(s.channel(Group::Filesystem, "v1").await);
    let path = format!("{}/{}", base.join("kubelet").display(), "p".repeat(BIG));
    bounded(fs.path_exists(v1::PathExistsRequest { path }).await, Code::InvalidArgument);

    // Over the request limit: refused before it is decoded.
    let huge = "v".repeat(csi_proxy_server::MAX_REQUEST_BYTES + 1);
    bounded(volume.is_volume_formatted(v1::IsVolumeFormattedRequest { volume_id: huge }).await, Code::OutOfRange);

    let log = logs::text();
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 3 * MESSAGE_MAX + 1024, "a log line of {longest} bytes");
    assert!(log.contains("bytes cut]"), "the refusals were logged");
    s.stop().await;
}
