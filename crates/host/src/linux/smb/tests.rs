use super::kernel::{found, options, verify_options};
use super::*;
use crate::paths::Roots;
use crate::testing::traced;
use std::collections::VecDeque;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::Condvar;
use std::time::Instant;

const PASSWORD: &str = "Zebra,Quartz=7781";

/// A scripted kernel: mounts are entries in a table, the server's password is fixed.
#[derive(Default)]
struct Fake {
    mounts: Mutex<HashMap<PathBuf, CifsMount>>,
    log: Mutex<Vec<String>>,
    /// Errors of the next mounts, in order.
    mount_errors: Mutex<VecDeque<Errno>>,
    /// Errors of the next credential checks, in order.
    verify_errors: Mutex<VecDeque<Errno>>,
    /// What the next probes answer; `None` hangs until `release` is set.
    probe: Mutex<Option<std::result::Result<(), Errno>>>,
    release: Mutex<bool>,
    released: Condvar,
    /// Mounts of this source wait for `release` (a hung server).
    hang_source: Mutex<Option<String>>,
    /// Run during the next mount (e.g. to pull the link's parent away).
    during_mount: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Fake {
    fn new() -> Arc<Self> {
        let f = Fake::default();
        *f.probe.lock().unwrap() = Some(Ok(()));
        Arc::new(f)
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    fn count(&self, prefix: &str) -> usize {
        self.log().iter().filter(|l| l.starts_with(prefix)).count()
    }
    fn wait_release(&self) {
        let mut r = self.release.lock().unwrap();
        while !*r {
            r = self.released.wait(r).unwrap();
        }
    }
    fn release(&self) {
        *self.release.lock().unwrap() = true;
        self.released.notify_all();
    }
}

impl Kernel for Fake {
    fn mount(&self, request: &MountRequest, target: &Path) -> std::result::Result<(), Errno> {
        self.log.lock().unwrap().push(format!("mount {} {}", request.source, target.display()));
        if let Some(hook) = self.during_mount.lock().unwrap().take() {
            hook();
        }
        if self.hang_source.lock().unwrap().as_deref() == Some(request.source.as_str()) {
            self.wait_release();
            return Err(Errno::HOSTDOWN);
        }
        if let Some(e) = self.mount_errors.lock().unwrap().pop_front() {
            return Err(e);
        }
        if !request.username.is_empty() && request.password.expose() != PASSWORD {
            return Err(Errno::ACCESS);
        }
        let mut opts = format!("rw,vers=3.1.1,username={}", shown(&request.username));
        if !request.domain.is_empty() {
            opts.push_str(&format!(",domain={}", shown(&request.domain)));
        }
        if request.seal {
            opts.push_str(",seal");
        }
        self.mounts
            .lock()
            .unwrap()
            .insert(target.to_owned(), CifsMount { source: request.source.clone(), options: opts });
        Ok(())
    }
    fn verify(&self, request: &MountRequest) -> std::result::Result<(), Errno> {
        self.log.lock().unwrap().push(format!("verify {}", request.source));
        if let Some(e) = self.verify_errors.lock().unwrap().pop_front() {
            return Err(e);
        }
        if !request.username.is_empty() && request.password.expose() != PASSWORD {
            return Err(Errno::ACCESS);
        }
        Ok(())
    }
    fn unmount(&self, target: &Path, lazy: bool) -> std::result::Result<(), Errno> {
        self.log.lock().unwrap().push(format!("unmount{} {}", if lazy { " lazy" } else { "" }, target.display()));
        self.mounts.lock().unwrap().remove(target);
        Ok(())
    }
    fn probe(&self, target: &Path) -> std::result::Result<(), Errno> {
        self.log.lock().unwrap().push(format!("probe {}", target.display()));
        let answer = *self.probe.lock().unwrap();
        match answer {
            Some(a) => a,
            None => {
                self.wait_release();
                Err(Errno::HOSTDOWN)
            }
        }
    }
    fn mounted(&self, target: &Path) -> Result<Found> {
        Ok(self.mounts.lock().unwrap().get(target).cloned().map_or(Found::Nothing, Found::Cifs))
    }
}

/// A scratch tree: `root` (the working directory links go in) and `smb` (the SMB directory).
struct Scratch {
    base: PathBuf,
    root: PathBuf,
    smb: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("csi-proxy-smb-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (root, smb) = (base.join("kubelet"), base.join("smb"));
        std::fs::create_dir_all(&root).unwrap();
        Scratch { base, root, smb }
    }
    fn smb(&self, kernel: Arc<Fake>) -> Smb {
        let fs = Filesystem::new(Roots::new(vec![self.root.to_str().unwrap().to_owned()]));
        Smb::new(self.smb.clone(), fs, kernel).with_probe_timeout(Duration::from_millis(300))
    }
    fn local(&self, name: &str) -> String {
        self.root.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn mapping(remote: &str, local: &str) -> SmbMapping {
    SmbMapping {
        remote_path: remote.into(),
        local_path: local.into(),
        username: r"CORP\alice".into(),
        password: Secret::new(PASSWORD),
        require_privacy: false,
    }
}

fn mount_dir(s: &Scratch, remote: &str) -> PathBuf {
    s.smb.join(folder_name(&parse_remote(remote).unwrap()))
}

#[test]
fn maps_once_per_share_and_links_into_the_mount() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = s.smb(k.clone());
    let (a, b) = (s.local("a"), s.local("b"));
    smb.new_smb_global_mapping(&mapping(r"\\Srv\Share\sub\dir", &a)).unwrap();
    let mount = mount_dir(&s, r"\\srv\share");
    assert!(mount.starts_with(&s.smb), "{mount:?}");
    assert_eq!(std::fs::read_link(&a).unwrap(), mount.join("sub").join("dir"));
    assert_eq!(k.log(), [format!("mount //srv/share {}", mount.display())]);
    // Retried: the same link, the mount probed and kept.
    smb.new_smb_global_mapping(&mapping(r"\\Srv\Share\sub\dir", &a)).unwrap();
    // Another sub-path of the same share (other case): the same mount.
    smb.new_smb_global_mapping(&mapping(r"\\SRV\share\other", &b)).unwrap();
    assert_eq!(std::fs::read_link(&b).unwrap(), mount.join("other"));
    assert_eq!(k.count("mount "), 1, "{:?}", k.log());
    let records = Smb::records(&mount);
    assert_eq!(std::fs::metadata(&records).unwrap().permissions().mode() & 0o777, 0o600);
    // The SMB directory it made is the owner's alone (the mounts in it are open to all).
    assert_eq!(std::fs::metadata(&s.smb).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::read_to_string(&records).unwrap(), format!("{a}\n{b}\n"));

    // Remove keeps the mount while a recorded link still points into it.
    std::fs::remove_file(&a).unwrap();
    smb.remove_smb_global_mapping(r"\\srv\share\sub\dir").unwrap();
    assert_eq!(k.count("unmount"), 0, "{:?}", k.log());
    assert_eq!(std::fs::read_to_string(&records).unwrap(), format!("{b}\n"));
    // A link that now points elsewhere does not hold the mount.
    std::fs::remove_file(&b).unwrap();
    std::os::unix::fs::symlink("/elsewhere", &b).unwrap();
    smb.remove_smb_global_mapping(r"\\srv\share").unwrap();
    assert_eq!(k.count("unmount "), 1, "{:?}", k.log());
    assert!(!mount.exists() && !records.exists());
    // Nothing left to remove: success, nothing done.
    smb.remove_smb_global_mapping(r"\\srv\share").unwrap();
    assert_eq!(k.count("unmount"), 1);
}

#[test]
fn no_local_path_only_mounts() {
    let s = Scratch::new();
    let k = Fake::new();
    s.smb(k.clone()).new_smb_global_mapping(&mapping(r"\\10.0.0.5\data", "")).unwrap();
    assert_eq!(k.count("mount "), 1);
    assert!(mount_dir(&s, r"\\10.0.0.5\data").is_dir());
}

/// Whether an error is of the expected kind.
type Kind = fn(&Error) -> bool;

#[test]
fn requests_are_validated_before_anything_changes() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = s.smb(k.clone());
    let local = s.local("v");
    let outside = s.base.join("outside").to_str().unwrap().to_owned();
    std::fs::write(s.root.join("file"), b"").unwrap();
    let bad: Vec<(SmbMapping, Kind)> = vec![
        (mapping(r"\\bad host\share", &local), |e| matches!(e, Error::InvalidArgument(_))),
        (mapping(r"\\-srv\share", &local), |e| matches!(e, Error::InvalidArgument(_))),
        (mapping(r"\\srv\sh,are", &local), |e| matches!(e, Error::InvalidArgument(_))),
        (mapping(r"\\srv\sh=are", &local), |e| matches!(e, Error::InvalidArgument(_))),
        (mapping(r"\\srv\share\..\x", &local), |e| matches!(e, Error::InvalidArgument(_))),
        (mapping(r"\\srv\share\a/b", &local), |e| matches!(e, Error::InvalidArgument(_))),
        (SmbMapping { username: "al,ice".into(), ..mapping(r"\\srv\share", &local) }, |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (SmbMapping { username: "al\nice".into(), ..mapping(r"\\srv\share", &local) }, |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (SmbMapping { username: r"DO,M\alice".into(), ..mapping(r"\\srv\share", &local) }, |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (SmbMapping { username: r"DOM\".into(), ..mapping(r"\\srv\share", &local) }, |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (SmbMapping { password: Secret::new(format!("{PASSWORD}\0x")), ..mapping(r"\\srv\share", &local) }, |e| {
            matches!(e, Error::InvalidArgument(_))
        }),
        (mapping(r"\\srv\share", &outside), |e| matches!(e, Error::PermissionDenied(_))),
        (mapping(r"\\srv\share", &format!("{local}\nx")), |e| matches!(e, Error::InvalidArgument(_))),
        (mapping(r"\\srv\share", &s.local("file")), |e| matches!(e, Error::AlreadyExists(_))),
        (mapping(r"\\srv\share", &s.local("missing/v")), |e| matches!(e, Error::NotFound(_))),
    ];
    for (m, ok) in bad {
        let e = smb.new_smb_global_mapping(&m).unwrap_err();
        assert!(ok(&e), "{m:?}: {e:?}");
        assert!(!e.to_string().contains("Zebra"), "{e}");
    }
    assert_eq!(k.log(), Vec::<String>::new());
    assert!(!s.smb.exists());
    // IPv6 literals and DNS names pass.
    for host in ["[fd00::1]", "fd00::1", "files.example.com", "files_1"] {
        parse_remote(&format!(r"\\{host}\share")).unwrap();
    }
}

#[test]
fn unconfigured_smb_dir_is_a_precondition() {
    let s = Scratch::new();
    let fs = Filesystem::new(Roots::new(vec![s.root.to_str().unwrap().to_owned()]));
    let k = Fake::new();
    let smb = Smb::new(PathBuf::new(), fs, k.clone());
    let e = smb.new_smb_global_mapping(&mapping(r"\\srv\share", "")).unwrap_err();
    assert!(matches!(e, Error::FailedPrecondition(_)) && e.to_string().contains("-linux-smb-dir"), "{e:?}");
    smb.remove_smb_global_mapping(r"\\srv\share").unwrap();
    assert!(k.log().is_empty());
}

#[test]
fn wrong_password_is_denied_and_leaves_nothing() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = s.smb(k.clone());
    let wrong = "Wrong,Secret=42";
    let local = s.local("v");
    let m = SmbMapping { password: Secret::new(wrong), ..mapping(r"\\srv\share\sub", &local) };
    let (r, logs) = traced(|| smb.new_smb_global_mapping(&m));
    let e = r.unwrap_err();
    assert!(matches!(e, Error::PermissionDenied(_)), "{e:?}");
    assert!(e.to_string().contains(r"\\srv\share"), "{e}");
    for text in logs.iter().chain([&e.to_string(), &format!("{e:?}"), &format!("{m:?}")]) {
        assert!(!text.contains(wrong), "{text}");
    }
    assert!(!mount_dir(&s, r"\\srv\share").exists());
    assert!(std::fs::symlink_metadata(&local).is_err());
    assert!(s.smb.read_dir().unwrap().next().is_none(), "nothing left in the SMB directory");
}

#[test]
fn mount_errors_map_to_codes() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = s.smb(k.clone());
    for (errno, ok) in [
        (Errno::HOSTDOWN, (|e| matches!(e, Error::Unavailable(_))) as Kind),
        (Errno::CONNREFUSED, |e| matches!(e, Error::Unavailable(_))),
        (Errno::NOENT, |e| matches!(e, Error::NotFound(_))),
        (Errno::IO, |e| matches!(e, Error::Internal(_))),
        (Errno::ACCESS, |e| matches!(e, Error::PermissionDenied(m) if m.contains("EACCES") && m.contains("hint: "))),
        (Errno::KEYREJECTED, |e| matches!(e, Error::PermissionDenied(m) if m.contains("EKEYREJECTED"))),
        (Errno::NODEV, |e| matches!(e, Error::FailedPrecondition(m) if m.contains("hint: load the cifs module"))),
        (Errno::INVAL, |e| matches!(e, Error::InvalidArgument(m) if m.contains("EINVAL") && m.contains("dmesg"))),
    ] {
        k.mount_errors.lock().unwrap().push_back(errno);
        let e = smb.new_smb_global_mapping(&mapping(r"\\srv\share", &s.local("v"))).unwrap_err();
        assert!(ok(&e), "{errno}: {e:?}");
        assert!(matches!(e, Error::Internal(_)) || e.to_string().contains("; hint: "), "{errno}: {e}");
        assert!(!mount_dir(&s, r"\\srv\share").exists());
    }
}

#[test]
fn other_credentials_are_refused() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = s.smb(k.clone());
    smb.new_smb_global_mapping(&mapping(r"\\srv\share", &s.local("a"))).unwrap();
    let bob = SmbMapping { username: r"CORP\bob".into(), ..mapping(r"\\srv\share\x", &s.local("b")) };
    let e = smb.new_smb_global_mapping(&bob).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)) && e.to_string().contains("other credentials"), "{e:?}");
    let other_domain = SmbMapping { username: r"LAB\alice".into(), ..mapping(r"\\srv\share\x", &s.local("b")) };
    assert!(matches!(smb.new_smb_global_mapping(&other_domain), Err(Error::AlreadyExists(_))));
    // Same user, another password: told by the digest, the password in no text.
    let other_pw = SmbMapping { password: Secret::new("Other-Pw-99"), ..mapping(r"\\srv\share\x", &s.local("b")) };
    let e = smb.new_smb_global_mapping(&other_pw).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)) && e.to_string().contains("another password"), "{e:?}");
    assert!(!e.to_string().contains("Other-Pw") && !e.to_string().contains("Zebra"), "{e}");
    // User names compare without case, as Windows compares them.
    let upper = SmbMapping { username: r"corp\ALICE".into(), ..mapping(r"\\srv\share\x", &s.local("b")) };
    smb.new_smb_global_mapping(&upper).unwrap();
    assert_eq!(k.count("mount "), 1);
    assert!(std::fs::symlink_metadata(s.local("b")).is_ok());
}

