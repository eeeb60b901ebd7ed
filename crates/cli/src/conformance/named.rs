//! The named checks only a real Windows node can settle: what the review of the Windows FFI
//! (issue 27, R1–R9) fixed or designed away but could show only against the scripted platform
//! and Wine. They share one scratch disk, in this order (a check that needs an earlier one's
//! state is skipped, naming it, when that one did not pass; all say "needs Windows: <API>" when
//! no disk can be made). On Linux each is one row, skipped: Windows only.

use super::check::{
    Name, AUDIT_FILE_DACL, BELOW_STAGED, FORMAT_EMPTY_LABEL, GONE_VOLUME_CODE, LINK_NOT_MOUNT_POINT,
    ONLINE_CLEARS_READ_ONLY, PARTITION_AFTER_ONLINE, PLAIN_PATHS, PRESHUTDOWN, RESIZE_BY_DISK_NUMBER, RMDIR_SHARES,
    STORAGE_PROVIDER, UNKNOWN_MOUNT_POINT,
};
use super::{bounded, expect, new_disk, sep, the_one_volume, wrong, Check, Made, Report, Res, StepErr, MIB, SIZE};
#[cfg(windows)]
use csi_proxy_client::file_dacl::dacl_sddl;
use csi_proxy_client::{v1, Code};
use csi_proxy_flows::{Node, Proxy};
use std::path::Path;
use std::time::Duration;

/// The checks only a real Windows node settles, in the order they run; on Linux each is one row,
/// what it settles as the step.
const WINDOWS_ONLY: [Name; 11] = [
    PARTITION_AFTER_ONLINE,
    FORMAT_EMPTY_LABEL,
    STORAGE_PROVIDER,
    PLAIN_PATHS,
    BELOW_STAGED,
    LINK_NOT_MOUNT_POINT,
    RMDIR_SHARES,
    UNKNOWN_MOUNT_POINT,
    GONE_VOLUME_CODE,
    ONLINE_CLEARS_READ_ONLY,
    RESIZE_BY_DISK_NUMBER,
];

/// What a check left its dependents: nothing (it passed) or what their steps get instead.
#[derive(Default)]
struct Outcomes(Vec<(Name, Option<Res>)>);

impl Outcomes {
    /// Blocks `c` if a check it needs did not pass.
    fn gate(&self, c: &mut Check<'_>, needs: &[Name]) {
        for (name, res) in &self.0 {
            if needs.contains(name) {
                if let Some(res) = res {
                    c.block(res.clone());
                }
            }
        }
    }

    fn record(&mut self, c: &Check<'_>) {
        let res = match &c.blocked {
            None => None,
            Some(Res::NeedsWindows(api)) => Some(Res::NeedsWindows(api.clone())),
            Some(_) => Some(Res::Skipped(format!("{} did not pass", c.name))),
        };
        self.0.push((c.name, res));
    }
}

