//! The `smb` and `iscsi` checks, against a test share and a test target given by flags
//! (`-smb-share`, `-iscsi-portal`, `-iscsi-target`; the password and the CHAP secret only from a
//! file or standard input, see [`crate::args::read_secret`]). Without the flags each check is one
//! skipped row naming them.
//!
//! What a check adds on the daemon's side (a mapping and its link, a portal, a session) is
//! recorded in [`Pending`] *before* the call that adds it is sent, and taken off only when the
//! call that removes it succeeded: the run's cleanup ([`Remote::undo`]) removes whatever is left
//! after a failure or a stop signal, and only that. A portal that was there before the run is not
//! removed, and a target that was connected before the run is neither logged in to nor out of.
//!
//! The secrets are in no row: [`Remote::secrets`] go to the report, which withholds them from
//! every result it records (a daemon that quoted one would still not show it).

use super::{check, expect, wrong, Report, Res, Step, StepErr};
use crate::args::{read_secret, IscsiArgs, Secret, SmbArgs};
use csi_proxy_client::{v1alpha2, Channel, Code, Status};
use csi_proxy_flows::Proxy;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type Iscsi = v1alpha2::iscsi_client::IscsiClient<Channel>;

/// The rows without the flags.
pub const SMB_SKIPPED: &str = "give -smb-share, -smb-user and -smb-password-file to map a test share";
pub const ISCSI_SKIPPED: &str = "give -iscsi-portal and -iscsi-target to log in to a test target";
/// Appended to the password for the mapping that must be refused.
const WRONG_SUFFIX: &str = "-not-the-password";

/// The test share and target, with their secrets read.
#[derive(Debug, Default)]
pub struct Given {
    pub smb: Option<(SmbArgs, Secret)>,
    pub iscsi: Option<(IscsiArgs, Option<Secret>)>,
}

impl Given {
    /// Reads the secrets the flags name (before the run makes anything).
    pub fn read(r: &crate::args::Remote) -> Result<Given, String> {
        let smb = match &r.smb {
            None => None,
            Some(a) => Some((a.clone(), read_secret("smb-password-file", &a.password)?)),
        };
        let iscsi = match &r.iscsi {
            None => None,
            Some(a) => {
                let secret = match &a.chap {
                    None => None,
                    Some((_, source)) => Some(read_secret("iscsi-chap-secret-file", source)?),
                };
                Some((a.clone(), secret))
            }
        };
        Ok(Given { smb, iscsi })
    }
}

/// What a check added and has not removed yet.
#[derive(Debug, Default)]
struct Pending {
    /// Links a NewSmbGlobalMapping of this run may have made.
    links: Vec<String>,
    /// A file written through the link.
    file: Option<PathBuf>,
    /// The share was (perhaps) mapped by this run.
    mapped: bool,
    /// The portal was not there before and AddTargetPortal was sent.
    portal_added: bool,
    /// ConnectTarget was sent for a target not connected before.
    connected: bool,
}

/// The run's SMB and iSCSI part: what was given, the iSCSI client, what is pending.
pub struct Remote {
    given: Given,
    wrong_password: Option<Secret>,
    iscsi: Option<Iscsi>,
    pending: Pending,
}

impl Remote {
    /// `iscsi`: a channel to iscsi/v1alpha2, when a target was given.
    pub fn new(given: Given, iscsi: Option<Channel>) -> Remote {
        let wrong_password = given.smb.as_ref().map(|(_, pw)| pw.with_suffix(WRONG_SUFFIX));
        Remote { given, wrong_password, iscsi: iscsi.map(Iscsi::new), pending: Pending::default() }
    }

    /// Every secret of the run (the wrong password too): the report withholds them.
    pub fn secrets(&self) -> Vec<String> {
        let mut all = Vec::new();
        if let Some((_, pw)) = &self.given.smb {
            all.push(pw.expose().to_owned());
        }
        if let Some(w) = &self.wrong_password {
            all.push(w.expose().to_owned());
        }
        if let Some((_, Some(s))) = &self.given.iscsi {
            all.push(s.expose().to_owned());
        }
        all
    }

