//! `csi-proxyctl conformance`: named checks of the daemon running on this node. Each group's calls
//! and each block driver's node flow (the `csi-proxy-flows` crate, the sequences the stack tests
//! run) go to the daemon on scratch disks and in a scratch directory under the kubelet path, all
//! made by this run and removed by it (see [`scratch`]). A step that fails ends its check (the
//! rest of it is listed as skipped); the other checks still run.

mod caller;
pub mod check;
mod interlock;
mod marker;
mod named;
mod remote;
mod scratch;
mod service;
#[cfg(windows)]
mod vhd;
pub use remote::Given;
#[cfg(windows)]
pub use vhd::{probe_main as vhd_probe_main, PROBE_ARG as VHD_PROBE_ARG};

use crate::{table, Ctx, Failure};
use csi_proxy_client::{v1, Code, Group, Status};
use csi_proxy_flows::{self as flows, azuredisk, ebs, gce_pd, vsphere, BlockVolume, Local, Node, Proxy};
use remote::Remote;
use scratch::{Made, Unavailable};
use serde_json::json;
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// Each scratch disk's size, then its size after it grows (XFS needs 300 MB at least, and the
/// daemon's -linux-fs-type may be XFS). The backing files are sparse.
const SIZE: u64 = 320 * MIB;
const GROWN: u64 = 640 * MIB;
/// The kubelet's names for a volume's folders (a SHA-256 hex and a pod UID).
const HASH: &str = "7d5f1c0a3b9e8d2f4a6c1e0b9d8f7a6c5e4d3b2a19f8e7d6c5b4a39281706f5e";
const POD: &str = "2c9b8a7f-6e5d-4c3b-a291-8f7e6d5c4b3a";
/// Most of a daemon's message quoted in a result.
const MAX_QUOTE: usize = 300;
/// Most of a result shown in the table.
const CELL: usize = 72;

/// A step's result.
#[derive(Debug, Clone)]
enum Res {
    Ok,
    Failed(String),
    Skipped(String),
    NeedsWindows(String),
}

impl Res {
    fn text(&self) -> String {
        match self {
            Res::Ok => "ok".into(),
            Res::Failed(why) => format!("FAILED: {why}"),
            Res::Skipped(why) => format!("skipped: {why}"),
            Res::NeedsWindows(api) => format!("needs Windows: {api}"),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Res::Ok => "ok",
            Res::Failed(_) => "failed",
            Res::Skipped(_) => "skipped",
            Res::NeedsWindows(_) => "needs-windows",
        }
    }
}

/// Why a step did not succeed: it failed, or it could not be checked here.
enum StepErr {
    Failed(String),
    Skip(String),
}

fn bounded(s: &str) -> String {
    crate::term::bounded(s, MAX_QUOTE).into_owned()
}

impl From<Status> for StepErr {
    fn from(s: Status) -> Self {
        // Bounded when recorded (after the secrets are withheld).
        StepErr::Failed(format!("{:?}: {}", s.code(), s.message()))
    }
}

impl From<flows::Failure> for StepErr {
    fn from(f: flows::Failure) -> Self {
        StepErr::Failed(format!("{:?}: {}", f.code, f.message))
    }
}

impl From<anyhow::Error> for StepErr {
    fn from(e: anyhow::Error) -> Self {
        StepErr::Failed(format!("{e:#}"))
    }
}

fn wrong(what: impl Into<String>) -> StepErr {
    StepErr::Failed(what.into())
}

type Step<T = ()> = Result<T, StepErr>;

struct Row {
    check: &'static str,
    step: String,
    res: Res,
    time: Duration,
}

struct Report {
    rows: Vec<Row>,
    timeout: Duration,
    /// The step running, for the report when a stop signal ends it.
    running: Option<(&'static str, String, Instant)>,
    /// Passwords and secrets of the run: withheld from every result recorded.
    secrets: Vec<String>,
}

/// What a result shows instead of a secret.
const WITHHELD: &str = "<withheld>";

/// One named check: its steps run in order until one fails.
struct Check<'r> {
    report: &'r mut Report,
    name: check::Name,
    /// What the remaining steps get instead of running.
    blocked: Option<Res>,
}

