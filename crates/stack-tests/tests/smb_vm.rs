#![cfg(target_os = "linux")]
//! Real SMB mappings, inside the storage VM only (`scripts/storage-vm-tests.sh`): Samba on
//! 127.0.0.1 (`storage-vm-peers smb`), the kernel's cifs client, the whole server over unix
//! sockets with the Linux backend. Elsewhere every test returns at once.
//!
//! Run with `--test-threads=1`: the tests share the Samba server and look at this process's
//! mount table.

use csi_proxy_stack_tests::procs::Scanner;
use csi_proxy_stack_tests::{logs, TestServer};
use csi_proxy_wire::{v1, Group};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tonic::Code;

const USER: &str = "smbvm";
/// Commas and `=` would break a `-o` option string or a credentials file read naively.
const PASSWORD: &str = "Pw,with=Comma 7";
const WRONG: &str = "Wr0ng,Guess=xyz";

/// The shares `data` and `priv` (their server-side directories), started once.
fn shares() -> Option<&'static (PathBuf, PathBuf)> {
    if std::env::var("STORAGE_VM").as_deref() != Ok("1") {
        eprintln!("skipped: only inside storage-vm (scripts/storage-vm-tests.sh)");
        return None;
    }
    static SHARES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    Some(SHARES.get_or_init(|| {
        let peers = std::env::var("STORAGE_VM_PEERS").expect("STORAGE_VM_PEERS");
        let start = |name: &str| {
            let dir = PathBuf::from(format!("/srv/smb-{name}"));
            let out = Command::new(&peers)
                .args(["smb", "--user", USER, "--pass", PASSWORD, "--name", name])
                .arg(&dir)
                .output()
                .unwrap();
            assert!(out.status.success(), "storage-vm-peers smb: {}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8(out.stdout).unwrap();
            let unc = text.lines().find_map(|l| l.strip_prefix("SMB_UNC=")).expect("SMB_UNC");
            assert_eq!(unc, format!("//127.0.0.1/{name}"));
            dir
        };
        (start("data"), start("priv"))
    }))
}

/// A scratch tree: `kubelet` (the working directory) and `smb` (`-linux-smb-dir`).
struct Scratch {
    base: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Self {
        let base = std::env::temp_dir().join(format!("csi-smb-vm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("kubelet")).unwrap();
        Scratch { base }
    }
    fn kubelet(&self, name: &str) -> String {
        self.base.join("kubelet").join(name).to_str().unwrap().to_owned()
    }
    fn smb(&self) -> PathBuf {
        self.base.join("smb")
    }
    async fn server(&self, require_privacy: bool) -> TestServer {
        let roots = vec![self.base.join("kubelet").to_str().unwrap().to_owned()];
        TestServer::start_native_smb(roots, self.smb(), require_privacy).await
    }
}

/// `(mount point, source, super options)` of every cifs mount of this process.
fn cifs_mounts() -> Vec<(PathBuf, String, String)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|x| *x == "-")?;
            (f[dash + 1] == "cifs").then(|| (PathBuf::from(f[4]), f[dash + 2].to_owned(), f[dash + 3].to_owned()))
        })
        .collect()
}

fn mounts_of(source: &str) -> Vec<(PathBuf, String, String)> {
    cifs_mounts().into_iter().filter(|m| m.1 == source).collect()
}

fn request(remote: &str, local: &str, password: &str) -> v1::NewSmbGlobalMappingRequest {
    v1::NewSmbGlobalMappingRequest {
        remote_path: remote.into(),
        local_path: local.into(),
        username: USER.into(),
        password: password.into(),
    }
}

fn remove(remote: &str) -> v1::RemoveSmbGlobalMappingRequest {
    v1::RemoveSmbGlobalMappingRequest { remote_path: remote.into() }
}

async fn client(s: &TestServer) -> v1::smb_client::SmbClient<tonic::transport::Channel> {
    v1::smb_client::SmbClient::new(s.channel(Group::Smb, "v1").await)
}