    /// Removes what the checks left (after a failed removal step or a stop signal): the file
    /// and links first (the Linux daemon keeps a share mounted while a link into it exists), the
    /// mapping, the session, the portal. One row per kind left; each call bounded by `timeout`.
    pub async fn undo(&mut self, p: &mut Proxy, timeout: Duration) -> Vec<(String, Res, Duration)> {
        let mut rows = Vec::new();
        let pending = std::mem::take(&mut self.pending);
        if pending.mapped || pending.file.is_some() || !pending.links.is_empty() {
            let start = Instant::now();
            let mut problems = Vec::new();
            if let Some(file) = pending.file {
                match bounded_io(timeout, move || std::fs::remove_file(&file)).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => problems.push(format!("removing the file written through the link: {e}")),
                }
            }
            for link in pending.links {
                if let Err(e) = remove_link(Path::new(&link)) {
                    problems.push(format!("removing the link {link}: {e}"));
                }
            }
            if let (true, Some((a, _))) = (pending.mapped, &self.given.smb) {
                match tokio::time::timeout(timeout, p.remove_smb_mapping(&a.share)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(s)) => problems.push(format!("RemoveSmbGlobalMapping: {:?}: {}", s.code(), s.message())),
                    Err(_) => problems.push(format!("RemoveSmbGlobalMapping: no answer within {timeout:?}")),
                }
            }
            rows.push((
                "remove the SMB link and mapping the smb check left".to_owned(),
                result(problems),
                start.elapsed(),
            ));
        }
        if let (Some((a, _)), Some(client)) = (&self.given.iscsi, self.iscsi.as_mut()) {
            if pending.connected || pending.portal_added {
                let start = Instant::now();
                let mut problems = Vec::new();
                if pending.connected {
                    let req = v1alpha2::DisconnectTargetRequest { target_portal: Some(portal(a)), iqn: a.iqn.clone() };
                    match tokio::time::timeout(timeout, client.disconnect_target(req)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(s)) if s.code() == Code::NotFound => {}
                        Ok(Err(s)) => problems.push(format!("DisconnectTarget: {:?}: {}", s.code(), s.message())),
                        Err(_) => problems.push(format!("DisconnectTarget: no answer within {timeout:?}")),
                    }
                }
                if pending.portal_added {
                    let req = v1alpha2::RemoveTargetPortalRequest { target_portal: Some(portal(a)) };
                    match tokio::time::timeout(timeout, client.remove_target_portal(req)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(s)) if s.code() == Code::NotFound => {}
                        Ok(Err(s)) => problems.push(format!("RemoveTargetPortal: {:?}: {}", s.code(), s.message())),
                        Err(_) => problems.push(format!("RemoveTargetPortal: no answer within {timeout:?}")),
                    }
                }
                rows.push((
                    "disconnect the target and remove the portal the iscsi check added".to_owned(),
                    result(problems),
                    start.elapsed(),
                ));
            }
        }
        rows
    }
}

fn result(problems: Vec<String>) -> Res {
    if problems.is_empty() {
        Res::Ok
    } else {
        Res::Failed(problems.join("; "))
    }
}

/// Removes a symbolic link (a directory link on Windows), if there is one; never what it points to.
fn remove_link(link: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(link) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(link).or_else(|_| std::fs::remove_dir(link)),
        Ok(_) => Err(std::io::Error::other("not a symbolic link: left in place")),
    }
}

/// File I/O through a share, on a blocking thread (a hung server must not hold the run past
/// the step's time limit).
async fn bounded_io<T: Send + 'static>(
    timeout: Duration,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    match tokio::time::timeout(timeout, tokio::task::spawn_blocking(f)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(std::io::Error::other(e.to_string())),
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer within {timeout:?}"))),
    }
}