pub async fn windows_checks(report: &mut Report, p: &mut Proxy, made: &mut Made, node: &Node) {
    if !cfg!(windows) {
        for name in WINDOWS_ONLY {
            report.check(name).row(name.info().settles, Res::Skipped("Windows only".into()), Duration::ZERO);
        }
        return;
    }
    let mut done = Outcomes::default();
    let s = sep(node);
    let base = format!("{}{s}named", node.publish_root);
    let (staged, other) = (format!("{base}{s}staged"), format!("{base}{s}detached"));
    let gone = format!("{base}{s}gone");
    let (data, link) = (format!("{staged}{s}data"), format!("{base}{s}link"));

    let mut c = report.check(PARTITION_AFTER_ONLINE);
    let disk = new_disk(&mut c, made).await;
    let n = disk.unwrap_or(u32::MAX);
    c.run("SetDiskState offline", async { Ok(p.set_disk_state(n, false).await?) }).await;
    c.run("GetDiskState says offline", async { expect(disk_online(p, n).await?, false, "GetDiskState") }).await;
    c.run("SetDiskState online", async { Ok(p.set_disk_state(n, true).await?) }).await;
    c.run("PartitionDisk right after", async { Ok(p.partition_disk(n).await?) }).await;
    done.record(&c);

    let mut c = report.check(FORMAT_EMPTY_LABEL);
    done.gate(&mut c, &[PARTITION_AFTER_ONLINE]);
    let id = the_one_volume(&mut c, p, n).await;
    c.run("FormatVolume (MSFT_Volume.Format, FileSystemLabel \"\")", async { Ok(p.format_volume(&id).await?) }).await;
    c.run("IsVolumeFormatted", async { expect(p.is_volume_formatted(&id).await?, true, "IsVolumeFormatted") }).await;
    done.record(&c);

    let mut c = report.check(STORAGE_PROVIDER);
    done.gate(&mut c, &[FORMAT_EMPTY_LABEL]);
    c.run("PartitionDisk of the partitioned disk (an MSFT_Disk query)", async { Ok(p.partition_disk(n).await?) }).await;
    c.run("ResizeVolume to the disk's end (MSFT_Partition)", async { Ok(p.resize_volume(&id, 0).await?) }).await;
    c.run("GetVolumeStats", async {
        let (total, _) = p.volume_stats(&id).await?;
        if total > 0 && total <= SIZE as i64 {
            Ok(())
        } else {
            Err(wrong(format!("size {total}, expected up to {} MiB", SIZE / MIB)))
        }
    })
    .await;
    done.record(&c);

    let mut c = report.check(PLAIN_PATHS);
    done.gate(&mut c, &[FORMAT_EMPTY_LABEL]);
    c.run("MountVolume at a staging folder (SetVolumeMountPointW)", async {
        std::fs::create_dir_all(&staged).map_err(|e| wrong(format!("making the staging folder: {e}")))?;
        Ok(p.mount_volume(&id, &staged).await?)
    })
    .await;
    c.run("GetVolumeIDFromTargetPath (GetVolumeNameForVolumeMountPointW)", async {
        expect(p.volume_at(&staged).await?, id.clone(), "the staging folder's volume")
    })
    .await;
    done.record(&c);

    let mut c = report.check(BELOW_STAGED);
    done.gate(&mut c, &[PLAIN_PATHS]);
    c.run("Mkdir below the staging folder", async { Ok(p.mkdir(&data).await?) }).await;
    c.run("PathExists below it", async { expect(p.path_exists(&data).await?, true, "PathExists") }).await;
    c.run("GetVolumeIDFromTargetPath of the staging folder", async {
        expect(p.volume_at(&staged).await?, id.clone(), "the staging folder's volume")
    })
    .await;
    done.record(&c);

    let mut c = report.check(LINK_NOT_MOUNT_POINT);
    done.gate(&mut c, &[BELOW_STAGED]);
    c.run("CreateSymlink to a folder on the staged volume", async { Ok(p.create_symlink(&data, &link).await?) }).await;
    c.run("GetVolumeIDFromTargetPath of the link is NotFound", async {
        match p.volume_at(&link).await {
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(StepErr::from(s)),
            Ok(v) => Err(wrong(format!("answered volume {v} for a link that is no mount point"))),
        }
    })
    .await;
    c.run("Rmdir of the link", async { Ok(p.rmdir(&link, true).await?) }).await;
    c.run("Rmdir below the staging folder", async { Ok(p.rmdir(&data, false).await?) }).await;
    done.record(&c);

    let mut c = report.check(RMDIR_SHARES);
    done.gate(&mut c, &[PLAIN_PATHS]);
    c.run("Rmdir(force) of the mounted staging folder (DeleteVolumeMountPointW)", async {
        Ok(p.rmdir(&staged, true).await?)
    })
    .await;
    c.run("PathExists after it", async { expect(p.path_exists(&staged).await?, false, "PathExists") }).await;
    done.record(&c);

    let mut c = report.check(UNKNOWN_MOUNT_POINT);
    done.gate(&mut c, &[FORMAT_EMPTY_LABEL]);
    c.run("MountVolume at another staging folder", async {
        std::fs::create_dir_all(&other).map_err(|e| wrong(format!("making the staging folder: {e}")))?;
        Ok(p.mount_volume(&id, &other).await?)
    })
    .await;
    // K5's folder: a second mount point of the same volume, which the tool removes itself.
    let second = c
        .run("MountVolume at a second folder (for the next check)", async {
            std::fs::create_dir_all(&gone).map_err(|e| wrong(format!("making the folder: {e}")))?;
            Ok(p.mount_volume(&id, &gone).await?)
        })
        .await;
    let detached =
        c.run("detach the disk while mounted (DetachVirtualDisk)", async { Ok(made.disks.remove(n)?) }).await;
    c.run("Rmdir(force) of the folder", async { Ok(p.rmdir(&other, true).await?) }).await;
    c.run("PathExists after it", async { expect(p.path_exists(&other).await?, false, "PathExists") }).await;
    done.record(&c);
    if disk.is_some() && detached.is_none() {
        // Removed whatever failed before (the cleanup removes what is still mounted).
        c.blocked = None;
        c.run("remove the scratch disk", async { Ok(made.disks.remove(n)?) }).await;
    }

    // K5: what DeleteVolumeMountPointW answers for a mount point whose volume is gone is not
    // documented; the daemon's Rmdir(force) takes ERROR_FILE_NOT_FOUND (2) and
    // ERROR_PATH_NOT_FOUND (3) as "the mount manager no longer knows it" (host windows/remove.rs).
    let mut c = report.check(GONE_VOLUME_CODE);
    done.gate(&mut c, &[UNKNOWN_MOUNT_POINT]);
    if second.is_none() {
        c.block(Res::Skipped("the second mount point was not made".into()));
    }
    c.run("DeleteVolumeMountPointW of the gone volume's second mount point", async {
        match delete_mount_point(Path::new(&gone)) {
            Ok(()) | Err(2) | Err(3) => Ok(()),
            Err(code) => Err(wrong(format!(
                "answered Windows error {code}; the daemon's Rmdir(force) takes only 2 and 3 as a gone volume, so it would refuse such a mount point"
            ))),
        }
    })
    .await;
    // What is left goes whatever happened above.
    c.blocked = None;
    if second.is_some() {
        c.run("Rmdir(force) of that folder", async { Ok(p.rmdir(&gone, true).await?) }).await;
    }
    if disk.is_some() {
        c.run("Rmdir of the checks' folder", async { Ok(p.rmdir(&base, true).await?) }).await;
    }
    read_only_and_resize_checks(report, p, made).await;
}