#[tokio::test]
async fn map_write_reuse_and_remove() {
    let Some((data, _)) = shares() else { return };
    let scratch = Scratch::new("flows");
    std::fs::create_dir_all(data.join("sub1")).unwrap();
    std::fs::create_dir_all(data.join("sub2/deeper")).unwrap();
    std::fs::write(data.join("sub2/deeper/server.txt"), b"from the server").unwrap();
    let s = scratch.server(false).await;
    let mut c = client(&s).await;
    let (a, b) = (scratch.kubelet("a"), scratch.kubelet("b"));

    c.new_smb_global_mapping(request("//127.0.0.1/data/sub1", &a, PASSWORD)).await.unwrap();
    let mounts = mounts_of("//127.0.0.1/data");
    assert_eq!(mounts.len(), 1, "{:?}", cifs_mounts());
    let mount = mounts[0].0.clone();
    assert!(mount.starts_with(scratch.smb()), "mounted at {mount:?}, not under the SMB directory");
    assert!(!mounts[0].2.split(',').any(|o| o == "seal"), "{}", mounts[0].2);
    assert_eq!(std::fs::read_link(&a).unwrap(), mount.join("sub1"));
    // Written through the link, seen in the share's directory on the server.
    std::fs::write(Path::new(&a).join("hello.txt"), b"through the link").unwrap();
    assert_eq!(std::fs::read(data.join("sub1/hello.txt")).unwrap(), b"through the link");

    // Again: idempotent, still one mount.
    c.new_smb_global_mapping(request(r"\\127.0.0.1\data\sub1", &a, PASSWORD)).await.unwrap();
    // Another sub-folder of the same share: the same mount.
    c.new_smb_global_mapping(request(r"\\127.0.0.1\DATA\sub2\deeper", &b, PASSWORD)).await.unwrap();
    assert_eq!(mounts_of("//127.0.0.1/data").len(), 1, "{:?}", cifs_mounts());
    assert_eq!(std::fs::read(Path::new(&b).join("server.txt")).unwrap(), b"from the server");

    // The mount stays while the other link uses it.
    std::fs::remove_file(&a).unwrap();
    c.remove_smb_global_mapping(remove("//127.0.0.1/data/sub1")).await.unwrap();
    assert_eq!(mounts_of("//127.0.0.1/data").len(), 1);
    assert_eq!(std::fs::read(Path::new(&b).join("server.txt")).unwrap(), b"from the server");
    // No link left: unmounted, folder gone.
    std::fs::remove_file(&b).unwrap();
    c.remove_smb_global_mapping(remove("//127.0.0.1/data/sub2/deeper")).await.unwrap();
    assert!(mounts_of("//127.0.0.1/data").is_empty(), "{:?}", cifs_mounts());
    assert!(!mount.exists());
    // Nothing to remove: success.
    c.remove_smb_global_mapping(remove("//127.0.0.1/data")).await.unwrap();
    s.stop().await;
}