fn portal(a: &IscsiArgs) -> v1alpha2::TargetPortal {
    v1alpha2::TargetPortal { target_address: a.host.clone(), target_port: a.port }
}

fn shown(a: &IscsiArgs) -> String {
    if a.host.contains(':') {
        format!("[{}]:{}", a.host, a.port)
    } else {
        format!("{}:{}", a.host, a.port)
    }
}

/// Whether a refusal's text holds a secret (it must not; the report would withhold it anyway).
fn quotes(s: &Status, secrets: &[&str]) -> bool {
    secrets.iter().any(|x| s.message().contains(x) || format!("{s:?}").contains(x))
}

/// The `smb` check: NewSmbGlobalMapping of the share to a link in the scratch directory,
/// PathExists through it, a file written and read back through it (when the link can be reached
/// from here), a second mapping with a wrong password refused (PermissionDenied, or
/// AlreadyExists while the share is mapped with other credentials: both are the daemon's
/// documented answers) leaving no link, then the link removed (Rmdir, first: the Linux daemon
/// keeps a share mounted while a link into it exists), RemoveSmbGlobalMapping, the link gone.
pub async fn smb(report: &mut Report, p: &mut Proxy, r: &mut Remote, dir: &str, sep: char) {
    let timeout = report.timeout;
    let mut c = report.check(check::SMB);
    let (Some((a, password)), Some(wrong_password)) = (&r.given.smb, &r.wrong_password) else {
        c.row("map, write through, wrong password, unmap", Res::Skipped(SMB_SKIPPED.into()), Duration::ZERO);
        return;
    };
    let pending = &mut r.pending;
    let link = format!("{dir}{sep}smb");
    let refused_link = format!("{dir}{sep}smb-wrong-password");
    let secrets = [password.expose(), wrong_password.expose()];
    pending.links.push(link.clone());
    pending.mapped = true;
    c.run(&format!("NewSmbGlobalMapping of {} at a link", a.share), async {
        Ok(p.new_smb_mapping(&a.share, &link, &a.user, password.expose()).await?)
    })
    .await;
    c.run("PathExists through the link", async { expect(p.path_exists(&link).await?, true, "PathExists of the link") })
        .await;
    c.run("write and read back a file through the link", write_and_read(&link, &mut pending.file, timeout)).await;
    pending.links.push(refused_link.clone());
    c.run("NewSmbGlobalMapping with a wrong password is refused", async {
        match p.new_smb_mapping(&a.share, &refused_link, &a.user, wrong_password.expose()).await {
            Ok(()) => Err(wrong("NewSmbGlobalMapping with a wrong password succeeded")),
            Err(s) if quotes(&s, &secrets) => Err(wrong(format!("the refusal ({:?}) quotes a password", s.code()))),
            Err(s) if matches!(s.code(), Code::PermissionDenied | Code::AlreadyExists) => Ok(()),
            Err(s) => {
                Err(wrong(format!("expected PermissionDenied or AlreadyExists, got {:?}: {}", s.code(), s.message())))
            }
        }
    })
    .await;
    c.run("the refused mapping left no link", async {
        if std::fs::symlink_metadata(&refused_link).is_ok() {
            return Err(wrong(format!("{refused_link} exists")));
        }
        expect(p.path_exists(&refused_link).await?, false, "PathExists of the refused mapping's link")
    })
    .await;
    // The removal runs whatever failed before; the cleanup retries what it could not remove.
    c.blocked = None;
    let removed = c.run("Rmdir of the link", async {
        if std::fs::symlink_metadata(&link).is_err() {
            return Ok(());
        }
        Ok(p.rmdir(&link, true).await?)
    });
    if removed.await.is_some() {
        pending.links.retain(|l| *l != link);
    }
    c.blocked = None;
    if c.run("RemoveSmbGlobalMapping", async { Ok(p.remove_smb_mapping(&a.share).await?) }).await.is_some() {
        pending.mapped = false;
    }
    c.run("the link is gone", async {
        if std::fs::symlink_metadata(&link).is_ok() {
            return Err(wrong(format!("{link} still exists")));
        }
        expect(p.path_exists(&link).await?, false, "PathExists of the link")
    })
    .await;
    if std::fs::symlink_metadata(&refused_link).is_err() {
        pending.links.retain(|l| *l != refused_link);
    }
}