/// Issue 29 on a disk of their own: SetDiskState(online) clears a read-only disk with
/// SET_DISK_ATTRIBUTES (AttributesMask OFFLINE | READ_ONLY, Persist TRUE), which only a real disk
/// driver can show (PartitionDisk refuses a read-only disk); then azuredisk >= 1.32's stage
/// resize, ResizeVolume of the disk number with size 0, grows the volume after the disk grew,
/// its largest size read from IOCTL_DISK_GET_DRIVE_LAYOUT_EX instead of GetSupportedSize.
async fn read_only_and_resize_checks(report: &mut Report, p: &mut Proxy, made: &mut Made) {
    let mut c = report.check(ONLINE_CLEARS_READ_ONLY);
    let disk = new_disk(&mut c, made).await;
    let n = disk.unwrap_or(u32::MAX);
    let script = made.scratch_dir.join("read-only.diskpart");
    c.run("make the disk read-only (diskpart: attributes disk set readonly)", async {
        std::fs::write(&script, format!("select disk {n}\r\nattributes disk set readonly\r\n"))
            .map_err(|e| wrong(format!("writing {}: {e}", script.display())))?;
        let root = std::env::var_os("SystemRoot").unwrap_or_else(|| "C:\\Windows".into());
        let diskpart = std::path::Path::new(&root).join("System32").join("diskpart.exe");
        let out = std::process::Command::new(&diskpart)
            .arg("/s")
            .arg(&script)
            .output()
            .map_err(|e| wrong(format!("running {}: {e}", diskpart.display())))?;
        match out.status.success() {
            true => Ok(()),
            false => Err(wrong(format!("diskpart exited with {}", out.status))),
        }
    })
    .await;
    c.run("SetDiskState online", async { Ok(p.set_disk_state(n, true).await?) }).await;
    c.run("PartitionDisk (refused while the disk is read-only)", async { Ok(p.partition_disk(n).await?) }).await;
    let mut done = Outcomes::default();
    done.record(&c);

    let mut c = report.check(RESIZE_BY_DISK_NUMBER);
    done.gate(&mut c, &[ONLINE_CLEARS_READ_ONLY]);
    let id = the_one_volume(&mut c, p, n).await;
    c.run("FormatVolume", async { Ok(p.format_volume(&id).await?) }).await;
    c.run("grow the disk to twice its size", async { Ok(made.disks.grow(n, 2 * SIZE)?) }).await;
    c.run("Rescan", async { Ok(p.rescan().await?) }).await;
    c.run("ResizeVolume(\"<disk number>\", 0)", async { Ok(p.resize_volume(&n.to_string(), 0).await?) }).await;
    c.run("GetVolumeStats: the volume grew", async {
        let (total, _) = p.volume_stats(&id).await?;
        if total > (SIZE + SIZE / 2) as i64 && total <= 2 * SIZE as i64 {
            Ok(())
        } else {
            Err(wrong(format!("size {total}, expected more than {} MiB", (SIZE + SIZE / 2) / MIB)))
        }
    })
    .await;
    if disk.is_some() {
        c.blocked = None;
        c.run("remove the scratch disk", async { Ok(made.disks.remove(n)?) }).await;
    }
}

