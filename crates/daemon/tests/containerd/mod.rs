//! A containerd of the test's own (Debian's containerd with its CRI plugin, and runc), run as the
//! kubelet's runtime would be, but with its config, root, state and socket under a scratch
//! directory: no system containerd is used or touched. Pods are run through CRI as the kubelet
//! runs them (a sandbox in a kubepods cgroup named by the pod's UID, the cgroupfs driver), with
//! images built here (umoci) and imported with `ctr`, so no registry is needed.
//!
//! Every process, container, cgroup and directory made is removed on drop, also when a test fails.
#![allow(dead_code)] // each test uses part of it

pub mod cri;

use csi_proxy_stack_tests::Scratch;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The tools the harness runs, each Debian's: `containerd` (package containerd, with `ctr` and
/// containerd-shim-runc-v2), `runc`, `umoci`, `tar`, and a static busybox (busybox-static).
pub const TOOLS: &[&str] = &["containerd", "ctr", "containerd-shim-runc-v2", "runc", "umoci", "tar"];
pub const BUSYBOX: &str = "/bin/busybox";

/// What is missing on this machine for the harness, if anything.
pub fn missing() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (containerd and runc)".into());
    }
    let mut gone: Vec<&str> = TOOLS.iter().copied().filter(|t| which(t).is_none()).collect();
    if !is_static(Path::new(BUSYBOX)) {
        gone.push("a static /bin/busybox (busybox-static)");
    }
    (!gone.is_empty()).then(|| format!("missing {} (scripts/deps.sh test installs them)", gone.join(", ")))
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Whether `path` is an ELF executable without a program interpreter (PT_INTERP): one that runs
/// in an image with no libraries.
fn is_static(path: &Path) -> bool {
    let Ok(elf) = std::fs::read(path) else { return false };
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        elf.get(o..o + 4).is_some_and(|t| u32::from_le_bytes(t.try_into().unwrap()) != 3)
    })
}

/// A process killed (and reaped) on drop.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The image every pod's sandbox (pause) container runs.
pub const PAUSE_IMAGE: &str = "localhost/csi-proxy-test/pause:1";

/// A running containerd of the test's own; its CRI client.
pub struct Containerd {
    // Drop order: the runtime's process, then the directory.
    process: Option<Killed>,
    pub socket: PathBuf,
    pub cri: cri::Client,
    rt: tokio::runtime::Runtime,
    /// The kubepods cgroups that were not there before this test (removed on drop if empty).
    made_cgroups: Vec<PathBuf>,
    /// Of [`SHIM_DIRS`], those that were not there before (removed on drop if empty).
    made_dirs: Vec<PathBuf>,
    pub dir: Scratch,
}