/// A restart is a new backend over the same SMB directory, the share still mounted: the
/// password the mount was made with is unknown to it.
fn restarted(s: &Scratch, k: &Arc<Fake>) -> Smb {
    s.smb(k.clone()).new_smb_global_mapping(&mapping(r"\\srv\share", &s.local("a"))).unwrap();
    k.log.lock().unwrap().clear();
    s.smb(k.clone())
}

#[test]
fn after_a_restart_a_wrong_password_is_refused_and_the_right_one_then_taken() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = restarted(&s, &k);
    let mount = mount_dir(&s, r"\\srv\share");
    let records = std::fs::read_to_string(Smb::records(&mount)).unwrap();
    let wrong = SmbMapping { password: Secret::new("Wrong,Secret=42"), ..mapping(r"\\srv\share\x", &s.local("b")) };
    let (r, logs) = traced(|| smb.new_smb_global_mapping(&wrong));
    let e = r.unwrap_err();
    // As the first mount answers a wrong password: PermissionDenied, the password nowhere.
    assert!(matches!(e, Error::PermissionDenied(_)) && e.to_string().contains(r"\\srv\share"), "{e:?}");
    for text in logs.iter().chain([&e.to_string(), &format!("{e:?}")]) {
        assert!(!text.contains("Wrong,Secret"), "{text}");
    }
    // Checked with the server; nothing linked, mounted or unmounted, the records as they were.
    assert_eq!(k.log(), ["verify //srv/share"]);
    assert!(std::fs::symlink_metadata(s.local("b")).is_err());
    assert!(k.mounts.lock().unwrap().contains_key(&mount));
    assert_eq!(std::fs::read_to_string(Smb::records(&mount)).unwrap(), records);
    // The right one is checked too, then taken for the existing mount.
    smb.new_smb_global_mapping(&mapping(r"\\srv\share\x", &s.local("b"))).unwrap();
    assert_eq!(std::fs::read_link(s.local("b")).unwrap(), mount.join("x"));
    assert_eq!(k.log(), ["verify //srv/share", "verify //srv/share", &format!("probe {}", mount.display())]);
}