impl Report {
    /// The check `name` (one of [`check::CHECKS`]: there is no other way to make a name).
    fn check(&mut self, name: check::Name) -> Check<'_> {
        Check { report: self, name, blocked: None }
    }

    fn count(&self, kind: &str) -> usize {
        self.rows.iter().filter(|r| r.res.kind() == kind).count()
    }

    /// Records a row: its result with the secrets withheld, then bounded.
    fn push(&mut self, check: &'static str, step: String, res: Res, time: Duration) {
        let clean = |text: &str| {
            let mut text = text.to_owned();
            // Longest first: the wrong password holds the real one.
            let mut secrets: Vec<&String> = self.secrets.iter().filter(|s| !s.is_empty()).collect();
            secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
            for s in secrets {
                text = text.replace(s.as_str(), WITHHELD);
            }
            bounded(&text)
        };
        let res = match res {
            Res::Ok => Res::Ok,
            Res::Failed(s) => Res::Failed(clean(&s)),
            Res::Skipped(s) => Res::Skipped(clean(&s)),
            Res::NeedsWindows(s) => Res::NeedsWindows(clean(&s)),
        };
        let step = clean(&step);
        self.rows.push(Row { check, step, res, time });
    }
}

impl Check<'_> {
    fn row(&mut self, step: &str, res: Res, time: Duration) {
        self.report.push(self.name.as_str(), step.to_owned(), res, time);
    }

    /// Runs `step` (bounded by the timeout) unless an earlier step failed; its value on success.
    async fn run<T>(&mut self, step: &str, fut: impl Future<Output = Step<T>>) -> Option<T> {
        if let Some(res) = self.blocked.clone() {
            self.row(step, res, Duration::ZERO);
            return None;
        }
        let start = Instant::now();
        let limit = self.report.timeout;
        self.report.running = Some((self.name.as_str(), step.to_owned(), start));
        let answer = tokio::time::timeout(limit, fut).await;
        self.report.running = None;
        let (res, value) = match answer {
            Ok(Ok(v)) => (Res::Ok, Some(v)),
            Ok(Err(StepErr::Skip(why))) => (Res::Skipped(why), None),
            Ok(Err(StepErr::Failed(why))) => (Res::Failed(why), None),
            Err(_) => (Res::Failed(format!("no answer within {limit:?} (raise it with -timeout)")), None),
        };
        if matches!(res, Res::Failed(_)) {
            self.blocked = Some(Res::Skipped("an earlier step failed".into()));
        }
        self.row(step, res, start.elapsed());
        value
    }

    /// The remaining steps get `res` instead of running.
    fn block(&mut self, res: Res) {
        self.blocked.get_or_insert(res);
    }

    fn failed(&self) -> bool {
        self.blocked.is_some()
    }
}

/// What the drivers do on the node themselves.
struct FsLocal;

impl Local for FsLocal {
    fn mkdir_all(&self, path: &str) {
        // A failure shows in the csi-proxy call that follows.
        let _ = std::fs::create_dir_all(path);
    }
    fn readlink(&self, path: &str) -> Option<String> {
        std::fs::read_link(path).ok().and_then(|p| p.to_str().map(str::to_owned))
    }
}

/// The run: connects, makes the scratch directories, runs the checks until they end or a stop
/// signal comes, removes what it made, and prints the report.
pub async fn run(
    ctx: &Ctx,
    kubelet_path: &Path,
    scratch_dir: &Path,
    given: Given,
    audit_log: Option<&Path>,
) -> Result<(), Failure> {
    // Handlers first: a stop from here on goes through the cleanup.
    let mut stop = StopSignals::new()?;
    let mut channels = Vec::new();
    for (group, version) in flows::APIS {
        let api = csi_proxy_client::find_api(group.name(), version).expect("a served API");
        channels.push(((group, version), ctx.connect(api).await?));
    }
    let mut proxy = Proxy::connect(|g: Group, v| {
        let ch = channels.iter().find(|(k, _)| *k == (g, v)).map(|(_, c)| c.clone()).expect("connected above");
        std::future::ready(ch)
    })
    .await;
    if cfg!(target_os = "linux") {
        proxy.not_sent.push(("disk/v1.SetDiskState", "a loop disk has no online state"));
    }
    let iscsi = match &given.iscsi {
        None => None,
        Some(_) => {
            let api = csi_proxy_client::find_api("iscsi", "v1alpha2").expect("a served API");
            Some(ctx.connect(api).await?)
        }
    };
    let mut remote = Remote::new(given, iscsi);
    // What earlier runs killed outright left, before this run makes anything.
    let leftovers = marker::clean_dead(kubelet_path);
    let mut made = Made::new(kubelet_path, scratch_dir)?;
    let secrets = remote.secrets();
    let mut report = Report { rows: Vec::new(), timeout: ctx.timeout, running: None, secrets };
    leftover_rows(&mut report, leftovers);
    let stopped = tokio::select! {
        () = checks(&mut report, &mut proxy, &mut made, &mut remote, audit_log) => None,
        sig = stop.recv() => Some(sig),
    };
    if let (Some(sig), Some((check, step, start))) = (stopped, report.running.take()) {
        let res = Res::Failed(format!("stopped by {sig}"));
        report.push(check, step, res, start.elapsed());
    }
    let mut c = report.check(check::CLEANUP);
    if let Some(sig) = stopped {
        c.row("run", Res::Failed(format!("stopped by {sig}")), Duration::ZERO);
    }
    // What the smb and iscsi checks left on the daemon's side, through the daemon (bounded: it
    // may be what stopped answering).
    for (step, res, time) in remote.undo(&mut proxy, ctx.timeout).await {
        c.row(&step, res, time);
    }
    let start = Instant::now();
    let problems = made.clean();
    let res = if problems.is_empty() { Res::Ok } else { Res::Failed(bounded(&problems.join("; "))) };
    c.row("remove mounts, links, directories, disks, files", res, start.elapsed());
    print(ctx, &report, stopped);
    match report.count("failed") {
        0 => Ok(()),
        n => Err(Failure::Other(anyhow::anyhow!("{n} step(s) failed"))),
    }
}