const AUDIT_FILE_DACL_STEP: &str = "GetNamedSecurityInfoW of the -audit-log file: SYSTEM and Administrators only";

/// Issue 32: the daemon's audit file (its `-audit-log`) has a DACL of its own, SYSTEM and
/// Administrators with full access, protected from inheritance, and nothing else (daemon's
/// `logging/audit_acl.rs`). Wine keeps no DACL (it maps one to unix mode bits and reads back one
/// made from them), so only Windows can show it; the check reads the live file's.
pub async fn audit_file_dacl(report: &mut Report, audit_log: Option<&Path>) {
    let mut c = report.check(AUDIT_FILE_DACL);
    let Some(path) = audit_log.filter(|_| cfg!(windows)) else {
        let why = if cfg!(windows) { "no -audit-log <file> given" } else { "Windows only" };
        c.row(AUDIT_FILE_DACL_STEP, Res::Skipped(why.into()), Duration::ZERO);
        return;
    };
    c.run(AUDIT_FILE_DACL_STEP, async {
        let sddl = dacl_sddl(path).map_err(|e| wrong(format!("reading {}'s DACL: {e}", path.display())))?;
        match audit_dacl_problem(&sddl) {
            None => Ok(()),
            Some(problem) => Err(wrong(format!("{}: {problem}", path.display()))),
        }
    })
    .await;
}

const PRESHUTDOWN_STEP: &str = "QueryServiceStatus and QueryServiceConfig2W(PRESHUTDOWN_INFO) of csiproxy";

/// Node shutdown (issue 41): the `csiproxy` service, when this node runs the daemon as one, takes
/// PRESHUTDOWN and has a preshutdown timeout longer than the drain's 20 s (the daemon sets it at
/// start to its -preshutdown-wait plus that). The wait itself only a node's real shutdown shows
/// (docs/install.md says how to read its log afterwards).
pub async fn preshutdown(report: &mut Report) {
    let mut c = report.check(PRESHUTDOWN);
    if !cfg!(windows) {
        c.row(PRESHUTDOWN_STEP, Res::Skipped("Windows only".into()), Duration::ZERO);
        return;
    }
    c.run(PRESHUTDOWN_STEP, async {
        match super::service::preshutdown_state("csiproxy") {
            Err(super::service::Missing) => {
                Err(StepErr::Skip("no csiproxy service on this node (a HostProcess pod, or run by hand)".into()))
            }
            Ok(Err(e)) => Err(wrong(format!("asking the service control manager: {e}"))),
            Ok(Ok(state)) => preshutdown_problem(&state).map_or(Ok(()), |p| Err(wrong(p))),
        }
    })
    .await;
}

/// What the check needs of the service's answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreshutdownState {
    pub running: bool,
    pub accepts_preshutdown: bool,
    pub timeout_ms: u32,
}

fn preshutdown_problem(s: &PreshutdownState) -> Option<String> {
    if !s.running {
        return Some("the csiproxy service is not running (only a running service reports what it accepts)".into());
    }
    if !s.accepts_preshutdown {
        return Some("the csiproxy service does not accept PRESHUTDOWN: a node's shutdown can stop it before the kubelet's unmounts".into());
    }
    if s.timeout_ms <= 20_000 {
        return Some(format!(
            "its preshutdown timeout is {} ms, not more than the drain's 20 s: the wait for the kubelet gets no time",
            s.timeout_ms
        ));
    }
    None
}

#[cfg(windows)]
use super::vhd::delete_mount_point;