#[test]
fn after_a_restart_the_right_password_is_checked_and_a_wrong_one_then_refused() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = restarted(&s, &k);
    let mount = mount_dir(&s, r"\\srv\share");
    smb.new_smb_global_mapping(&mapping(r"\\srv\share\x", &s.local("b"))).unwrap();
    assert_eq!(k.count("verify "), 1, "the password the mount is now linked with was checked: {:?}", k.log());
    let wrong = SmbMapping { password: Secret::new("Wrong,Secret=42"), ..mapping(r"\\srv\share\y", &s.local("c")) };
    let e = smb.new_smb_global_mapping(&wrong).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)) && e.to_string().contains("another password"), "{e:?}");
    assert!(std::fs::symlink_metadata(s.local("c")).is_err());
    // Once checked, the password is known: no more checks, no mount or unmount.
    smb.new_smb_global_mapping(&mapping(r"\\srv\share\y", &s.local("c"))).unwrap();
    assert_eq!(k.count("verify "), 1, "{:?}", k.log());
    assert_eq!((k.count("mount "), k.count("unmount")), (0, 0), "{:?}", k.log());
    // The records survived the restart too: the mount stays for the links.
    smb.remove_smb_global_mapping(r"\\srv\share").unwrap();
    assert_eq!(k.count("unmount"), 0);
    assert!(k.mounts.lock().unwrap().contains_key(&mount));
}