/// `conformance -cleanup`: only removes what runs killed outright left (found by their markers
/// in the kubelet path), and reports it as the run's report does.
pub fn cleanup(ctx: &Ctx, kubelet_path: &Path) -> Result<(), Failure> {
    let mut report = Report { rows: Vec::new(), timeout: ctx.timeout, running: None, secrets: vec![] };
    let leftovers = marker::clean_dead(kubelet_path);
    if leftovers.is_empty() {
        let step = format!("no marker of a stopped run in {}", kubelet_path.join(marker::DIR).display());
        report.check(check::LEFTOVERS).row(&step, Res::Ok, Duration::ZERO);
    }
    leftover_rows(&mut report, leftovers);
    print(ctx, &report, None);
    match report.count("failed") {
        0 => Ok(()),
        n => Err(Failure::Other(anyhow::anyhow!("{n} run(s) left what could not be removed"))),
    }
}

/// One row of the check `leftovers` per marker found: removed (ok), its run still running
/// (skipped), or left in place (failed, with why).
fn leftover_rows(report: &mut Report, leftovers: Vec<marker::Leftover>) {
    let mut c = report.check(check::LEFTOVERS);
    for l in leftovers {
        let (step, res) = match l.outcome {
            marker::Outcome::Removed(dirs) => (format!("remove what run {} left: {}", l.run, dirs.join(", ")), Res::Ok),
            marker::Outcome::Running(why) => (format!("run {}", l.run), Res::Skipped(why)),
            marker::Outcome::Failed(why) => (format!("remove what run {} left", l.run), Res::Failed(why)),
        };
        c.row(&step, res, Duration::ZERO);
    }
}

fn print(ctx: &Ctx, report: &Report, stopped: Option<&'static str>) {
    print!("{}", render(ctx.json, report, stopped));
}

/// The report as a table (then the long failures and the counts), or as JSON.
fn render(json: bool, report: &Report, stopped: Option<&'static str>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let (passed, failed) = (report.count("ok"), report.count("failed"));
    let needs_windows = report.count("needs-windows");
    let skipped = report.count("skipped") + needs_windows;
    if json {
        let steps: Vec<_> = report
            .rows
            .iter()
            .map(|r| {
                let detail = match &r.res {
                    Res::Ok => None,
                    Res::Failed(s) | Res::Skipped(s) | Res::NeedsWindows(s) => Some(s.clone()),
                };
                json!({"check": r.check, "step": r.step, "result": r.res.kind(), "detail": detail,
                       "seconds": r.time.as_secs_f64()})
            })
            .collect();
        let doc = json!({"steps": steps, "passed": passed, "failed": failed, "skipped": skipped,
                         "needs_windows": needs_windows, "stopped_by": stopped});
        return format!("{}\n", crate::term::json_pretty(&doc));
    }
    // Long reasons would widen every line: the table shows their start, the failures follow
    // it in full (as bounded as the JSON's).
    let rows: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|r| {
            let mut result: String = r.res.text().chars().take(CELL).collect();
            if result.chars().count() < r.res.text().chars().count() {
                result.push('…');
            }
            vec![r.check.to_owned(), r.step.clone(), result, format!("{:.2}s", r.time.as_secs_f64())]
        })
        .collect();
    out.push_str(&table::render(&["CHECK", "STEP", "RESULT", "TIME"], &rows));
    for r in report.rows.iter().filter(|r| matches!(r.res, Res::Failed(_)) && r.res.text().chars().count() > CELL) {
        let (step, res) = (crate::term::printable(&r.step), r.res.text());
        let res = crate::term::printable(&res);
        let _ = writeln!(out, "{} / {step}: {res}", r.check);
    }
    let mut last = format!("{passed} passed, {failed} failed, {skipped} skipped");
    if needs_windows > 0 {
        last.push_str(&format!(" ({needs_windows} need Windows APIs this host lacks)"));
    }
    let _ = writeln!(out, "{last}");
    out
}