/// The `smb-errors-are-named` check, after `smb` (so the share is not mapped): a share the server
/// lacks is NotFound, and the message names the code and gives a hint (Windows error 67 from
/// MSFT_SmbGlobalMapping.Create, ENOENT from the cifs mount); then, with the share mapped
/// (no link), a wrong password for its user is refused with its code named and a hint. On Windows
/// that refusal comes from the daemon's credential check, WNetAddConnection2W in a logon session
/// of its own, whose answers (ERROR_EXTENDED_ERROR read through WNetGetLastError included) only
/// a real Windows host gives: the scripted platform and Wine do not run it. Linux refuses another
/// password of a mounted share as AlreadyExists, before any mount.
pub async fn smb_errors(report: &mut Report, p: &mut Proxy, r: &mut Remote) {
    let mut c = report.check(check::SMB_NAMED_ERRORS);
    let (Some((a, password)), Some(wrong_password)) = (&r.given.smb, &r.wrong_password) else {
        c.row("a missing share and a wrong password, named", Res::Skipped(SMB_SKIPPED.into()), Duration::ZERO);
        return;
    };
    let secrets = [password.expose(), wrong_password.expose()];
    let missing = format!("{}-csi-proxy-conformance-missing", a.share.trim_end_matches(['\\', '/']));
    c.run("NewSmbGlobalMapping of a share the server lacks is NotFound, named, with a hint", async {
        match p.new_smb_mapping(&missing, "", &a.user, password.expose()).await {
            Ok(()) => {
                let _ = p.remove_smb_mapping(&missing).await;
                Err(wrong(format!("mapping {missing} succeeded")))
            }
            Err(s) if quotes(&s, &secrets) => Err(wrong(format!("the refusal ({:?}) quotes a password", s.code()))),
            Err(s) if s.code() == Code::NotFound && named(s.message()) => Ok(()),
            Err(s) => Err(wrong(format!(
                "expected NotFound naming the code with a hint, got {:?}: {}",
                s.code(),
                s.message()
            ))),
        }
    })
    .await;
    let pending = &mut r.pending;
    pending.mapped = true;
    c.run(&format!("NewSmbGlobalMapping of {} without a link", a.share), async {
        Ok(p.new_smb_mapping(&a.share, "", &a.user, password.expose()).await?)
    })
    .await;
    c.run("a wrong password for the mapped share is refused, named, with a hint", async {
        match p.new_smb_mapping(&a.share, "", &a.user, wrong_password.expose()).await {
            Ok(()) => Err(wrong("NewSmbGlobalMapping with a wrong password succeeded")),
            Err(s) if quotes(&s, &secrets) => Err(wrong(format!("the refusal ({:?}) quotes a password", s.code()))),
            Err(s) if cfg!(windows) && s.code() == Code::PermissionDenied && named(s.message()) => Ok(()),
            Err(s) if !cfg!(windows) && s.code() == Code::AlreadyExists => Ok(()),
            Err(s) => Err(wrong(format!("got {:?}: {}", s.code(), s.message()))),
        }
    })
    .await;
    c.blocked = None;
    if c.run("RemoveSmbGlobalMapping", async { Ok(p.remove_smb_mapping(&a.share).await?) }).await.is_some() {
        pending.mapped = false;
    }
}

/// Whether a refusal names its code the way the daemon's classification does: `(… NAME): words;
/// hint: …`.
fn named(message: &str) -> bool {
    message.contains("; hint: ") && (message.contains("Windows error ") || message.contains("os error "))
}