#[test]
fn after_a_restart_a_failed_check_changes_nothing_and_says_why() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = restarted(&s, &k);
    for (errno, ok) in [
        (Errno::HOSTDOWN, (|e| matches!(e, Error::Unavailable(_))) as Kind),
        (Errno::KEYREJECTED, |e| matches!(e, Error::PermissionDenied(_))),
        (Errno::IO, |e| matches!(e, Error::Internal(_))),
    ] {
        k.verify_errors.lock().unwrap().push_back(errno);
        let e = smb.new_smb_global_mapping(&mapping(r"\\srv\share\x", &s.local("b"))).unwrap_err();
        assert!(ok(&e) && e.to_string().contains("checking the credentials"), "{errno}: {e:?}");
        assert!(std::fs::symlink_metadata(s.local("b")).is_err());
    }
    assert_eq!(k.count("verify "), 3);
    assert_eq!((k.count("mount "), k.count("unmount"), k.count("probe")), (0, 0, 0), "{:?}", k.log());
    // A guest mount has no password to check.
    let guest = |remote: &str, local: &str| SmbMapping {
        username: String::new(),
        password: Secret::new(""),
        ..mapping(remote, local)
    };
    s.smb(k.clone()).new_smb_global_mapping(&guest(r"\\srv\public", "")).unwrap();
    s.smb(k.clone()).new_smb_global_mapping(&guest(r"\\srv\public", &s.local("g"))).unwrap();
    assert_eq!(k.count("verify "), 3);
}