/// Ctrl-C, and SIGTERM on unix (what a pod's stop and `kill` send).
struct StopSignals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(windows)]
    c: tokio::signal::windows::CtrlC,
    #[cfg(windows)]
    brk: tokio::signal::windows::CtrlBreak,
}

impl StopSignals {
    fn new() -> Result<StopSignals, Failure> {
        let e = |e: std::io::Error| Failure::Other(anyhow::anyhow!("installing the stop handlers: {e}"));
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignals {
                int: signal(SignalKind::interrupt()).map_err(e)?,
                term: signal(SignalKind::terminate()).map_err(e)?,
            })
        }
        #[cfg(windows)]
        {
            Ok(StopSignals {
                c: tokio::signal::windows::ctrl_c().map_err(e)?,
                brk: tokio::signal::windows::ctrl_break().map_err(e)?,
            })
        }
    }

    async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
        #[cfg(windows)]
        tokio::select! {
            _ = self.c.recv() => "Ctrl-C",
            _ = self.brk.recv() => "Ctrl-Break",
        }
    }
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

async fn checks(report: &mut Report, p: &mut Proxy, made: &mut Made, remote: &mut Remote, audit_log: Option<&Path>) {
    let root = text(&made.kubelet_dir);
    let node = if cfg!(windows) { Node::windows(&root) } else { Node::linux(&root) };
    filesystem(report, p, &node).await;
    disk_and_volume(report, p, made, &node).await;
    system(report, p).await;
    interlock::interlock_dry_run(report, p).await;
    for driver in [Driver::AzureDisk, Driver::GcePd, Driver::Ebs, Driver::Vsphere] {
        block_flow(report, p, made, &node, driver).await;
    }
    named::windows_checks(report, p, made, &node).await;
    caller::caller_identity(report, p, &root, audit_log).await;
    named::audit_file_dacl(report, audit_log).await;
    named::preshutdown(report).await;
    remote::smb(report, p, remote, &root, sep(&node)).await;
    remote::smb_errors(report, p, remote).await;
    remote::iscsi(report, remote).await;
}

/// Mkdir, PathExists, IsSymlink, Rmdir in the scratch directory; the links in a check of their
/// own, so that a host without them (Wine) still runs the rest.
async fn filesystem(report: &mut Report, p: &mut Proxy, node: &Node) {
    let base = format!("{}{}filesystem", node.publish_root, sep(node));
    let dir = format!("{base}{}dir", sep(node));
    let link = format!("{base}{}link", sep(node));
    let mut c = report.check(check::FILESYSTEM);
    c.run("Mkdir", async { Ok(p.mkdir(&dir).await?) }).await;
    c.run("PathExists", async { expect(p.path_exists(&dir).await?, true, "PathExists of the new directory") }).await;
    c.run("IsSymlink of a directory", async { expect(p.is_symlink(&dir).await?, false, "IsSymlink of a directory") })
        .await;
    let dirs_failed = c.failed();

    let mut c = report.check(check::FILESYSTEM_LINKS);
    if dirs_failed {
        c.block(Res::Skipped("the filesystem check did not pass".into()));
    }
    c.run("CreateSymlink", async { Ok(p.create_symlink(&dir, &link).await?) }).await;
    c.run("IsSymlink", async { expect(p.is_symlink(&link).await?, true, "IsSymlink of the new link") }).await;
    c.run("Rmdir of the link", async { Ok(p.rmdir(&link, true).await?) }).await;

    let mut c = report.check(check::FILESYSTEM);
    if dirs_failed {
        c.block(Res::Skipped("an earlier step failed".into()));
    }
    c.run("Rmdir", async { Ok(p.rmdir(&dir, false).await?) }).await;
    c.run("PathExists after Rmdir", async {
        expect(p.path_exists(&dir).await?, false, "PathExists of the removed directory")
    })
    .await;
    // Force: a link the links check could not remove is still there (the cleanup also would).
    c.run("Rmdir of the parent", async { Ok(p.rmdir(&base, true).await?) }).await;
}