/// Never called off Windows (the checks return first); there is no mount point to delete.
#[cfg(not(windows))]
fn delete_mount_point(_: &Path) -> Result<(), u32> {
    Err(50) // ERROR_NOT_SUPPORTED
}

#[cfg(not(windows))]
fn dacl_sddl(_: &Path) -> std::io::Result<String> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// What is wrong with a DACL (as SDDL) for the audit file, if anything: it must be protected
/// (`P`; Windows may add `AI`/`AR`, the auto-inheritance bits) and allow exactly `FA`
/// (FILE_ALL_ACCESS) to `SY` (LocalSystem) and `BA` (BUILTIN\Administrators), in either order.
fn audit_dacl_problem(sddl: &str) -> Option<String> {
    let Some(dacl) = sddl.strip_prefix("D:") else {
        return Some(format!("no DACL in {:?}", bounded(sddl)));
    };
    let (flags, aces) = dacl.split_at(dacl.find('(').unwrap_or(dacl.len()));
    if !flags.contains('P') {
        return Some(format!("the DACL {:?} is not protected from inheritance (no P)", bounded(dacl)));
    }
    let mut aces: Vec<&str> = aces.trim_start_matches('(').trim_end_matches(')').split(")(").collect();
    aces.sort_unstable();
    if aces != ["A;;FA;;;BA", "A;;FA;;;SY"] {
        return Some(format!(
            "the DACL {:?} should allow full access to SYSTEM and Administrators only: (A;;FA;;;SY)(A;;FA;;;BA)",
            bounded(dacl)
        ));
    }
    None
}

async fn disk_online(p: &mut Proxy, n: u32) -> Result<bool, StepErr> {
    let r = p.disk.get_disk_state(v1::GetDiskStateRequest { disk_number: n }).await?;
    Ok(r.into_inner().is_online)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preshutdown_needs_a_running_service_that_accepts_it_with_time_for_the_wait() {
        let good = PreshutdownState { running: true, accepts_preshutdown: true, timeout_ms: 140_000 };
        assert_eq!(preshutdown_problem(&good), None);
        let says = |s: PreshutdownState, what: &str| {
            let p = preshutdown_problem(&s).unwrap();
            assert!(p.contains(what), "{s:?}: {p}");
        };
        says(PreshutdownState { running: false, ..good.clone() }, "not running");
        says(PreshutdownState { accepts_preshutdown: false, ..good.clone() }, "does not accept PRESHUTDOWN");
        says(PreshutdownState { timeout_ms: 10_000, ..good }, "10000 ms");
    }

    #[test]
    fn the_audit_dacl_is_protected_and_system_and_administrators_only() {
        for good in ["D:P(A;;FA;;;SY)(A;;FA;;;BA)", "D:PAI(A;;FA;;;BA)(A;;FA;;;SY)"] {
            assert_eq!(audit_dacl_problem(good), None, "{good}");
        }
        for (bad, says) in [
            ("", "no DACL"),
            ("D:(A;;FA;;;SY)(A;;FA;;;BA)", "not protected"),
            ("D:AI(A;;FA;;;SY)(A;;FA;;;BA)", "not protected"),
            ("D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x1200a9;;;WD)", "(A;;0x1200a9;;;WD)"),
            ("D:P(A;;FA;;;SY)", "SYSTEM and Administrators only"),
            ("D:P(A;;FR;;;SY)(A;;FA;;;BA)", "(A;;FR;;;SY)"),
            ("D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;FA;;;BA)", "SYSTEM and Administrators only"),
            ("D:P", "SYSTEM and Administrators only"),
        ] {
            let problem = audit_dacl_problem(bad).expect(bad);
            assert!(problem.contains(says), "{bad}: {problem}");
        }
    }

    /// The Windows read of a live file (under Wine too): a file made without the audit DACL (its
    /// folder's, or under Wine one made from its unix mode) is refused, naming what it has.
    #[cfg(windows)]
    #[test]
    fn a_file_without_the_audit_dacl_is_refused() {
        let path = std::env::temp_dir().join(format!("csi-proxyctl-dacl-{}", std::process::id()));
        std::fs::write(&path, "").unwrap();
        let sddl = dacl_sddl(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(sddl.starts_with("D:") && sddl.contains("(A;;"), "{sddl}");
        assert!(audit_dacl_problem(&sddl).is_some(), "{sddl}");
    }
}