#[test]
fn privacy_mounts_with_seal_and_refuses_an_unsealed_mount() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = s.smb(k.clone());
    smb.new_smb_global_mapping(&mapping(r"\\srv\plain", &s.local("a"))).unwrap();
    let sealed = SmbMapping { require_privacy: true, ..mapping(r"\\srv\plain\x", &s.local("b")) };
    let e = smb.new_smb_global_mapping(&sealed).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)) && e.to_string().contains("seal"), "{e:?}");
    smb.new_smb_global_mapping(&SmbMapping { require_privacy: true, ..mapping(r"\\srv\secret", &s.local("c")) })
        .unwrap();
    let mounts = k.mounts.lock().unwrap();
    assert!(mounts[&mount_dir(&s, r"\\srv\secret")].flag("seal"));
    assert!(!mounts[&mount_dir(&s, r"\\srv\plain")].flag("seal"));
}

#[test]
fn a_dead_mount_is_detached_and_mounted_again() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = s.smb(k.clone());
    let a = s.local("a");
    smb.new_smb_global_mapping(&mapping(r"\\srv\share", &a)).unwrap();
    let mount = mount_dir(&s, r"\\srv\share");
    *k.probe.lock().unwrap() = Some(Err(Errno::HOSTDOWN));
    smb.new_smb_global_mapping(&mapping(r"\\srv\share\x", &s.local("b"))).unwrap();
    assert_eq!(k.count(&format!("unmount lazy {}", mount.display())), 1, "{:?}", k.log());
    assert_eq!(k.count("mount "), 2);
    // A probe that never answers counts as dead once its time is up.
    *k.probe.lock().unwrap() = None;
    let started = Instant::now();
    smb.new_smb_global_mapping(&mapping(r"\\srv\share\y", &s.local("c"))).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(k.count("unmount lazy"), 2);
    assert_eq!(k.count("mount "), 3);
    // A healthy answer keeps it.
    *k.probe.lock().unwrap() = Some(Ok(()));
    k.release();
    // The hung probe, once it answers, is done with (a call meanwhile would wait for it).
    while smb.probes.running() > 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    smb.new_smb_global_mapping(&mapping(r"\\srv\share\y", &s.local("c"))).unwrap();
    assert_eq!(k.count("mount "), 3);
    assert_eq!(std::fs::read_link(&a).unwrap(), mount);
}