fn sep(node: &Node) -> char {
    match node.os {
        flows::Os::Windows => '\\',
        flows::Os::Linux => '/',
    }
}

fn expect<T: PartialEq + std::fmt::Debug>(got: T, want: T, what: &str) -> Step {
    if got == want {
        Ok(())
    } else {
        Err(wrong(format!("{what} answered {got:?}, expected {want:?}")))
    }
}

/// Makes a scratch disk as `step`; a host that cannot blocks the check with why.
async fn new_disk(c: &mut Check<'_>, made: &mut Made) -> Option<u32> {
    let step = format!("make a {} MiB scratch disk", SIZE / MIB);
    let made_disk = c.run(&step, async { Ok(made.disks.create(SIZE)?) }).await?;
    match made_disk {
        Ok(n) => Some(n),
        Err(Unavailable::NeedsWindows(api)) => {
            if let Some(last) = c.report.rows.last_mut() {
                last.res = Res::NeedsWindows(api.clone());
            }
            c.block(Res::NeedsWindows(api));
            None
        }
    }
}

/// The disk group on a scratch disk, then the volume group on it.
/// The step ListVolumesOnDisk of the freshly partitioned disk `n`: its one volume's id, or ""
/// when the step did not pass (the check's later steps are then skipped).
async fn the_one_volume(c: &mut Check<'_>, p: &mut Proxy, n: u32) -> String {
    c.run("ListVolumesOnDisk", async {
        match &p.list_volumes_on_disk(n).await?[..] {
            [id] => Ok(id.clone()),
            ids => Err(wrong(format!("expected the one volume of the new partition, got {}", ids.len()))),
        }
    })
    .await
    .unwrap_or_default()
}

async fn disk_and_volume(report: &mut Report, p: &mut Proxy, made: &mut Made, node: &Node) {
    let mut c = report.check(check::DISK);
    let disk = new_disk(&mut c, made).await;
    let n = disk.unwrap_or(u32::MAX);
    c.run("ListDiskIDs lists it", async {
        let ids = p.disk.list_disk_i_ds(v1::ListDiskIDsRequest {}).await?.into_inner();
        if ids.disk_i_ds.contains_key(&n) {
            Ok(())
        } else {
            Err(wrong(format!("disk {n} is not in the list")))
        }
    })
    .await;
    c.run("ListDiskLocations lists it", async {
        let l = p.disk.list_disk_locations(v1::ListDiskLocationsRequest {}).await?.into_inner();
        if l.disk_locations.contains_key(&n) {
            Ok(())
        } else {
            Err(wrong(format!("disk {n} is not in the list")))
        }
    })
    .await;
    c.run("GetDiskStats", async { expect(p.disk_stats(n).await?, SIZE as i64, "GetDiskStats") }).await;
    c.run("PartitionDisk", async { Ok(p.partition_disk(n).await?) }).await;
    let disk_blocked = c.blocked.clone();

    let mut c = report.check(check::VOLUME);
    match disk_blocked {
        Some(Res::NeedsWindows(api)) => c.block(Res::NeedsWindows(api)),
        Some(_) => c.block(Res::Skipped("the disk check did not pass".into())),
        None => {}
    }
    let target = format!("{}{}volume", node.publish_root, sep(node));
    let id = the_one_volume(&mut c, p, n).await;
    c.run("IsVolumeFormatted (new)", async { expect(p.is_volume_formatted(&id).await?, false, "IsVolumeFormatted") })
        .await;
    c.run("FormatVolume", async { Ok(p.format_volume(&id).await?) }).await;
    c.run("IsVolumeFormatted", async { expect(p.is_volume_formatted(&id).await?, true, "IsVolumeFormatted") }).await;
    c.run("MountVolume", async {
        std::fs::create_dir_all(&target).map_err(|e| wrong(format!("making the target folder: {e}")))?;
        Ok(p.mount_volume(&id, &target).await?)
    })
    .await;
    c.run("GetVolumeIDFromTargetPath", async {
        expect(p.volume_at(&target).await?, id.clone(), "the target's volume")
    })
    .await;
    c.run("GetDiskNumberFromVolumeID", async { expect(p.disk_of_volume(&id).await?, n, "the volume's disk") }).await;
    let before = c.run("GetVolumeStats", async { Ok(p.volume_stats(&id).await?.0) }).await.unwrap_or(0);
    c.run(&format!("grow the disk to {} MiB", GROWN / MIB), async { Ok(made.disks.grow(n, GROWN)?) }).await;
    c.run("Rescan", async { Ok(p.rescan().await?) }).await;
    c.run("GetDiskStats after growing", async { expect(p.disk_stats(n).await?, GROWN as i64, "GetDiskStats") }).await;
    c.run("ResizeVolume", async { Ok(p.resize_volume(&id, 0).await?) }).await;
    c.run("GetVolumeStats after ResizeVolume", async {
        let (after, _) = p.volume_stats(&id).await?;
        if after > before {
            Ok(())
        } else {
            Err(wrong(format!("size {after} is not above {before}")))
        }
    })
    .await;
    c.run("UnmountVolume", async { Ok(p.unmount_volume(&id, &target).await?) }).await;
    c.run("Rmdir of the target", async { Ok(p.rmdir(&target, false).await?) }).await;
    if let Some(n) = disk {
        // Removed whatever failed before (what is still mounted from it goes with it).
        c.blocked = None;
        c.run("remove the scratch disk", async { Ok(made.disks.remove(n)?) }).await;
    }
}