/// As another local user (uid 65534): nothing of a mapped share can be read or written through
/// the SMB directory (it and the share's folder are 0700), while a pod's view of it, the bind
/// mount the kubelet makes of its link, can be (the mount's own modes are open).
#[tokio::test]
async fn other_users_reach_no_share_but_a_pods_bind_mount_does() {
    use std::os::unix::process::CommandExt;
    let Some((data, _)) = shares() else { return };
    let scratch = Scratch::new("modes");
    std::fs::create_dir_all(data.join("modes")).unwrap();
    std::fs::write(data.join("modes/secret.txt"), b"server data").unwrap();
    let s = scratch.server(false).await;
    let mut c = client(&s).await;
    let link = scratch.kubelet("pv");
    c.new_smb_global_mapping(request("//127.0.0.1/data/modes", &link, PASSWORD)).await.unwrap();
    let target = std::fs::read_link(&link).unwrap();
    let as_nobody = |argv: &[&str]| {
        let out = Command::new(argv[0]).args(&argv[1..]).uid(65534).gid(65534).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let file = target.join("secret.txt");
    assert!(!as_nobody(&["cat", file.to_str().unwrap()]).0, "another user read the share");
    assert!(!as_nobody(&["ls", scratch.smb().to_str().unwrap()]).0, "another user listed the SMB directory");
    let planted = target.join("planted.txt");
    assert!(!as_nobody(&["touch", planted.to_str().unwrap()]).0, "another user wrote to the share");
    // The pod's view: a bind mount of the link's target, as the kubelet makes for a container.
    let pod = scratch.base.join("pod-volume");
    std::fs::create_dir_all(&pod).unwrap();
    let bound = Command::new("mount").arg("--bind").arg(&target).arg(&pod).status().unwrap();
    assert!(bound.success());
    let seen = as_nobody(&["cat", pod.join("secret.txt").to_str().unwrap()]);
    let wrote = as_nobody(&["touch", pod.join("from-pod.txt").to_str().unwrap()]).0;
    let _ = Command::new("umount").arg(&pod).status();
    assert_eq!(seen, (true, "server data".to_string()), "the pod could not read its volume");
    assert!(wrote, "the pod could not write to its volume");
    assert!(data.join("modes/from-pod.txt").exists());
    std::fs::remove_file(&link).unwrap();
    c.remove_smb_global_mapping(remove("//127.0.0.1/data/modes")).await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn wrong_password_is_denied_and_shown_nowhere() {
    let Some(_) = shares() else { return };
    logs::install();
    // The scanner itself finds a process that carries the needle.
    let marker = "scanner-sees-Xy9";
    let scanner = Scanner::start(&[marker]);
    let mut child = Command::new("sh").args(["-c", "sleep 30; :", marker]).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let seen = scanner.finish();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!seen.is_empty(), "the scanner did not see the marker in sleep's argv");

    let scratch = Scratch::new("denied");
    let s = scratch.server(false).await;
    let mut c = client(&s).await;
    let local = scratch.kubelet("v");
    let scanner = Scanner::start(&[WRONG, PASSWORD]);
    let e = c.new_smb_global_mapping(request("//127.0.0.1/data", &local, WRONG)).await.unwrap_err();
    // The right password goes the same way.
    c.new_smb_global_mapping(request("//127.0.0.1/data", "", PASSWORD)).await.unwrap();
    let hits = scanner.finish();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains(r"\\127.0.0.1\data"), "{e:?}");
    assert!(!e.message().contains(WRONG) && !format!("{e:?}").contains(WRONG), "{e:?}");
    assert!(hits.is_empty(), "a password was in a process's argv or environment: {hits:?}");
    assert!(std::fs::symlink_metadata(&local).is_err(), "a link was left behind");
    let log = logs::text();
    assert!(log.contains("NewSmbGlobalMapping"), "nothing was captured:\n{log}");
    assert!(!log.contains(WRONG) && !log.contains(PASSWORD), "a password was logged:\n{log}");

    c.remove_smb_global_mapping(remove("//127.0.0.1/data")).await.unwrap();
    assert!(mounts_of("//127.0.0.1/data").is_empty(), "{:?}", cifs_mounts());
    // Nothing of the failed call is left in the SMB directory.
    let left: Vec<_> = std::fs::read_dir(scratch.smb()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "{left:?}");
    s.stop().await;
}

#[tokio::test]
async fn require_privacy_mounts_with_seal() {
    let Some((_, private)) = shares() else { return };
    let scratch = Scratch::new("seal");
    std::fs::write(private.join("secret.txt"), b"sealed").unwrap();
    let s = scratch.server(true).await;
    let mut c = client(&s).await;
    let local = scratch.kubelet("p");
    c.new_smb_global_mapping(request("//127.0.0.1/priv", &local, PASSWORD)).await.unwrap();
    let mounts = mounts_of("//127.0.0.1/priv");
    assert_eq!(mounts.len(), 1, "{:?}", cifs_mounts());
    assert!(mounts[0].2.split(',').any(|o| o == "seal"), "no seal: {}", mounts[0].2);
    assert_eq!(std::fs::read(Path::new(&local).join("secret.txt")).unwrap(), b"sealed");
    std::fs::remove_file(&local).unwrap();
    c.remove_smb_global_mapping(remove("//127.0.0.1/priv")).await.unwrap();
    assert!(mounts_of("//127.0.0.1/priv").is_empty());
    s.stop().await;
}

#[tokio::test]
async fn other_credentials_and_unreachable_servers_are_refused() {
    let Some(_) = shares() else { return };
    let scratch = Scratch::new("refused");
    let s = scratch.server(false).await;
    let mut c = client(&s).await;
    c.new_smb_global_mapping(request("//127.0.0.1/data", &scratch.kubelet("a"), PASSWORD)).await.unwrap();
    // The same share with another password while it is mounted: refused, named, not shown.
    let e = c.new_smb_global_mapping(request("//127.0.0.1/data/x", &scratch.kubelet("b"), WRONG)).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains(r"\\127.0.0.1\data") && !e.message().contains(WRONG), "{e:?}");
    // No server at that address (the VM has no network): Unavailable, quickly.
    let started = std::time::Instant::now();
    let e =
        c.new_smb_global_mapping(request("//10.255.255.1/data", &scratch.kubelet("c"), PASSWORD)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    // A share the server does not have.
    let e = c.new_smb_global_mapping(request("//127.0.0.1/nosuch", &scratch.kubelet("d"), PASSWORD)).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    std::fs::remove_file(scratch.kubelet("a")).unwrap();
    c.remove_smb_global_mapping(remove("//127.0.0.1/data")).await.unwrap();
    assert!(cifs_mounts().is_empty(), "{:?}", cifs_mounts());
    s.stop().await;
}