#[test]
fn a_hung_share_does_not_hold_other_shares() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = Arc::new(s.smb(k.clone()));
    *k.hang_source.lock().unwrap() = Some("//dead/share".into());
    let hung = {
        let (smb, local) = (smb.clone(), s.local("dead"));
        std::thread::spawn(move || smb.new_smb_global_mapping(&mapping(r"\\dead\share", &local)))
    };
    while k.count("mount //dead") == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    // On its own thread, so that a call wrongly held up fails the test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (smb, local) = (smb.clone(), s.local("alive"));
        std::thread::spawn(move || {
            let r = smb.new_smb_global_mapping(&mapping(r"\\alive\share", &local));
            let _ = tx.send(r.and_then(|()| smb.remove_smb_global_mapping(r"\\alive\share")));
        });
    }
    let alive = rx.recv_timeout(Duration::from_secs(2));
    k.release();
    assert!(matches!(alive, Ok(Ok(()))), "the other share was held up: {alive:?}");
    assert!(matches!(hung.join().unwrap(), Err(Error::Unavailable(_))));
    assert!(!mount_dir(&s, r"\\dead\share").exists());
}

#[test]
fn a_failed_link_undoes_the_mount_it_made() {
    let s = Scratch::new();
    let k = Fake::new();
    let smb = s.smb(k.clone());
    let parent = s.root.join("pod");
    std::fs::create_dir(&parent).unwrap();
    let local = parent.join("v").to_str().unwrap().to_owned();
    // The link's parent goes away while the share is mounted.
    let gone = parent.clone();
    *k.during_mount.lock().unwrap() = Some(Box::new(move || std::fs::remove_dir(&gone).unwrap()));
    let e = smb.new_smb_global_mapping(&mapping(r"\\srv\share", &local)).unwrap_err();
    assert!(e.to_string().contains("creating the link"), "{e:?}");
    let mount = mount_dir(&s, r"\\srv\share");
    assert_eq!(k.log(), [format!("mount //srv/share {}", mount.display()), format!("unmount {}", mount.display())]);
    assert!(!mount.exists() && !Smb::records(&mount).exists());

    // A mount other links use is kept.
    std::fs::create_dir(&parent).unwrap();
    smb.new_smb_global_mapping(&mapping(r"\\srv\share", &s.local("a"))).unwrap();
    *k.probe.lock().unwrap() = Some(Err(Errno::STALE));
    let gone = parent.clone();
    *k.during_mount.lock().unwrap() = Some(Box::new(move || std::fs::remove_dir_all(&gone).unwrap()));
    assert!(smb.new_smb_global_mapping(&mapping(r"\\srv\share", &local)).is_err());
    assert!(k.mounts.lock().unwrap().contains_key(&mount));
    assert_eq!(std::fs::read_to_string(Smb::records(&mount)).unwrap(), format!("{}\n", s.local("a")));
}