impl Containerd {
    /// Starts containerd with its CRI plugin (sandbox image [`PAUSE_IMAGE`], built and imported
    /// here; the native snapshotter; no CNI: pods use the node's network) and waits until CRI
    /// answers.
    pub fn start(name: &str) -> Containerd {
        let dir = Scratch::new(name);
        let socket = dir.join("containerd.sock");
        for d in ["root", "state", "cni/bin", "cni/conf", "opt", "images", "logs"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let config = config_toml(&dir, &socket);
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("running containerd");
        let process = Some(Killed(child));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let made_cgroups = kubepods_cgroups().into_iter().filter(|p| !p.exists()).collect();
        let made_dirs = SHIM_DIRS.iter().map(PathBuf::from).filter(|p| !p.exists()).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "containerd made no socket: {}", read(&dir.join("containerd.log")));
            std::thread::sleep(Duration::from_millis(50));
        }
        let cri = rt.block_on(cri::Client::connect(socket.clone()));
        // The CRI plugin registers its service once it has loaded: Version answers then.
        loop {
            let version: Result<cri::Empty, _> = rt.block_on(cri.unary("Version", cri::Empty {}));
            match version {
                Ok(_) => break,
                Err(e) => {
                    assert!(Instant::now() < deadline, "CRI did not answer: {e}\n{}", read(&dir.join("containerd.log")))
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let c = Containerd { process, socket, rt, cri, made_cgroups, made_dirs, dir };
        let pause = Image::new("pause").file(Path::new(BUSYBOX), "bin/busybox").entrypoint(&[
            "/bin/busybox",
            "sleep",
            "2147483647",
        ]);
        c.import(&pause);
        c
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Builds `image` (an OCI layout made with umoci, in a tar) and imports it into the CRI
    /// plugin's namespace as `localhost/csi-proxy-test/<name>:1`.
    pub fn import(&self, image: &Image) -> String {
        let work = self.dir.join("images").join(&image.name);
        let tar = image.build(&work);
        let base = format!("localhost/csi-proxy-test/{}", image.name);
        run(Command::new("ctr")
            .arg("-a")
            .arg(&self.socket)
            .args(["-n", "k8s.io", "images", "import", "--snapshotter", "native", "--base-name", &base])
            .arg(&tar));
        format!("{base}:1")
    }

    /// Runs a pod sandbox as the kubelet would for pod `namespace/name`: the node's network,
    /// PID and IPC namespaces of its own, in the cgroup `/kubepods/besteffort/pod<uid>`.
    pub fn run_pod(&self, namespace: &str, name: &str) -> Pod<'_> {
        let uid = new_uid();
        let log_directory = self.dir.join("logs").join(name);
        std::fs::create_dir_all(&log_directory).unwrap();
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: uid.clone(),
                namespace: namespace.into(),
                attempt: 0,
            }),
            // The kubelet sets none for a pod on the node's network (runc refuses to set one
            // without a UTS namespace of the pod's own).
            hostname: String::new(),
            log_directory: log_directory.to_str().unwrap().into(),
            labels: [
                ("io.kubernetes.pod.name".to_string(), name.to_string()),
                ("io.kubernetes.pod.namespace".to_string(), namespace.to_string()),
                ("io.kubernetes.pod.uid".to_string(), uid.clone()),
            ]
            .into(),
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: format!("/kubepods/besteffort/pod{uid}"),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption { network: cri::NODE, pid: 0, ipc: 0 }),
                }),
            }),
        };
        let id = self
            .block_on(self.cri.run_pod_sandbox(config.clone()))
            .unwrap_or_else(|e| panic!("RunPodSandbox {namespace}/{name}: {e}\n{}", self.log()));
        Pod { containerd: self, id, uid, config, log_directory, runs: Default::default() }
    }

    /// containerd's own log, for a failure's message.
    pub fn log(&self) -> String {
        read(&self.dir.join("containerd.log"))
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // containerd leaves its shims running by design: those of this containerd (started with
        // its socket as -address) go too, found by their command line.
        if let Some(mut p) = self.process.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(p.0.id() as i32).unwrap(),
                rustix::process::Signal::TERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while p.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for pid in processes_with_arg(self.socket.to_str().unwrap()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        // Children first.
        for cg in self.made_cgroups.iter().rev() {
            let _ = std::fs::remove_dir(cg);
        }
        // The shims' sockets go with the shims; their directory, if this test made it.
        for d in self.made_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Where containerd 1.6's shims make their sockets whatever its state directory (its built-in
/// default state directory's `s/`), parents first.
const SHIM_DIRS: &[&str] = &["/run/containerd", "/run/containerd/s"];

/// `/kubepods` and `/kubepods/besteffort` in every cgroup hierarchy (cgroup v2's one, or each v1
/// controller's), children after parents.
fn kubepods_cgroups() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in hierarchies() {
        out.push(h.join("kubepods"));
        out.push(h.join("kubepods/besteffort"));
    }
    out
}

/// `/sys/fs/cgroup` (cgroup v2) or each hierarchy mounted below it (v1 and hybrid).
fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    let Ok(dirs) = std::fs::read_dir(root) else { return Vec::new() };
    dirs.flatten().map(|e| e.path()).filter(|p| p.join("cgroup.procs").exists() && !p.is_symlink()).collect()
}

/// The pids of processes one of whose arguments is `arg`.
fn processes_with_arg(arg: &str) -> Vec<i32> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == arg.as_bytes()))
        })
        .collect()
}