/// PIDs of every smbd (the Samba this test binary started in the VM).
fn smbd_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "smbd"))
        .collect()
}

#[tokio::test]
async fn a_dead_mount_is_detached_and_mounted_again() {
    let Some((data, _)) = shares() else { return };
    let scratch = Scratch::new("dead");
    std::fs::create_dir_all(data.join("dead")).unwrap();
    let s = scratch.server(false).await;
    let mut c = client(&s).await;
    let (a, b) = (scratch.kubelet("a"), scratch.kubelet("b"));
    c.new_smb_global_mapping(request("//127.0.0.1/data/dead", &a, PASSWORD)).await.unwrap();
    let mount = mounts_of("//127.0.0.1/data")[0].0.clone();

    // The server goes away (every smbd, the one serving our session included).
    for pid in smbd_pids() {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !smbd_pids().is_empty() {
        assert!(std::time::Instant::now() < deadline, "smbd did not stop");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The mount no longer answers: detached, and mounting again fails while the server is down.
    let started = std::time::Instant::now();
    let e = c.new_smb_global_mapping(request("//127.0.0.1/data/dead", &b, PASSWORD)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "{:?}", started.elapsed());
    assert!(mounts_of("//127.0.0.1/data").is_empty(), "the dead mount is still there: {:?}", cifs_mounts());
    assert!(std::fs::symlink_metadata(&b).is_err());

    // The server is back: mounted again at the same folder, so the first link works again.
    let peers = std::env::var("STORAGE_VM_PEERS").unwrap();
    let out = Command::new(&peers)
        .args(["smb", "--user", USER, "--pass", PASSWORD, "--name", "data"])
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    c.new_smb_global_mapping(request("//127.0.0.1/data/dead", &b, PASSWORD)).await.unwrap();
    assert_eq!(mounts_of("//127.0.0.1/data").iter().map(|m| &m.0).collect::<Vec<_>>(), [&mount]);
    std::fs::write(Path::new(&a).join("again.txt"), b"after the restart").unwrap();
    assert_eq!(std::fs::read(data.join("dead/again.txt")).unwrap(), b"after the restart");

    std::fs::remove_file(&a).unwrap();
    std::fs::remove_file(&b).unwrap();
    c.remove_smb_global_mapping(remove("//127.0.0.1/data")).await.unwrap();
    assert!(cifs_mounts().is_empty(), "{:?}", cifs_mounts());
    s.stop().await;
}

#[tokio::test]
async fn a_hung_server_holds_up_no_other_share() {
    let Some(_) = shares() else { return };
    let scratch = Scratch::new("hung");
    // A "server" on 127.0.0.2:445 that accepts and never answers (Samba listens on 127.0.0.1).
    let listener = std::net::TcpListener::bind("127.0.0.2:445").unwrap();
    listener.set_nonblocking(true).unwrap();
    let held: Arc<Mutex<Vec<std::net::TcpStream>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let accepting = {
        let (held, stop) = (held.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => held.lock().unwrap().push(conn),
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
        })
    };
    let s = scratch.server(false).await;
    let first = scratch.kubelet("ok1");
    client(&s).await.new_smb_global_mapping(request("//127.0.0.1/data", &first, PASSWORD)).await.unwrap();
    let hung = {
        let mut c = client(&s).await;
        let local = scratch.kubelet("hung");
        tokio::spawn(async move { c.new_smb_global_mapping(request("//127.0.0.2/data", &local, PASSWORD)).await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while held.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the kernel never connected to the silent server");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Meanwhile a share already mounted is mapped again and unmapped at once. (A new mount of
    // another share would wait: the kernel serialises cifs mounts itself, cifs_mount_mutex,
    // until the silent server's negotiate times out; the backend holds no lock across shares.)
    let mut c = client(&s).await;
    let started = std::time::Instant::now();
    let other = scratch.kubelet("ok2");
    c.new_smb_global_mapping(request("//127.0.0.1/data/x", &other, PASSWORD)).await.unwrap();
    std::fs::remove_file(&other).unwrap();
    c.remove_smb_global_mapping(remove("//127.0.0.1/data/x")).await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    assert_eq!(mounts_of("//127.0.0.1/data").len(), 1, "the first link still uses the mount");
    assert!(!hung.is_finished(), "the silent server's mapping should still be waiting");

    // The silent server hangs up: the hung call fails as unreachable and leaves nothing.
    stop.store(true, Ordering::Relaxed);
    accepting.join().unwrap();
    for conn in held.lock().unwrap().drain(..) {
        let _ = conn.shutdown(std::net::Shutdown::Both);
    }
    let e = hung.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(std::fs::symlink_metadata(scratch.kubelet("hung")).is_err());
    assert!(mounts_of("//127.0.0.2/data").is_empty(), "{:?}", cifs_mounts());
    std::fs::remove_file(&first).unwrap();
    c.remove_smb_global_mapping(remove("//127.0.0.1/data")).await.unwrap();
    assert!(cifs_mounts().is_empty(), "{:?}", cifs_mounts());
    s.stop().await;
}

/// A restart is a new server over the same `-linux-smb-dir` with the share still mounted: the
/// password the mount was made with is unknown to it, so the caller's is checked with Samba (a
/// mount of its own, never attached) before anything is linked to the existing mount.
#[tokio::test]
async fn after_a_restart_the_password_is_checked_with_the_server() {
    let Some((data, _)) = shares() else { return };
    let scratch = Scratch::new("restart");
    std::fs::create_dir_all(data.join("restart")).unwrap();
    std::fs::write(data.join("restart/server.txt"), b"from the server").unwrap();
    let (a, b, c2, d) = (scratch.kubelet("a"), scratch.kubelet("b"), scratch.kubelet("c"), scratch.kubelet("d"));
    let s = scratch.server(false).await;
    client(&s).await.new_smb_global_mapping(request("//127.0.0.1/data/restart", &a, PASSWORD)).await.unwrap();
    s.stop().await;
    let mounted = mounts_of("//127.0.0.1/data");
    assert_eq!(mounted.len(), 1, "{:?}", cifs_mounts());

    // Wrong first, then right.
    let s = scratch.server(false).await;
    let mut c = client(&s).await;
    let e = c.new_smb_global_mapping(request("//127.0.0.1/data/restart", &b, WRONG)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains(r"\\127.0.0.1\data") && !format!("{e:?}").contains(WRONG), "{e:?}");
    assert!(std::fs::symlink_metadata(&b).is_err(), "the wrong password was linked to the mount");
    assert_eq!(mounts_of("//127.0.0.1/data"), mounted, "the mount was changed");
    c.new_smb_global_mapping(request("//127.0.0.1/data/restart", &b, PASSWORD)).await.unwrap();
    assert_eq!(std::fs::read(Path::new(&b).join("server.txt")).unwrap(), b"from the server");
    assert_eq!(mounts_of("//127.0.0.1/data"), mounted);
    s.stop().await;

    // Right first, then wrong.
    let s = scratch.server(false).await;
    let mut c = client(&s).await;
    c.new_smb_global_mapping(request("//127.0.0.1/data/restart", &c2, PASSWORD)).await.unwrap();
    let e = c.new_smb_global_mapping(request("//127.0.0.1/data/restart", &d, WRONG)).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(!format!("{e:?}").contains(WRONG), "{e:?}");
    assert!(std::fs::symlink_metadata(&d).is_err(), "the wrong password was linked to the mount");
    assert_eq!(mounts_of("//127.0.0.1/data"), mounted);
    // Every link still works through the one mount.
    for link in [&a, &b, &c2] {
        assert_eq!(std::fs::read(Path::new(link).join("server.txt")).unwrap(), b"from the server", "{link}");
    }

    for link in [&a, &b, &c2] {
        std::fs::remove_file(link).unwrap();
    }
    c.remove_smb_global_mapping(remove("//127.0.0.1/data")).await.unwrap();
    assert!(cifs_mounts().is_empty(), "{:?}", cifs_mounts());
    s.stop().await;
}