#[test]
fn mount_folders_are_safe_and_distinct() {
    let name = |r: &str| folder_name(&parse_remote(r).unwrap());
    assert_eq!(name(r"\\SRV\Share"), name(r"\\srv\share\sub"));
    let names = [name(r"\\srv\a b"), name(r"\\srv\a_b"), name(r"\\srv\a$"), name(r"\\srv\a%"), name(r"\\srv-a\b")];
    let distinct: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    for n in &names {
        assert!(!n.starts_with('.') && !n.contains('/') && n.len() < 255, "{n}");
        assert!(n.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)), "{n}");
    }
    assert!(name(r"\\srv\share").starts_with("srv-share-"));
}

#[test]
fn the_password_is_one_option_of_its_own() {
    let request = MountRequest {
        host: "srv".into(),
        source: "//srv/share".into(),
        username: "alice".into(),
        domain: "CORP".into(),
        password: Secret::new("a,seal,username=root"),
        seal: true,
    };
    let o = options(&request, "10.0.0.5");
    assert_eq!(
        o,
        [
            ("source", Some("//srv/share")),
            ("ip", Some("10.0.0.5")),
            ("username", Some("alice")),
            ("password", Some("a,seal,username=root")),
            ("domain", Some("CORP")),
            ("file_mode", Some("0777")),
            ("dir_mode", Some("0777")),
            ("seal", None),
        ]
    );
    assert_eq!(verify_options(&request, "10.0.0.5"), [o, vec![("nosharesock", None)]].concat());
    let guest = MountRequest { username: String::new(), seal: false, ..request };
    let guest = options(&guest, "10.0.0.5");
    assert!(guest.iter().all(|(k, _)| *k != "password") && guest.contains(&("guest", None)), "{guest:?}");
}

#[test]
fn mountinfo_shows_the_last_mount_and_its_options() {
    let text = b"30 1 0:30 / /smb/m rw - tmpfs tmpfs rw\n\
        31 30 0:33 / /smb/m rw,relatime - cifs //srv/share rw,username=al\\040ice,domain=CORP,seal,soft\n\
        32 1 0:34 / /other rw - ext4 /dev/sda rw\n";
    let Found::Cifs(m) = found(text, Path::new("/smb/m")) else { panic!() };
    assert_eq!(m.source, "//srv/share");
    assert_eq!(m.option("username"), Some(shown("al ice").as_str()));
    assert_eq!(m.option("domain"), Some("CORP"));
    assert!(m.flag("seal") && !m.flag("sea"));
    assert_eq!(found(text, Path::new("/other")), Found::Other("ext4".into()));
    assert_eq!(found(text, Path::new("/nothing")), Found::Nothing);
}

#[test]
fn the_smb_directory_is_named_as_the_kernel_names_it() {
    // mountinfo shows canonical paths: a directory configured through a link must be compared
    // by its target, or a mounted share would look unmounted and be mounted again on top.
    let s = Scratch::new();
    let real = s.base.join("real");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(&real, s.base.join("via")).unwrap();
    let fs = Filesystem::new(Roots::new(vec![s.root.to_str().unwrap().to_owned()]));
    let k = Fake::new();
    let smb = Smb::new(s.base.join("via/smb"), fs, k.clone());
    smb.new_smb_global_mapping(&mapping(r"\\srv\share", &s.local("a"))).unwrap();
    let mounted: Vec<PathBuf> = k.mounts.lock().unwrap().keys().cloned().collect();
    let canonical = std::fs::canonicalize(&real).unwrap().join("smb");
    assert!(mounted.len() == 1 && mounted[0].starts_with(&canonical), "{mounted:?}");
    assert!(std::fs::read_link(s.local("a")).unwrap().starts_with(&canonical));
}

#[test]
fn an_existing_link_elsewhere_is_refused_without_saying_where_it_points() {
    let s = Scratch::new();
    let k = Fake::new();
    let local = s.local("v");
    std::os::unix::fs::symlink("/somewhere/private-place", &local).unwrap();
    let e = s.smb(k.clone()).new_smb_global_mapping(&mapping(r"\\10.0.0.5\data", &local)).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists(_)), "{e:?}");
    assert!(!e.to_string().contains("private-place"), "{e}");
}