fn config_toml(dir: &Path, socket: &Path) -> String {
    let p = |rel: &str| toml_string(dir.join(rel).to_str().unwrap());
    let sock = toml_string(socket.to_str().unwrap());
    let ttrpc = toml_string(&format!("{}.ttrpc", socket.display()));
    format!(
        r#"version = 2
root = {root}
state = {state}
# Snapshotters this machine may lack, and tracing: not loaded, so the log holds what matters.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = {sock}
[ttrpc]
  address = {ttrpc}
[plugins."io.containerd.internal.v1.opt"]
  path = {opt}
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # No process's oom_score_adj below containerd's own: the kubelet's -998 for a sandbox needs
  # CAP_SYS_RESOURCE, which a test machine (a container, a VM's sandbox) may not give.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state too under the scratch directory, not a system containerd's.
        Root = {runc}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {cni_bin}
    conf_dir = {cni_conf}
"#,
        root = p("root"),
        state = p("state"),
        opt = p("opt"),
        runc = p("runc"),
        cni_bin = p("cni/bin"),
        cni_conf = p("cni/conf"),
    )
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A pod UID as Kubernetes makes them (8-4-4-4-12 hex digits), new for each pod.
fn new_uid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    let n = N.fetch_add(1, Ordering::Relaxed);
    let hex = format!("{:08x}{:016x}{:08x}", std::process::id(), nanos, n as u32);
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// A pod sandbox, stopped and removed (with its containers and its pod cgroup) on drop.
pub struct Pod<'a> {
    containerd: &'a Containerd,
    pub id: String,
    pub uid: String,
    pub config: cri::PodSandboxConfig,
    log_directory: PathBuf,
    /// Containers run so far: the next one's attempt number (as the kubelet counts restarts),
    /// so that one name may be run again.
    runs: std::cell::Cell<u32>,
}

/// How the last line a container writes begins (see [`Pod::run`]).
pub const LAST_LINE: &str = "exit status ";

/// A container that ran to its end.
#[derive(Debug)]
pub struct Exited {
    pub id: String,
    pub exit_code: i32,
    /// What it wrote (stdout and stderr), from its CRI log.
    pub output: String,
}

impl Pod<'_> {
    pub fn name(&self) -> &str {
        &self.config.metadata.as_ref().unwrap().name
    }

    /// Creates and starts container `name` of `image` running `command` with `mounts`, and waits
    /// (60 s at most) until it has exited and its output (one stream, stdout: the command's last
    /// line there begins with [`LAST_LINE`]) is in its log.
    pub fn run(&self, name: &str, image: &str, command: &[&str], mounts: Vec<cri::Mount>) -> Exited {
        let c = self.containerd;
        let attempt = self.runs.get();
        self.runs.set(attempt + 1);
        let log_path = format!("{name}-{attempt}.log");
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt }),
            image: Some(cri::ImageSpec { image: image.into() }),
            command: command.iter().map(|s| s.to_string()).collect(),
            args: Vec::new(),
            mounts,
            log_path: log_path.clone(),
        };
        let id = c
            .block_on(c.cri.create_container(&self.id, config, self.config.clone()))
            .unwrap_or_else(|e| panic!("CreateContainer {name} in {}: {e}\n{}", self.name(), c.log()));
        c.block_on(c.cri.start_container(&id))
            .unwrap_or_else(|e| panic!("StartContainer {name} in {}: {e}\n{}", self.name(), c.log()));
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            let s = c.block_on(c.cri.container_status(&id)).unwrap();
            if s.state == cri::CONTAINER_EXITED {
                break s;
            }
            assert!(Instant::now() < deadline, "container {name} still running after 60 s: {s:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        // containerd writes the log from its own copy of the container's output, which may end
        // a moment after the container: the command's last line says it is all there.
        let log = self.log_directory.join(&log_path);
        let deadline = Instant::now() + Duration::from_secs(10);
        let output = loop {
            let output = cri_log_text(&read(&log));
            if output.lines().any(|l| l.starts_with(LAST_LINE)) || Instant::now() > deadline {
                break output;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Exited { id, exit_code: status.exit_code, output }
    }

    /// The cgroup path the kubelet gives this pod (`cgroup_parent`).
    pub fn cgroup_parent(&self) -> &str {
        &self.config.linux.as_ref().unwrap().cgroup_parent
    }
}

impl Drop for Pod<'_> {
    fn drop(&mut self) {
        let c = self.containerd;
        if let Err(e) = c.block_on(c.cri.stop_pod_sandbox(&self.id)) {
            eprintln!("StopPodSandbox {}: {e}", self.id);
        }
        if let Err(e) = c.block_on(c.cri.remove_pod_sandbox(&self.id)) {
            eprintln!("RemovePodSandbox {}: {e}", self.id);
        }
        // runc removes each container's cgroup, the kubelet its pod's.
        for h in hierarchies() {
            let _ = std::fs::remove_dir(h.join(self.cgroup_parent().trim_start_matches('/')));
        }
    }
}