/// Writes a small file through the link, reads it back, removes it; skipped when the link can't
/// be reached from this process (the daemon may see another mount namespace).
async fn write_and_read(link: &str, file_slot: &mut Option<PathBuf>, timeout: Duration) -> Step {
    let dir = PathBuf::from(link);
    let probe = dir.clone();
    if let Err(e) = bounded_io(timeout, move || std::fs::metadata(probe)).await {
        return Err(StepErr::Skip(format!("the link can't be reached from this process: {e}")));
    }
    let name = format!("csi-proxy-conformance-{}.txt", std::process::id());
    let file = dir.join(name);
    let data = format!("written by csi-proxyctl conformance, process {}\n", std::process::id());
    *file_slot = Some(file.clone());
    let (f, d) = (file.clone(), data.clone());
    bounded_io(timeout, move || std::fs::write(&f, d))
        .await
        .map_err(|e| wrong(format!("writing {}: {e}", file.display())))?;
    let f = file.clone();
    let back =
        bounded_io(timeout, move || std::fs::read(&f)).await.map_err(|e| wrong(format!("reading it back: {e}")))?;
    let f = file.clone();
    bounded_io(timeout, move || std::fs::remove_file(&f)).await.map_err(|e| wrong(format!("removing it: {e}")))?;
    *file_slot = None;
    if back != data.as_bytes() {
        return Err(wrong(format!("read back {} bytes that differ from the {} written", back.len(), data.len())));
    }
    Ok(())
}