/// GetBIOSSerialNumber. A firmware without a serial is NotFound, as documented
/// (docs/migrating.md): that is no failure, and no serial to check either.
async fn system(report: &mut Report, p: &mut Proxy) {
    let mut c = report.check(check::SYSTEM);
    c.run("GetBIOSSerialNumber", async {
        match p.bios_serial().await {
            Ok(s) if !s.is_empty() => Ok(()),
            Ok(_) => Err(wrong("an empty serial number (the daemon documents NotFound for none)")),
            Err(s) if s.code() == Code::NotFound => {
                Err(StepErr::Skip(format!("the firmware has no serial number (NotFound: {})", bounded(s.message()))))
            }
            Err(s) => Err(s.into()),
        }
    })
    .await;
}

#[derive(Debug, Clone, Copy)]
enum Driver {
    AzureDisk,
    GcePd,
    Ebs,
    Vsphere,
}

impl Driver {
    fn check(self) -> check::Name {
        match self {
            Driver::AzureDisk => check::FLOW_AZUREDISK,
            Driver::GcePd => check::FLOW_GCE_PD,
            Driver::Ebs => check::FLOW_EBS,
            Driver::Vsphere => check::FLOW_VSPHERE,
        }
    }

    /// The CSI driver's name (the kubelet's folder for it) and the PV's.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Driver::AzureDisk => ("disk.csi.azure.com", "pvc-azuredisk"),
            Driver::GcePd => ("pd.csi.storage.gke.io", "pvc-gce"),
            Driver::Ebs => ("ebs.csi.aws.com", "pvc-ebs"),
            Driver::Vsphere => ("csi.vsphere.vmware.com", "pvc-vsphere"),
        }
    }
}