/// The lines of a CRI log (`<time> <stream> <F|P> <text>` each), joined as written.
fn cri_log_text(log: &str) -> String {
    let mut out = String::new();
    for line in log.lines() {
        let mut parts = line.splitn(4, ' ');
        let (_time, _stream, tag, text) = (parts.next(), parts.next(), parts.next(), parts.next().unwrap_or(""));
        out.push_str(text);
        if tag != Some("P") {
            out.push('\n');
        }
    }
    out
}

/// An image to build: files copied from the host, symbolic links, an entrypoint.
pub struct Image {
    name: String,
    files: Vec<(PathBuf, String)>,
    links: Vec<(String, String)>,
    dirs: Vec<String>,
    entrypoint: Vec<String>,
}

impl Image {
    pub fn new(name: &str) -> Image {
        Image { name: name.into(), files: Vec::new(), links: Vec::new(), dirs: Vec::new(), entrypoint: Vec::new() }
    }

    /// Host file `from` at `to` (relative to the image's root).
    pub fn file(mut self, from: &Path, to: &str) -> Image {
        self.files.push((from.to_path_buf(), to.into()));
        self
    }

    /// A symbolic link `at` → `target`.
    pub fn link(mut self, at: &str, target: &str) -> Image {
        self.links.push((at.into(), target.into()));
        self
    }

    /// An empty directory (a mount point).
    pub fn dir(mut self, at: &str) -> Image {
        self.dirs.push(at.into());
        self
    }

    pub fn entrypoint(mut self, argv: &[&str]) -> Image {
        self.entrypoint = argv.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The image as an OCI layout (umoci: one layer of the root filesystem, the entrypoint in
    /// its config, tagged `1`) in a tar, made in `work`.
    fn build(&self, work: &Path) -> PathBuf {
        let rootfs = work.join("rootfs");
        std::fs::create_dir_all(&rootfs).unwrap();
        for (from, to) in &self.files {
            let to = rootfs.join(to);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(from, &to).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
        }
        for (at, target) in &self.links {
            std::os::unix::fs::symlink(target, rootfs.join(at)).unwrap();
        }
        for d in &self.dirs {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        let layer = work.join("layer.tar");
        run(Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-cf"])
            .arg(&layer)
            .arg("."));
        let layout = work.join("layout");
        let image = format!("{}:1", layout.display());
        run(Command::new("umoci").args(["init", "--layout"]).arg(&layout));
        run(Command::new("umoci").args(["new", "--image", &image]));
        run(Command::new("umoci").args(["raw", "add-layer", "--image", &image]).arg(&layer));
        let mut config = Command::new("umoci");
        config.args(["config", "--image", &image]);
        if let Some((first, rest)) = self.entrypoint.split_first() {
            config.args(["--config.entrypoint", first]);
            for a in rest {
                config.args(["--config.cmd", a]);
            }
        }
        run(&mut config);
        let tar = work.join("image.tar");
        run(Command::new("tar").arg("-C").arg(&layout).arg("-cf").arg(&tar).arg("."));
        tar
    }
}

/// Runs `cmd`, which must succeed.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()))
}

/// The image of the caller containers: nothing but mount points and the host's top-level links
/// (`/bin` → `usr/bin` on a merged-/usr host). [`host_mounts`] brings the host's libraries and
/// the programs in, read-only, so no C library needs to be in the image.
pub fn caller_image(name: &str) -> Image {
    let mut image = Image::new(name).dir("usr").dir("csi");
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        if let Ok(target) = std::fs::read_link(&host) {
            image = image.link(top, target.to_str().unwrap());
        } else if host.is_dir() {
            image = image.dir(top);
        }
    }
    image
}

/// Read-only mounts of the host's `/usr` and every top-level library or program directory that is
/// not a link into it.
pub fn host_mounts() -> Vec<cri::Mount> {
    let mut mounts = vec![ro("/usr", "/usr")];
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        if !host.is_symlink() && host.is_dir() {
            let p = host.to_str().unwrap();
            mounts.push(ro(p, p));
        }
    }
    mounts
}

/// A read-only mount of host path `host` at `container`.
pub fn ro(host: &str, container: &str) -> cri::Mount {
    cri::Mount { container_path: container.into(), host_path: host.into(), readonly: true }
}

/// A read-write mount of host path `host` at `container`.
pub fn rw(host: &str, container: &str) -> cri::Mount {
    cri::Mount { container_path: container.into(), host_path: host.into(), readonly: false }
}