/// The `iscsi` check: ListTargetPortals (was the portal there before?), AddTargetPortal,
/// DiscoverTargetPortal lists the IQN, GetTargetDisks (a target connected before the run is not
/// touched), ConnectTarget, GetTargetDisks returns a disk, DisconnectTarget, RemoveTargetPortal
/// (only of a portal this run added), and ListTargetPortals no longer lists it.
pub async fn iscsi(report: &mut Report, r: &mut Remote) {
    let mut c = report.check(check::ISCSI);
    let (Some((a, secret)), Some(client)) = (&r.given.iscsi, r.iscsi.as_mut()) else {
        c.row("portal, discovery, login, disk, logout", Res::Skipped(ISCSI_SKIPPED.into()), Duration::ZERO);
        return;
    };
    let pending = &mut r.pending;
    let tp = portal(a);
    let at = shown(a);
    let existed = c
        .run("ListTargetPortals", async {
            let l = client.list_target_portals(v1alpha2::ListTargetPortalsRequest {}).await?.into_inner();
            Ok(l.target_portals.contains(&tp))
        })
        .await;
    if let (Some(existed), Some(row)) = (existed, c.report.rows.last_mut()) {
        row.step = if existed {
            format!("ListTargetPortals: {at} was there before this run (it is kept)")
        } else {
            format!("ListTargetPortals: {at} is new (removed at the end)")
        };
    }
    if existed == Some(false) {
        pending.portal_added = true;
    }
    c.run(&format!("AddTargetPortal {at}"), async {
        let req = v1alpha2::AddTargetPortalRequest { target_portal: Some(tp.clone()) };
        Ok(client.add_target_portal(req).await.map(drop)?)
    })
    .await;
    c.run(&format!("DiscoverTargetPortal lists {}", a.iqn), async {
        let req = v1alpha2::DiscoverTargetPortalRequest { target_portal: Some(tp.clone()) };
        let iqns = client.discover_target_portal(req).await?.into_inner().iqns;
        if iqns.contains(&a.iqn) {
            Ok(())
        } else {
            Err(wrong(format!("the portal lists {} target(s), not {}: {:?}", iqns.len(), a.iqn, iqns)))
        }
    })
    .await;
    let disks = |client: &mut Iscsi| {
        let req = v1alpha2::GetTargetDisksRequest { target_portal: Some(tp.clone()), iqn: a.iqn.clone() };
        let mut client = client.clone();
        async move { client.get_target_disks(req).await.map(|r| r.into_inner().disk_i_ds) }
    };
    let before = c.run("GetTargetDisks before ConnectTarget", async { Ok(disks(client).await?) }).await;
    if let Some(ids) = before.filter(|d| !d.is_empty()) {
        let why = format!("{} was connected before this run (disks {}): not logged in or out", a.iqn, ids.join(", "));
        if let Some(row) = c.report.rows.last_mut() {
            row.res = Res::Skipped(why.clone());
        }
        c.block(Res::Skipped(why));
    }
    let auth = if a.chap.is_some() { "one-way CHAP" } else { "no authentication" };
    if !c.failed() {
        pending.connected = true;
    }
    c.run(&format!("ConnectTarget ({auth})"), async {
        let (auth_type, user) = match &a.chap {
            Some((user, _)) => (v1alpha2::AuthenticationType::OneWayChap, user.clone()),
            None => (v1alpha2::AuthenticationType::None, String::new()),
        };
        let req = v1alpha2::ConnectTargetRequest {
            target_portal: Some(tp.clone()),
            iqn: a.iqn.clone(),
            auth_type: auth_type as i32,
            chap_username: user,
            chap_secret: secret.as_ref().map(|s| s.expose().to_owned()).unwrap_or_default(),
        };
        match client.connect_target(req).await {
            Ok(_) => Ok(()),
            Err(s) if secret.as_ref().is_some_and(|x| quotes(&s, &[x.expose()])) => {
                Err(wrong(format!("the refusal ({:?}) quotes the CHAP secret", s.code())))
            }
            Err(s) => Err(s.into()),
        }
    })
    .await;
    c.run("GetTargetDisks returns a disk", async {
        let ids = disks(client).await?;
        match ids.iter().find(|d| d.parse::<u32>().is_err()) {
            _ if ids.is_empty() => Err(wrong("no disk: the target has no LUN, or its disks did not appear")),
            Some(bad) => Err(wrong(format!("{bad:?} is not a disk number"))),
            None => Ok(()),
        }
    })
    .await;
    if pending.connected {
        c.blocked = None;
        let out = c.run("DisconnectTarget", async {
            let req = v1alpha2::DisconnectTargetRequest { target_portal: Some(tp.clone()), iqn: a.iqn.clone() };
            Ok(client.disconnect_target(req).await.map(drop)?)
        });
        if out.await.is_some() {
            pending.connected = false;
        }
    }
    if pending.portal_added {
        c.blocked = None;
        let out = c.run("RemoveTargetPortal (this run added it)", async {
            let req = v1alpha2::RemoveTargetPortalRequest { target_portal: Some(tp.clone()) };
            Ok(client.remove_target_portal(req).await.map(drop)?)
        });
        if out.await.is_some() {
            pending.portal_added = false;
        }
        c.run("ListTargetPortals no longer lists it", async {
            let l = client.list_target_portals(v1alpha2::ListTargetPortalsRequest {}).await?.into_inner();
            expect(l.target_portals.contains(&tp), false, &format!("{at} in ListTargetPortals"))
        })
        .await;
    } else if existed == Some(true) {
        c.row("RemoveTargetPortal", Res::Skipped(format!("{at} was there before this run: kept")), Duration::ZERO);
    }
}

/// For the report's tests: a run with a share given, without reading a file.
#[cfg(test)]
pub fn fake(password: &str) -> Remote {
    let a = SmbArgs {
        share: r"\\srv\data".into(),
        user: "u".into(),
        password: crate::args::SecretSource::File("/pw".into()),
    };
    let pw = crate::args::secret_from(password.as_bytes(), "smb-password-file", "/pw").unwrap();
    Remote::new(Given { smb: Some((a, pw)), iscsi: None }, None)
}