/// One block driver's node RPCs, as the stack tests drive them (driver_flows_linux.rs), on a
/// fresh scratch disk: stage, publish, stats, the disk grows, expand, unpublish, unstage.
async fn block_flow(report: &mut Report, p: &mut Proxy, made: &mut Made, node: &Node, driver: Driver) {
    let mut c = report.check(driver.check());
    let disk = new_disk(&mut c, made).await;
    let (name, pv) = driver.names();
    let v = BlockVolume {
        disk: disk.unwrap_or(u32::MAX),
        staging: node.staging(name, HASH),
        publish: node.publish(POD, pv),
    };
    if disk.is_some() {
        // The kubelet makes both folders; EBS makes its staging folder itself.
        let made_dirs = std::fs::create_dir_all(&v.staging).and_then(|()| std::fs::create_dir_all(&v.publish));
        if let Err(e) = made_dirs {
            c.row("the kubelet's folders", Res::Failed(bounded(&e.to_string())), Duration::ZERO);
            c.block(Res::Skipped("an earlier step failed".into()));
        } else if matches!(driver, Driver::Ebs) {
            let _ = std::fs::remove_dir(&v.staging);
        }
    }
    let warnings = p.warnings.len();
    let grown = GROWN as i64;
    let grow = format!("grow the disk to {} MiB (the cloud's part)", GROWN / MIB);
    match driver {
        Driver::AzureDisk => {
            c.run("NodeStageVolume", async { Ok(azuredisk::stage(p, node, &v).await?) }).await;
            c.run("NodePublishVolume", async { Ok(azuredisk::publish(p, node, &v).await?) }).await;
            c.run("NodeGetVolumeStats", async { Ok(azuredisk::stats(p, &v).await.map(drop)?) }).await;
            c.run(&grow, async { Ok(made.disks.grow(v.disk, GROWN)?) }).await;
            let required = (GROWN - 80 * MIB) as i64;
            c.run("NodeExpandVolume", async { Ok(azuredisk::expand(p, node, &v, required).await.map(drop)?) }).await;
            c.run("NodeUnpublishVolume", async { Ok(azuredisk::unpublish(p, node, &v).await?) }).await;
            c.run("NodeUnstageVolume", async { Ok(azuredisk::unstage(p, node, &v).await?) }).await;
        }
        Driver::GcePd => {
            c.run("NodeStageVolume", async { Ok(gce_pd::stage(p, &v).await?) }).await;
            c.run("NodePublishVolume", async { Ok(gce_pd::publish(p, node, &FsLocal, &v).await?) }).await;
            c.run("NodeGetVolumeStats", async { Ok(gce_pd::stats(p, &v).await.map(drop)?) }).await;
            c.run(&grow, async { Ok(made.disks.grow(v.disk, GROWN)?) }).await;
            c.run("NodeExpandVolume", async { expect(gce_pd::expand(p, &v, grown).await?, grown, "the disk's size") })
                .await;
            c.run("NodeUnpublishVolume", async { Ok(gce_pd::unpublish(p, node, &v).await?) }).await;
            c.run("NodeUnstageVolume", async { Ok(gce_pd::unstage(p, node, &v).await?) }).await;
        }
        Driver::Ebs => {
            c.run("NodeStageVolume", async { Ok(ebs::stage(p, node, &v).await?) }).await;
            c.run("NodeStageVolume again", async { Ok(ebs::stage(p, node, &v).await?) }).await;
            c.run("NodePublishVolume", async { Ok(ebs::publish(p, node, &v).await?) }).await;
            c.run("NodeGetVolumeStats", async { Ok(ebs::stats_exists(p, node, &v).await?) }).await;
            c.run(&grow, async { Ok(made.disks.grow(v.disk, GROWN)?) }).await;
            c.run("NodeExpandVolume", async { expect(ebs::expand(p, node, &v).await?, grown, "the disk's size") })
                .await;
            c.run("NodeUnpublishVolume", async { Ok(ebs::unpublish(p, node, &v).await?) }).await;
            c.run("NodeUnstageVolume", async { Ok(ebs::unstage(p, node, &v).await?) }).await;
            c.run("NodeUnstageVolume again", async { Ok(ebs::unstage(p, node, &v).await?) }).await;
        }
        Driver::Vsphere => {
            c.run("NodeGetInfo", async {
                match vsphere::node_info(p).await {
                    Ok(_) => Ok(()),
                    // NotFound (no firmware serial) is reported by the system check.
                    Err(f) if f.message.contains("code = NotFound") => {
                        Err(StepErr::Skip("the firmware has no serial number (see system)".into()))
                    }
                    Err(f) => Err(f.into()),
                }
            })
            .await;
            c.run("NodeStageVolume", async { Ok(vsphere::stage(p, node, &v).await?) }).await;
            c.run("NodePublishVolume", async { Ok(vsphere::publish(p, node, &v).await?) }).await;
            c.run("NodeGetVolumeStats", async { Ok(vsphere::stats(p, &v).await.map(drop)?) }).await;
            c.run(&grow, async { Ok(made.disks.grow(v.disk, GROWN)?) }).await;
            c.run("NodeExpandVolume", async { Ok(vsphere::expand(p, node, &v, grown).await?) }).await;
            c.run("NodeUnpublishVolume", async { Ok(vsphere::unpublish(p, node, &v).await?) }).await;
            c.run("NodeUnstageVolume", async { Ok(vsphere::unstage(p, node, &v).await?) }).await;
        }
    }
    // What the kubelet relies on afterwards: the staging folder (and its mount) is gone.
    c.run("staging folder gone", async {
        expect(p.path_exists(&node.n(&v.staging)).await?, false, "PathExists of the staging folder")
    })
    .await;
    let new_warnings = p.warnings[warnings..].to_vec();
    c.run("no driver warnings", async {
        match new_warnings.first() {
            None => Ok(()),
            Some(w) => Err(wrong(format!("the driver would log: {}", bounded(w)))),
        }
    })
    .await;
    if let Some(n) = disk {
        // Whatever the flow left mounted goes with the disk (it is ours by its backing file).
        c.blocked = None;
        c.run("remove the scratch disk", async { Ok(made.disks.remove(n)?) }).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWORD: &str = "Pw,with=Comma 7";

    /// A run's report with results that quote the password and the wrong one (as a careless
    /// daemon might): neither is in the table or the JSON.
    #[test]
    fn the_password_is_in_no_table_and_no_json() {
        let remote = remote::fake(PASSWORD);
        let secrets = remote.secrets();
        assert_eq!(secrets.len(), 2, "the password and the wrong one");
        assert!(secrets[1].starts_with(PASSWORD) && secrets[1] != PASSWORD);
        let mut report = Report { rows: Vec::new(), timeout: Duration::from_secs(1), running: None, secrets };
        let mut c = report.check(check::SMB);
        c.row(r"NewSmbGlobalMapping of \\srv\data at a link", Res::Ok, Duration::ZERO);
        let long = format!("PermissionDenied: {} logon failure for {PASSWORD}", "x".repeat(MAX_QUOTE - 30));
        c.row("NewSmbGlobalMapping with a wrong password is refused", Res::Failed(long), Duration::ZERO);
        let quoted = format!("Internal: mount error with password={PASSWORD}{}", "-not-the-password");
        c.row("RemoveSmbGlobalMapping", Res::Failed(quoted), Duration::ZERO);
        c.row("the link is gone", Res::Skipped(format!("why: {PASSWORD}")), Duration::ZERO);
        for json in [false, true] {
            let out = render(json, &report, None);
            assert!(!out.contains(PASSWORD), "{out}");
            assert!(!out.contains("Pw,with"), "{out}");
            assert!(out.contains(WITHHELD), "{out}");
            assert!(out.contains("NewSmbGlobalMapping"), "{out}");
        }
        let table = render(false, &report, None);
        assert!(table.trim_end().ends_with("1 passed, 2 failed, 1 skipped"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&render(true, &report, None)).unwrap();
        assert_eq!(json["failed"], 2);
        assert_eq!(json["steps"][2]["detail"], format!("Internal: mount error with password={WITHHELD}"));
    }

    /// A daemon's message with ESC, CR LF, DEL, C1 and a bidi override in a failed step: the
    /// table, the long failures after it and the JSON show none of them raw; the JSON still
    /// decodes to the (bounded) message.
    #[test]
    fn a_daemons_message_reaches_no_report_raw() {
        let hostile = format!(
            "NotFound: disk\u{1b}]0;x\u{7}\r\nflow ebs  forged  ok\u{7f}\u{85}\u{9b}2J\u{202e}{}",
            "m".repeat(100)
        );
        let mut report = Report { rows: Vec::new(), timeout: Duration::from_secs(1), running: None, secrets: vec![] };
        let mut c = report.check(check::DISK);
        c.row("GetDiskStats", Res::Failed(hostile.clone()), Duration::ZERO);
        c.row(&format!("step {hostile}"), Res::Skipped(hostile.clone()), Duration::ZERO);
        for json in [false, true] {
            let out = render(json, &report, None);
            assert!(!out.chars().any(|c| crate::term::escaped(c) && c != '\n'), "{out:?}");
        }
        let table = render(false, &report, None);
        assert_eq!(table.lines().count(), 5, "header, 2 rows, the long failure, the counts: {table}");
        assert!(
            table.contains(
                r"FAILED: NotFound: disk\u{1b}]0;x\u{7}\r\nflow ebs  forged  ok\u{7f}\u{85}\u{9b}2J\u{202e}mm"
            ),
            "{table}"
        );
        let json = render(true, &report, None);
        assert!(json.contains(r"forged  ok\u007f\u0085\u009b2J\u202emm"), "{json}");
        let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(doc["steps"][0]["detail"], hostile);
    }

    /// Without the flags each check is one row naming them.
    #[tokio::test]
    async fn without_the_flags_smb_and_iscsi_are_skipped_naming_them() {
        let mut report = Report { rows: Vec::new(), timeout: Duration::from_secs(1), running: None, secrets: vec![] };
        let mut r = Remote::new(Given::default(), None);
        remote::iscsi(&mut report, &mut r).await;
        assert_eq!(report.rows.len(), 1);
        assert_eq!(report.rows[0].check, "iscsi");
        assert!(report.rows[0].res.text().starts_with("skipped: give -iscsi-portal"), "{}", report.rows[0].res.text());
        assert!(r.secrets().is_empty());
        let json = render(true, &report, None);
        assert!(json.contains("give -iscsi-portal and -iscsi-target"), "{json}");
        assert_eq!(remote::SMB_SKIPPED.split(' ').nth(1), Some("-smb-share,"));
    }
}
