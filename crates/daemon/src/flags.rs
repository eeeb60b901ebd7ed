//! Command line of the daemon, parsed the way Go's `flag` package parses upstream's
//! (docs/upstream.md#flags), so existing service install lines keep working unchanged:
//!
//! * a flag is `-name` or `--name`;
//! * a value is given as `-name=value` or `-name value` (the next argument is taken as the value
//!   even if it starts with `-`);
//! * a boolean flag is `-b` (true) or `-b=<bool>`; it never takes the next argument as its value;
//! * `--` ends the flags; the first argument that is not a flag ends them too — upstream takes no
//!   positional arguments, so any is an error here rather than being silently ignored;
//! * `-h`, `-help`, `--help` ask for the usage text;
//! * a flag given twice keeps its last value, except `-working-dir`, `-allowed-service` and
//!   `-protected-disk`, which collect all.
//!
//! Besides upstream's own flags, every flag klog registers is accepted; `-log_file_max_size`
//! rotates the log file, the others that only tune klog's headers, thresholds or per-module
//! levels are checked for a well-formed value and then ignored. `-logging-format` (`text` or
//! `json`) is Kubernetes components' flag of that name.

use std::path::PathBuf;
use std::time::Duration;

use csi_proxy_host::types::FsType;

use crate::logging::LogOptions;

/// Default of `-kubelet-path`.
#[cfg(windows)]
pub const DEFAULT_KUBELET_PATH: &str = r"C:\var\lib\kubelet";
/// Default of `-kubelet-path`.
#[cfg(not(windows))]
pub const DEFAULT_KUBELET_PATH: &str = "/var/lib/kubelet";

/// Default of `-socket-dir`.
pub const DEFAULT_SOCKET_DIR: &str = "/run/csi-proxy";
/// Default of `-linux-smb-dir`.
pub const DEFAULT_LINUX_SMB_DIR: &str = "/var/lib/csi-proxy/smb";
/// Default of `-cri-endpoint`: containerd's CRI socket or pipe, where the node's runtime is.
#[cfg(not(windows))]
pub const DEFAULT_CRI_ENDPOINT: &str = "/run/containerd/containerd.sock";
#[cfg(windows)]
pub const DEFAULT_CRI_ENDPOINT: &str = r"\\.\pipe\containerd-containerd";
/// Default of `-connection-idle-timeout`.
pub const DEFAULT_CONNECTION_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Most `-preshutdown-wait` may be.
const MAX_PRESHUTDOWN_WAIT: Duration = Duration::from_secs(3600);

/// Default of `-preshutdown-wait`.
pub const DEFAULT_PRESHUTDOWN_WAIT: Duration = Duration::from_secs(120);
/// Default of `-handshake-timeout`.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of `-progress-timeout`.
pub const DEFAULT_PROGRESS_TIMEOUT: Duration = csi_proxy_transport::ServeOptions::DEFAULT_PROGRESS_TIMEOUT;
/// Default of `-max-connections-per-endpoint`.
pub const DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT: usize =
    csi_proxy_transport::ServeOptions::DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT;
/// Default of `-max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = csi_proxy_transport::ServeOptions::DEFAULT_MAX_CONNECTIONS;

/// Everything the command line configures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `-kubelet-path`: prefix that paths handed to filesystem and SMB calls may start with.
    pub kubelet_path: String,
    /// `-working-dir` (repeatable): further allowed path prefixes, in command-line order.
    pub working_dirs: Vec<String>,
    /// `-windows-service`: run under the Windows service control manager.
    pub windows_service: bool,
    /// `-preshutdown-wait`: at a node's shutdown, how long the service keeps serving while the
    /// kubelet service has not stopped.
    pub preshutdown_wait: Duration,
    /// `-require-privacy`: ask for SMB encryption on global mappings.
    pub require_privacy: bool,
    /// `-metrics-bind-address`: `host:port` of the Prometheus endpoint; `None` when empty.
    pub metrics_bind_address: Option<String>,
    /// klog's `-v`, `-log_file`, `-log_dir`, `-logtostderr`, `-alsologtostderr`.
    pub log: LogOptions,
    /// `-socket-dir`: directory of the Unix sockets (used where there are no named pipes).
    pub socket_dir: PathBuf,
    /// `-pipe-sddl`: security descriptor for the named pipes instead of the built-in one.
    pub pipe_sddl: Option<String>,
    /// `-connection-idle-timeout`: close client connections idle this long (zero: never).
    pub connection_idle_timeout: Duration,
    /// `-handshake-timeout`: limit on a new connection's HTTP/2 handshake (zero: none).
    pub handshake_timeout: Duration,
    /// `-progress-timeout`: limit on a started frame arriving and on a write the client does
    /// not take (zero: none).
    pub progress_timeout: Duration,
    /// `-max-connections-per-endpoint`: open connections allowed on one pipe or socket.
    pub max_connections_per_endpoint: usize,
    /// `-max-connections`: open connections allowed over all endpoints.
    pub max_connections: usize,
    /// `-allowed-service` (repeatable): the only services StartService/StopService may act on.
    /// `None` when the flag is absent (any service, as upstream); an empty value adds no name, so
    /// `-allowed-service=` alone allows none.
    pub allowed_services: Option<Vec<String>>,
    /// `-protected-disk` (repeatable): disks no call may partition, format, resize or take
    /// offline.
    pub protected_disks: Vec<csi_proxy_host::interlock::ProtectedDisk>,
    /// `-linux-fs-type`: the filesystem FormatVolume creates on Linux.
    pub linux_fs_type: FsType,
    /// `-linux-smb-dir`: where the Linux backend mounts SMB shares (one folder per share).
    pub linux_smb_dir: PathBuf,
    /// `-audit-log`: file that gets a JSON record of every privileged call; `None`: no audit.
    pub audit_log: Option<PathBuf>,
    /// `-audit-log-maxsize`: megabytes the audit file may reach before it is rotated (0: never).
    pub audit_log_max_size_mb: u64,
    /// `-audit-log-maxbackup`: rotated audit files kept at most (0: any number).
    pub audit_log_max_backup: u64,
    /// `-audit-log-maxage`: days a rotated audit file is kept (0: no limit by age).
    pub audit_log_max_age_days: u64,
    /// `-cri-endpoint`: the container runtime's CRI socket (Linux) or pipe (Windows), asked which
    /// pod a caller is; empty: callers are not named beyond their process.
    pub cri_endpoint: Option<PathBuf>,
    /// `-authorization-policy`: the YAML file saying what each caller may call; `None`: any
    /// caller may call anything (upstream's behaviour).
    pub authorization_policy: Option<PathBuf>,
    /// `-authorization-mode`: `enforce` refuses what the policy does not grant, `warn` logs and
    /// audits it and lets it run.
    pub authorization_warn_only: bool,
}

/// Default of `-audit-log-maxsize`, megabytes: what kube-apiserver's audit file gets when its flag
/// is left at 0 (the rotation library's own default).
pub const DEFAULT_AUDIT_LOG_MAX_SIZE_MB: u64 = 100;
/// Default of `-audit-log-maxbackup`: as many as the log file keeps.
pub const DEFAULT_AUDIT_LOG_MAX_BACKUP: u64 = 5;

impl Default for Options {
    fn default() -> Self {
        Options {
            kubelet_path: DEFAULT_KUBELET_PATH.to_string(),
            working_dirs: Vec::new(),
            windows_service: false,
            preshutdown_wait: DEFAULT_PRESHUTDOWN_WAIT,
            require_privacy: true,
            metrics_bind_address: None,
            log: LogOptions::default(),
            socket_dir: PathBuf::from(DEFAULT_SOCKET_DIR),
            pipe_sddl: None,
            connection_idle_timeout: DEFAULT_CONNECTION_IDLE_TIMEOUT,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            progress_timeout: DEFAULT_PROGRESS_TIMEOUT,
            max_connections_per_endpoint: DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            allowed_services: None,
            protected_disks: Vec::new(),
            linux_fs_type: FsType::default(),
            linux_smb_dir: PathBuf::from(DEFAULT_LINUX_SMB_DIR),
            audit_log: None,
            audit_log_max_size_mb: DEFAULT_AUDIT_LOG_MAX_SIZE_MB,
            audit_log_max_backup: DEFAULT_AUDIT_LOG_MAX_BACKUP,
            audit_log_max_age_days: 0,
            cri_endpoint: Some(PathBuf::from(DEFAULT_CRI_ENDPOINT)),
            authorization_policy: None,
            authorization_warn_only: false,
        }
    }
}

impl Options {
    /// The allowed path prefixes as upstream builds them: the `-working-dir` values in order,
    /// then `-kubelet-path`.
    pub fn allowed_prefixes(&self) -> Vec<String> {
        let mut all = self.working_dirs.clone();
        all.push(self.kubelet_path.clone());
        all
    }
}

/// What the command line asks for.
// Built once at startup, so the size difference between the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseOutcome {
    /// Run the daemon with these options.
    Run(Options),
    /// Print [`usage`] and exit successfully.
    Help,
    /// Print the version line and exit successfully.
    Version,
}

/// A command line that cannot be used. The caller prints it with [`usage`] and exits with 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("flag provided but not defined: -{flag}")]
    Unknown { flag: String },
    #[error("flag needs an argument: -{flag} (use -{flag}=<{hint}> or -{flag} <{hint}>)")]
    MissingValue { flag: String, hint: &'static str },
    #[error("invalid value {value:?} for flag -{flag}: expected {expected}")]
    InvalidValue { flag: String, value: String, expected: &'static str },
    #[error("bad flag syntax: {arg}")]
    BadSyntax { arg: String },
    #[error("unexpected argument {arg:?}: csi-proxy takes no positional arguments")]
    Positional { arg: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    String,
    /// A string that may be given several times.
    StringList,
    /// Non-negative integer.
    Uint,
    Duration,
    /// klog severity: a name (INFO, WARNING, ERROR, FATAL, any case) or an integer.
    Severity,
}

impl Kind {
    /// Word shown after the flag name in usage and error messages.
    fn hint(self) -> &'static str {
        match self {
            Kind::Bool => "bool",
            Kind::String | Kind::StringList => "string",
            Kind::Uint => "uint",
            Kind::Duration => "duration",
            Kind::Severity => "severity",
        }
    }
}

/// What a flag does with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    KubeletPath,
    WorkingDir,
    WindowsService,
    RequirePrivacy,
    MetricsBindAddress,
    V,
    LogFile,
    LogDir,
    LogToStderr,
    AlsoLogToStderr,
    SocketDir,
    PipeSddl,
    ConnectionIdleTimeout,
    HandshakeTimeout,
    PreshutdownWait,
    ProgressTimeout,
    MaxConnectionsPerEndpoint,
    MaxConnections,
    AllowedService,
    ProtectedDisk,
    LinuxFsType,
    LinuxSmbDir,
    AuditLog,
    AuditLogMaxSize,
    AuditLogMaxBackup,
    AuditLogMaxAge,
    LogFileMaxSize,
    LoggingFormat,
    CriEndpoint,
    AuthorizationPolicy,
    AuthorizationMode,
    /// `-version`: [`parse`] answers [`ParseOutcome::Version`].
    Version,
    /// A klog flag accepted for compatibility only.
    Ignored,
}

struct Spec {
    name: &'static str,
    kind: Kind,
    target: Target,
    /// Default as shown in the usage text (for ignored klog flags: klog's default).
    default: &'static str,
    help: &'static str,
}

const FLAGS: &[Spec] = &[
    // Upstream's own flags.
    Spec {
        name: "kubelet-path",
        kind: Kind::String,
        target: Target::KubeletPath,
        default: DEFAULT_KUBELET_PATH,
        help: "The kubelet's directory on the host, an allowed root: every path a request carries must resolve, \
               links followed, to inside a root (compared by whole path components); must be absolute",
    },
    Spec {
        name: "working-dir",
        kind: Kind::StringList,
        target: Target::WorkingDir,
        default: "",
        help: "A further allowed root on the host, as -kubelet-path; must be absolute; repeat the flag for several",
    },
    Spec {
        name: "windows-service",
        kind: Kind::Bool,
        target: Target::WindowsService,
        default: "false",
        help: "Run as the Windows service \"csiproxy\" under the service control manager",
    },
    Spec {
        name: "preshutdown-wait",
        kind: Kind::Duration,
        target: Target::PreshutdownWait,
        default: "2m0s",
        help: "With -windows-service, at a node's shutdown: keep serving until the kubelet service has stopped, \
               for at most this long (at most 1h), then stop (0: stop at once; no wait for a kubelet that takes no \
               preshutdown); the service's preshutdown timeout is set to this plus the drain's 20 s",
    },
    Spec {
        name: "require-privacy",
        kind: Kind::Bool,
        target: Target::RequirePrivacy,
        default: "true",
        help: "Require SMB encryption (RequirePrivacy) on new SMB global mappings",
    },
    Spec {
        name: "metrics-bind-address",
        kind: Kind::String,
        target: Target::MetricsBindAddress,
        default: "",
        help: "host:port to serve Prometheus metrics on at /metrics; empty disables metrics",
    },
    // klog's flags that we honour.
    Spec {
        name: "v",
        kind: Kind::Uint,
        target: Target::V,
        default: "0",
        help:
            "Log verbosity: 0-1 info, 2-4 debug, 5 and up trace (10 and up also traces libraries); RUST_LOG overrides",
    },
    Spec {
        name: "log_file",
        kind: Kind::String,
        target: Target::LogFile,
        default: "",
        help: "Append logs to this file (only with -logtostderr=false)",
    },
    Spec {
        name: "log_dir",
        kind: Kind::String,
        target: Target::LogDir,
        default: "",
        help: "Append logs to csi-proxy.log in this directory when -log_file is not set (only with -logtostderr=false)",
    },
    Spec {
        name: "logtostderr",
        kind: Kind::Bool,
        target: Target::LogToStderr,
        default: "true",
        help: "Log to standard error only, ignoring -log_file and -log_dir",
    },
    Spec {
        name: "alsologtostderr",
        kind: Kind::Bool,
        target: Target::AlsoLogToStderr,
        default: "false",
        help: "Log to standard error as well as to the log file (only with -logtostderr=false)",
    },
    // klog's flags that are accepted and ignored.
    Spec {
        name: "vmodule",
        kind: Kind::String,
        target: Target::Ignored,
        default: "",
        help: "Ignored (klog compatibility); use RUST_LOG for per-module levels",
    },
    Spec {
        name: "log_file_max_size",
        kind: Kind::Uint,
        target: Target::LogFileMaxSize,
        default: "1800",
        help: "Megabytes the log file may grow to before it is renamed <file>.1 (older ones shift up to <file>.5, \
               the oldest is removed) and a new one started; 0: unlimited",
    },
    Spec {
        name: "stderrthreshold",
        kind: Kind::Severity,
        target: Target::Ignored,
        default: "ERROR",
        help: "Ignored (klog compatibility)",
    },
    Spec {
        name: "alsologtostderrthreshold",
        kind: Kind::Severity,
        target: Target::Ignored,
        default: "INFO",
        help: "Ignored (klog compatibility)",
    },
    Spec {
        name: "legacy_stderr_threshold_behavior",
        kind: Kind::Bool,
        target: Target::Ignored,
        default: "true",
        help: "Ignored (klog compatibility)",
    },
    Spec {
        name: "add_dir_header",
        kind: Kind::Bool,
        target: Target::Ignored,
        default: "false",
        help: "Ignored (klog compatibility)",
    },
    Spec {
        name: "skip_headers",
        kind: Kind::Bool,
        target: Target::Ignored,
        default: "false",
        help: "Ignored (klog compatibility)",
    },
    Spec {
        name: "skip_log_headers",
        kind: Kind::Bool,
        target: Target::Ignored,
        default: "false",
        help: "Ignored (klog compatibility)",
    },
    Spec {
        name: "one_output",
        kind: Kind::Bool,
        target: Target::Ignored,
        default: "false",
        help: "Ignored (klog compatibility)",
    },
    Spec {
        name: "log_backtrace_at",
        kind: Kind::String,
        target: Target::Ignored,
        default: "",
        help: "Ignored (klog compatibility)",
    },
    // Our own additions.
    Spec {
        name: "version",
        kind: Kind::Bool,
        target: Target::Version,
        default: "false",
        help: "Print the version and the git commit csi-proxy was built from, and exit",
    },
    Spec {
        name: "socket-dir",
        kind: Kind::String,
        target: Target::SocketDir,
        default: DEFAULT_SOCKET_DIR,
        help: "Directory for the Unix sockets csi-proxy-<group>-<version>.sock (platforms without named pipes)",
    },
    Spec {
        name: "pipe-sddl",
        kind: Kind::String,
        target: Target::PipeSddl,
        default: "",
        help: "SDDL security descriptor for the named pipes; empty uses the built-in one",
    },
    Spec {
        name: "connection-idle-timeout",
        kind: Kind::Duration,
        target: Target::ConnectionIdleTimeout,
        default: "5m0s",
        help: "Close a client connection after this long without requests (0 keeps idle connections open)",
    },
    Spec {
        name: "handshake-timeout",
        kind: Kind::Duration,
        target: Target::HandshakeTimeout,
        default: "10s",
        help:
            "Drop a new connection whose HTTP/2 preface and first frame have not arrived within this time (0: no limit)",
    },
    Spec {
        name: "progress-timeout",
        kind: Kind::Duration,
        target: Target::ProgressTimeout,
        default: "10s",
        help: "Drop a connection whose client leaves a started frame unfinished, or takes none of the server's data, \
               for this long; also how long an idle connection told to go away may linger (0: no limit)",
    },
    Spec {
        name: "max-connections-per-endpoint",
        kind: Kind::Uint,
        target: Target::MaxConnectionsPerEndpoint,
        default: "256",
        help: "Open client connections allowed on one pipe or socket; when full, a new one takes the place of an idle \
               one (shared fairly among callers) or is closed, and logged",
    },
    Spec {
        name: "max-connections",
        kind: Kind::Uint,
        target: Target::MaxConnections,
        default: "2048",
        help: "Open client connections allowed over all pipes or sockets; when full, a new one takes the place of an \
               idle one (shared fairly among callers) or is closed, and logged",
    },
    Spec {
        name: "allowed-service",
        kind: Kind::StringList,
        target: Target::AllowedService,
        default: "",
        help: "Service that StartService and StopService may act on; without the flag any host service can be \
               started or stopped; an empty value allows none (GetService is never restricted)",
    },
    Spec {
        name: "protected-disk",
        kind: Kind::StringList,
        target: Target::ProtectedDisk,
        default: "",
        help: "Disk that PartitionDisk, FormatVolume, ResizeVolume and SetDiskState(offline) must never change, \
               besides the disks found holding the running system: a disk number, serial=PATTERN or \
               location=PATTERN (adapter:bus:target:lun; PATTERN a glob with * ? [...]); repeatable",
    },
    Spec {
        name: "linux-fs-type",
        kind: Kind::String,
        target: Target::LinuxFsType,
        default: "ext4",
        help: "Filesystem FormatVolume creates on Linux: ext4, xfs, btrfs or ntfs (ntfs needs ntfs-3g's mkntfs); \
               ignored on Windows, which formats NTFS",
    },
    Spec {
        name: "linux-smb-dir",
        kind: Kind::String,
        target: Target::LinuxSmbDir,
        default: DEFAULT_LINUX_SMB_DIR,
        help: "Folder under which the Linux backend mounts SMB shares, one folder per share (created 0700 when \
               missing; an existing one must be the daemon user's and writable by nobody else); ignored on Windows",
    },
    Spec {
        name: "audit-log",
        kind: Kind::String,
        target: Target::AuditLog,
        default: "",
        help: "Append a JSON record to this file when each privileged call starts and ends, with the \
               caller's identity; a call whose record cannot be written fails (empty: no audit)",
    },
    Spec {
        name: "cri-endpoint",
        kind: Kind::String,
        target: Target::CriEndpoint,
        default: DEFAULT_CRI_ENDPOINT,
        help: "The container runtime's CRI socket (Linux) or named pipe (Windows), asked read-only which pod and \
               container a caller is, for the audit trail and -authorization-policy (empty: callers are named by \
               process only)",
    },
    Spec {
        name: "authorization-policy",
        kind: Kind::String,
        target: Target::AuthorizationPolicy,
        default: "",
        help: "YAML file of rules saying which callers (pods by namespace, name, container and image; host \
               processes by executable and user) may call which methods on which paths, disks, shares and \
               services; checked at start, reloaded when it changes (empty: any caller may call anything)",
    },
    Spec {
        name: "authorization-mode",
        kind: Kind::String,
        target: Target::AuthorizationMode,
        default: "enforce",
        help: "enforce: a call -authorization-policy does not grant is refused (PermissionDenied); warn: it is \
               logged and audited as one that would be refused, and runs",
    },
    // kube-apiserver's names and meanings for its audit file's rotation.
    Spec {
        name: "audit-log-maxsize",
        kind: Kind::Uint,
        target: Target::AuditLogMaxSize,
        default: "100",
        help: "The maximum size in megabytes of the audit file before it gets rotated (0: never rotated)",
    },
    Spec {
        name: "audit-log-maxbackup",
        kind: Kind::Uint,
        target: Target::AuditLogMaxBackup,
        default: "5",
        help: "The maximum number of rotated audit files to retain (0: no limit on their number)",
    },
    Spec {
        name: "audit-log-maxage",
        kind: Kind::Uint,
        target: Target::AuditLogMaxAge,
        default: "0",
        help: "The maximum number of days to retain rotated audit files, by when they were last written (0: no \
               limit by age)",
    },
    Spec {
        name: "logging-format",
        kind: Kind::String,
        target: Target::LoggingFormat,
        default: "text",
        help: "Log line format: text (klog's lines), or json (one object per line with ts, caller, msg, v and the \
               event's fields, as Kubernetes components write them, plus level and logger)",
    },
];

fn lookup(name: &str) -> Option<&'static Spec> {
    FLAGS.iter().find(|s| s.name == name)
}

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<ParseOutcome, FlagError> {
    let mut opts = Options::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            // Flags end here; anything after would be positional.
            if let Some(rest) = args.next() {
                return Err(FlagError::Positional { arg: rest });
            }
            break;
        }
        let body = match arg.strip_prefix('-') {
            Some(b) if !b.is_empty() => b.strip_prefix('-').unwrap_or(b),
            _ => return Err(FlagError::Positional { arg }),
        };
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(FlagError::BadSyntax { arg });
        }
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        if name == "h" || name == "help" {
            return Ok(ParseOutcome::Help);
        }
        let Some(spec) = lookup(name) else {
            return Err(FlagError::Unknown { flag: name.to_string() });
        };
        let value = match (spec.kind, inline) {
            (_, Some(v)) => v.to_string(),
            (Kind::Bool, None) => "true".to_string(),
            (kind, None) => {
                args.next().ok_or_else(|| FlagError::MissingValue { flag: name.to_string(), hint: kind.hint() })?
            }
        };
        if spec.target == Target::Version && parse_bool(&value) == Some(true) {
            return Ok(ParseOutcome::Version);
        }
        apply(&mut opts, spec, value)?;
    }
    Ok(ParseOutcome::Run(opts))
}

fn apply(opts: &mut Options, spec: &Spec, value: String) -> Result<(), FlagError> {
    let invalid = |expected: &'static str| FlagError::InvalidValue {
        flag: spec.name.to_string(),
        value: value.clone(),
        expected,
    };
    // The connection limits: 0 would refuse every client.
    let positive = |n: u64| usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| invalid("a positive integer"));
    // Check the value's form first, whatever the flag is for.
    let mut flag_bool = false;
    let mut uint = 0u64;
    let mut duration = Duration::ZERO;
    match spec.kind {
        Kind::Bool => {
            flag_bool = parse_bool(&value)
                .ok_or_else(|| invalid("a boolean (true, false, 1, 0, t, f, TRUE, FALSE, True, False)"))?;
        }
        Kind::Uint => {
            uint = parse_uint(&value).ok_or_else(|| invalid("a non-negative integer"))?;
        }
        Kind::Duration => {
            duration = csi_proxy_client::go_duration::parse(&value)
                .map_err(|_| invalid("a duration such as 250ms, 30s, 5m, 1h or 1m30s (units ns, us, ms, s, m, h)"))?;
        }
        Kind::Severity => {
            if !is_severity(&value) {
                return Err(invalid("INFO, WARNING, ERROR, FATAL or an integer"));
            }
        }
        Kind::String | Kind::StringList => {}
    }
    let non_empty = |v: String| if v.is_empty() { None } else { Some(v) };
    match spec.target {
        Target::KubeletPath => opts.kubelet_path = value,
        Target::WorkingDir => opts.working_dirs.push(value),
        Target::WindowsService => opts.windows_service = flag_bool,
        Target::RequirePrivacy => opts.require_privacy = flag_bool,
        Target::MetricsBindAddress => opts.metrics_bind_address = non_empty(value),
        Target::V => {
            opts.log.v = u32::try_from(uint).map_err(|_| invalid("a non-negative integer"))?;
        }
        Target::LogFile => opts.log.log_file = non_empty(value).map(PathBuf::from),
        Target::LogDir => opts.log.log_dir = non_empty(value).map(PathBuf::from),
        Target::LogToStderr => opts.log.logtostderr = flag_bool,
        Target::AlsoLogToStderr => opts.log.alsologtostderr = flag_bool,
        Target::SocketDir => opts.socket_dir = PathBuf::from(value),
        Target::PipeSddl => opts.pipe_sddl = non_empty(value),
        Target::ConnectionIdleTimeout => opts.connection_idle_timeout = duration,
        Target::HandshakeTimeout => opts.handshake_timeout = duration,
        Target::PreshutdownWait => {
            // A node's shutdown waits this long at most: a typo must not hold it for days.
            if duration > MAX_PRESHUTDOWN_WAIT {
                return Err(invalid("a duration of at most 1h"));
            }
            opts.preshutdown_wait = duration
        }
        Target::ProgressTimeout => opts.progress_timeout = duration,
        Target::MaxConnectionsPerEndpoint => opts.max_connections_per_endpoint = positive(uint)?,
        Target::MaxConnections => opts.max_connections = positive(uint)?,
        Target::AllowedService => {
            let list = opts.allowed_services.get_or_insert_with(Vec::new);
            if !value.is_empty() {
                list.push(value);
            }
        }
        Target::ProtectedDisk => opts.protected_disks.push(value.parse().map_err(|_| {
            invalid("a disk number (e.g. 0), serial=PATTERN or location=PATTERN (PATTERN a glob with * ? [...])")
        })?),
        Target::LinuxFsType => {
            opts.linux_fs_type = value.parse().map_err(|_| invalid("one of ext4, xfs, btrfs, ntfs"))?;
        }
        Target::LinuxSmbDir => {
            if !value.starts_with('/') {
                return Err(invalid("an absolute path"));
            }
            opts.linux_smb_dir = PathBuf::from(value);
        }
        Target::AuditLog => opts.audit_log = non_empty(value).map(PathBuf::from),
        Target::AuditLogMaxSize => opts.audit_log_max_size_mb = uint,
        Target::AuditLogMaxBackup => opts.audit_log_max_backup = uint,
        Target::AuditLogMaxAge => opts.audit_log_max_age_days = uint,
        Target::LogFileMaxSize => opts.log.log_file_max_size_mb = uint,
        Target::LoggingFormat => opts.log.format = value.parse().map_err(|_| invalid("one of text, json"))?,
        Target::CriEndpoint => opts.cri_endpoint = non_empty(value).map(PathBuf::from),
        Target::AuthorizationPolicy => opts.authorization_policy = non_empty(value).map(PathBuf::from),
        Target::AuthorizationMode => {
            opts.authorization_warn_only = match value.as_str() {
                "enforce" => false,
                "warn" => true,
                _ => return Err(invalid("enforce or warn")),
            }
        }
        Target::Ignored | Target::Version => {}
    }
    Ok(())
}

/// The spellings Go's `strconv.ParseBool` accepts (the one grammar csi-proxyctl shares).
fn parse_bool(s: &str) -> Option<bool> {
    csi_proxy_client::go_bool::parse(s)
}

/// Decimal digits only (no sign, no spaces), within u64.
fn parse_uint(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn is_severity(s: &str) -> bool {
    let named = ["INFO", "WARNING", "ERROR", "FATAL"].iter().any(|n| n.eq_ignore_ascii_case(s));
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    named || (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && s.parse::<i32>().is_ok())
}

/// The usage text: every flag, sorted by name, with its value kind, default and description.
pub fn usage() -> String {
    let mut specs: Vec<&Spec> = FLAGS.iter().collect();
    specs.sort_by_key(|s| s.name);
    let mut out = String::from(
        "Usage: csi-proxy [flags]\n\
         Flags are written -name or --name, with a value as -name=value or -name value; \
         boolean flags as -name or -name=false.\n\n",
    );
    for s in specs {
        out.push_str("  -");
        out.push_str(s.name);
        match s.kind {
            Kind::Bool => {}
            kind => {
                out.push(' ');
                out.push_str(kind.hint());
            }
        }
        out.push_str("\n      ");
        out.push_str(s.help);
        if s.kind == Kind::StringList {
            out.push_str(" (may be repeated)");
        }
        out.push_str(&format!(" (default {:?})", s.default));
        out.push('\n');
    }
    out.push_str(
        "  -h, -help\n      Print this text and exit\n\n\
         Environment: RUST_LOG, when set, replaces the level chosen by -v \
         (for example RUST_LOG=info,csi_proxy=trace).\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse(args.iter().map(|s| s.to_string())) {
            Ok(ParseOutcome::Run(o)) => o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn fail(args: &[&str]) -> FlagError {
        match parse(args.iter().map(|s| s.to_string())) {
            Err(e) => e,
            other => panic!("{args:?} should fail: {other:?}"),
        }
    }

    /// kube-apiserver's three audit rotation flags, each on its own, and their defaults.
    #[test]
    fn audit_log_rotation_flags() {
        let o = run(&[]);
        assert_eq!((o.audit_log_max_size_mb, o.audit_log_max_backup, o.audit_log_max_age_days), (100, 5, 0));
        assert_eq!(run(&["-audit-log-maxsize=7"]).audit_log_max_size_mb, 7);
        assert_eq!(run(&["--audit-log-maxbackup", "0"]).audit_log_max_backup, 0);
        assert_eq!(run(&["-audit-log-maxage=30"]).audit_log_max_age_days, 30);
        // The log file's limit is not the audit file's any more.
        assert_eq!(run(&["-log_file_max_size=1"]).audit_log_max_size_mb, 100);
        for bad in ["-audit-log-maxsize=-1", "-audit-log-maxbackup=x", "-audit-log-maxage=1.5"] {
            let e = fail(&[bad]).to_string();
            assert!(e.contains(bad.split('=').next().unwrap().trim_start_matches('-')), "{e}");
        }
        let usage = usage();
        for name in ["-audit-log-maxsize", "-audit-log-maxbackup", "-audit-log-maxage"] {
            assert!(usage.contains(name), "{name} missing from the usage text");
        }
    }

    /// A node's shutdown waits -preshutdown-wait at most: an hour at most, not a typo's days.
    #[test]
    fn the_preshutdown_wait_is_bounded() {
        assert_eq!(run(&["-preshutdown-wait=1h"]).preshutdown_wait, Duration::from_secs(3600));
        assert_eq!(run(&["-preshutdown-wait=0"]).preshutdown_wait, Duration::ZERO);
        let e = fail(&["-preshutdown-wait=1h0m1s"]).to_string();
        assert!(e.contains("preshutdown-wait") && e.contains("at most 1h"), "{e}");
    }

    #[test]
    fn defaults() {
        let o = run(&[]);
        assert_eq!(o, Options::default());
        assert_eq!(o.kubelet_path, DEFAULT_KUBELET_PATH);
        assert!(o.require_privacy);
        assert!(!o.windows_service);
        assert!(o.working_dirs.is_empty());
        assert_eq!(o.metrics_bind_address, None);
        assert_eq!(o.log.v, 0);
        assert!(o.log.logtostderr);
        assert!(!o.log.alsologtostderr);
        assert_eq!(o.log.log_file, None);
        assert_eq!(o.socket_dir, PathBuf::from("/run/csi-proxy"));
        assert_eq!(o.pipe_sddl, None);
        assert_eq!(o.connection_idle_timeout, Duration::from_secs(300));
        assert_eq!(o.handshake_timeout, Duration::from_secs(10));
        assert_eq!(o.progress_timeout, Duration::from_secs(10));
        assert_eq!((o.max_connections_per_endpoint, o.max_connections), (256, 2048));
        assert_eq!(o.allowed_prefixes(), vec![DEFAULT_KUBELET_PATH.to_string()]);
        assert_eq!(o.allowed_services, None);
        assert_eq!(o.linux_fs_type, FsType::Ext4);
    }

    #[test]
    fn upstream_install_line() {
        let line = r"-windows-service -log_file=C:\etc\kubernetes\logs\csi-proxy.log -logtostderr=false";
        let o = run(&line.split(' ').collect::<Vec<_>>());
        assert!(o.windows_service);
        assert_eq!(o.log.log_file, Some(PathBuf::from(r"C:\etc\kubernetes\logs\csi-proxy.log")));
        assert!(!o.log.logtostderr);
        assert_eq!(o.log.v, 0);

        let o = run(&[
            "-windows-service",
            r"-log_file=C:\etc\kubernetes\logs\csi-proxy.log",
            "-logtostderr=false",
            "-v=5",
            "-metrics-bind-address=localhost:8888",
        ]);
        assert_eq!(o.log.v, 5);
        assert_eq!(o.metrics_bind_address.as_deref(), Some("localhost:8888"));
    }

    #[test]
    fn value_forms() {
        assert_eq!(run(&["-v=5"]).log.v, 5);
        assert_eq!(run(&["--v", "5"]).log.v, 5);
        assert_eq!(run(&["-v", "7"]).log.v, 7);
        assert_eq!(run(&["--v=3"]).log.v, 3);
        assert_eq!(run(&["-v=1", "-v=4"]).log.v, 4, "last one wins");
        assert_eq!(run(&["-kubelet-path", r"D:\kubelet"]).kubelet_path, r"D:\kubelet");
        // A value may itself contain '=' or start with '-'.
        assert_eq!(run(&["-pipe-sddl=D:P(A;;GA;;;SY)"]).pipe_sddl.as_deref(), Some("D:P(A;;GA;;;SY)"));
        assert_eq!(run(&["-metrics-bind-address=a=b"]).metrics_bind_address.as_deref(), Some("a=b"));
        assert_eq!(run(&["-log_dir", "-x"]).log.log_dir, Some(PathBuf::from("-x")));
        // Empty means unset.
        assert_eq!(run(&["-metrics-bind-address="]).metrics_bind_address, None);
        assert_eq!(run(&["-log_file="]).log.log_file, None);
        assert_eq!(run(&["-socket-dir", "/tmp/s"]).socket_dir, PathBuf::from("/tmp/s"));
    }

    #[test]
    fn working_dirs_accumulate() {
        let o = run(&["-working-dir", "a", "-working-dir=b", "--working-dir", "c"]);
        assert_eq!(o.working_dirs, ["a", "b", "c"]);
        assert_eq!(o.allowed_prefixes(), ["a", "b", "c", DEFAULT_KUBELET_PATH]);
    }

    #[test]
    fn protected_disks_accumulate_and_bad_ones_are_named() {
        let o = run(&["-protected-disk", "0", "-protected-disk=serial=OS*", "--protected-disk=location=*:0:0:0"]);
        let shown: Vec<String> = o.protected_disks.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["0", "serial=OS*", "location=*:0:0:0"]);
        assert!(run(&["-v=1"]).protected_disks.is_empty());
        let e = fail(&["-protected-disk=sda"]);
        assert!(
            e.to_string().starts_with(r#"invalid value "sda" for flag -protected-disk: expected a disk number"#),
            "{e}"
        );
    }

    #[test]
    fn allowed_services_accumulate() {
        let o = run(&["-allowed-service", "iscsid", "-allowed-service=MSiSCSI", "--allowed-service", "-odd-name"]);
        assert_eq!(o.allowed_services, Some(vec!["iscsid".into(), "MSiSCSI".into(), "-odd-name".into()]));
        assert_eq!(run(&["-allowed-service="]).allowed_services, Some(vec![]), "allows none");
        assert_eq!(run(&["-allowed-service=", "-allowed-service=a"]).allowed_services, Some(vec!["a".into()]));
        assert_eq!(run(&["-v=1"]).allowed_services, None);
        let e = fail(&["-allowed-service"]);
        assert_eq!(e, FlagError::MissingValue { flag: "allowed-service".into(), hint: "string" });
        assert!(usage().contains("  -allowed-service string\n"), "{}", usage());
        assert!(usage().contains("(may be repeated)"));
    }

    #[test]
    fn bools() {
        assert!(!run(&["-require-privacy=false"]).require_privacy);
        assert!(run(&["-require-privacy=false", "-require-privacy"]).require_privacy);
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert!(run(&[&format!("-alsologtostderr={t}")]).log.alsologtostderr, "{t}");
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert!(!run(&[&format!("-logtostderr={f}")]).log.logtostderr, "{f}");
        }
        let e = fail(&["-logtostderr=maybe"]);
        assert!(matches!(&e, FlagError::InvalidValue { flag, .. } if flag == "logtostderr"));
        assert!(e.to_string().contains("\"maybe\""), "{e}");
        // A boolean never takes the next argument: "false" is then a positional argument.
        let e = fail(&["-windows-service", "false"]);
        assert_eq!(e, FlagError::Positional { arg: "false".into() });
        let o = run(&["-windows-service", "-v", "2"]);
        assert!(o.windows_service);
        assert_eq!(o.log.v, 2);
    }

    #[test]
    fn klog_compat_flags() {
        let o = run(&[
            "-vmodule=foo=3,bar=2",
            "-log_file_max_size=100",
            "-stderrthreshold=error",
            "-alsologtostderrthreshold",
            "INFO",
            "-legacy_stderr_threshold_behavior=false",
            "-add_dir_header",
            "-skip_headers",
            "-skip_log_headers=true",
            "-one_output",
            "-log_backtrace_at",
            "main.go:10",
            "-v=2",
        ]);
        assert_eq!(o.log.v, 2, "ignored value flags consumed exactly one argument each");
        assert_eq!(o.log.log_file_max_size_mb, 100);
        let o = Options { log: LogOptions { v: 0, log_file_max_size_mb: 1800, ..o.log.clone() }, ..o };
        assert_eq!(o, Options::default());
        assert_eq!(run(&["-stderrthreshold=2"]).log.v, 0);
        assert!(matches!(fail(&["-stderrthreshold=LOUD"]), FlagError::InvalidValue { .. }));
        assert!(matches!(fail(&["-log_file_max_size=-1"]), FlagError::InvalidValue { .. }));
        assert!(matches!(fail(&["-skip_headers=yes"]), FlagError::InvalidValue { .. }));
    }

    #[test]
    fn errors() {
        let e = fail(&["-nope"]);
        assert_eq!(e, FlagError::Unknown { flag: "nope".into() });
        assert_eq!(e.to_string(), "flag provided but not defined: -nope");
        // Removed in upstream v1.0.
        assert!(matches!(fail(&["-kubelet-pod-path=x"]), FlagError::Unknown { .. }));

        let e = fail(&["-v=abc"]);
        assert_eq!(e.to_string(), r#"invalid value "abc" for flag -v: expected a non-negative integer"#);
        assert!(matches!(fail(&["-v=-1"]), FlagError::InvalidValue { .. }));
        assert!(matches!(fail(&["-v", "-logtostderr"]), FlagError::InvalidValue { .. }));
        assert!(matches!(fail(&["-v=99999999999"]), FlagError::InvalidValue { .. }));

        let e = fail(&["-logtostderr=false", "-log_file"]);
        assert_eq!(e, FlagError::MissingValue { flag: "log_file".into(), hint: "string" });
        assert!(e.to_string().starts_with("flag needs an argument: -log_file"), "{e}");
        assert!(matches!(fail(&["--v"]), FlagError::MissingValue { .. }));

        assert!(matches!(fail(&["stray"]), FlagError::Positional { .. }));
        assert!(matches!(fail(&["-"]), FlagError::Positional { .. }));
        assert!(matches!(fail(&["-v=1", "--", "x"]), FlagError::Positional { .. }));
        assert!(matches!(fail(&["---v=1"]), FlagError::BadSyntax { .. }));
        assert!(matches!(fail(&["-=1"]), FlagError::BadSyntax { .. }));
    }

    #[test]
    fn double_dash_ends_flags() {
        let o = run(&["-v=3", "--"]);
        assert_eq!(o.log.v, 3);
        assert_eq!(run(&["--"]), Options::default());
    }

    #[test]
    fn help() {
        for h in ["-h", "-help", "--help", "--h", "-help=false"] {
            assert_eq!(parse([h.to_string()]).unwrap(), ParseOutcome::Help, "{h}");
        }
        // Help wins over what follows, like Go's flag package.
        assert_eq!(parse(["-v=2", "-h", "-bogus"].map(String::from)).unwrap(), ParseOutcome::Help);
        let text = usage();
        for spec in FLAGS {
            assert!(text.contains(&format!("  -{}", spec.name)), "{} missing", spec.name);
            let default = format!("(default {:?})", spec.default);
            assert!(text.contains(&default), "{} default", spec.name);
        }
        assert!(text.contains("-h, -help"));
        assert!(text.contains("0-1 info, 2-4 debug, 5 and up trace"));
    }

    /// The defaults shown in the usage text are the ones actually in force.
    #[test]
    fn usage_defaults_match_options() {
        let mut opts = Options::default();
        for spec in FLAGS.iter().filter(|s| s.kind != Kind::StringList) {
            apply(&mut opts, spec, spec.default.to_string())
                .unwrap_or_else(|e| panic!("default of -{}: {e}", spec.name));
        }
        assert_eq!(opts, Options::default());
    }

    #[test]
    fn linux_fs_type() {
        assert_eq!(run(&["-linux-fs-type=xfs"]).linux_fs_type, FsType::Xfs);
        assert_eq!(run(&["--linux-fs-type", "btrfs"]).linux_fs_type, FsType::Btrfs);
        assert_eq!(run(&["-linux-fs-type=ntfs"]).linux_fs_type, FsType::Ntfs);
        assert_eq!(run(&["-linux-fs-type=xfs", "-linux-fs-type=ext4"]).linux_fs_type, FsType::Ext4);
        for bad in ["vfat", "EXT4", "", "ext4 "] {
            let e = fail(&[&format!("-linux-fs-type={bad}")]);
            assert_eq!(
                e.to_string(),
                format!("invalid value {bad:?} for flag -linux-fs-type: expected one of ext4, xfs, btrfs, ntfs")
            );
        }
        assert!(matches!(fail(&["-linux-fs-type"]), FlagError::MissingValue { .. }));
        assert!(usage().contains("  -linux-fs-type string\n"), "{}", usage());
    }

    #[test]
    fn log_rotation_and_format() {
        use crate::logging::LogFormat;
        assert_eq!(run(&[]).log.log_file_max_size_mb, 1800);
        assert_eq!(run(&["-log_file_max_size=0"]).log.log_file_max_size_mb, 0);
        assert_eq!(run(&["-log_file_max_size", "5"]).log.log_file_max_size_mb, 5);
        assert_eq!(run(&[]).log.format, LogFormat::Text);
        assert_eq!(run(&["-logging-format=json"]).log.format, LogFormat::Json);
        assert_eq!(run(&["--logging-format", "text"]).log.format, LogFormat::Text);
        for bad in ["xml", "JSON", "", "json "] {
            let e = fail(&[&format!("-logging-format={bad}")]);
            assert_eq!(
                e.to_string(),
                format!("invalid value {bad:?} for flag -logging-format: expected one of text, json")
            );
        }
        assert!(usage().contains("  -logging-format string\n"), "{}", usage());
    }

    #[test]
    fn durations() {
        let d = |s: &str| csi_proxy_client::go_duration::parse(s).ok();
        assert_eq!(d("30s"), Some(Duration::from_secs(30)));
        assert_eq!(d("5m"), Some(Duration::from_secs(300)));
        assert_eq!(d("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(d("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(d("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(d("5m0s"), Some(Duration::from_secs(300)));
        assert_eq!(d("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(d(".5m"), Some(Duration::from_secs(30)));
        assert_eq!(d("10us"), Some(Duration::from_micros(10)));
        assert_eq!(d("10µs"), Some(Duration::from_micros(10)));
        assert_eq!(d("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        assert_eq!(d("0s"), Some(Duration::ZERO));
        for bad in ["", "5", "abc", "-5s", "+5s", "5x", "s", ".s", "1.2.3s", "5 s", "1d"] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
        assert_eq!(d("99999999999999999999h"), None, "overflow");

        let o = run(&["-connection-idle-timeout=30s", "-handshake-timeout", "250ms"]);
        assert_eq!(o.connection_idle_timeout, Duration::from_secs(30));
        assert_eq!(o.handshake_timeout, Duration::from_millis(250));
        assert_eq!(run(&["-connection-idle-timeout=0"]).connection_idle_timeout, Duration::ZERO);
        assert_eq!(run(&["-progress-timeout=0"]).progress_timeout, Duration::ZERO);
        assert_eq!(run(&["-progress-timeout", "1m"]).progress_timeout, Duration::from_secs(60));
        let o = run(&["-max-connections-per-endpoint=8", "-max-connections", "100"]);
        assert_eq!((o.max_connections_per_endpoint, o.max_connections), (8, 100));
        for bad in ["-max-connections=0", "-max-connections-per-endpoint=-1", "-max-connections=x"] {
            assert!(matches!(fail(&[bad]), FlagError::InvalidValue { .. }), "{bad}");
        }
        let e = fail(&["-handshake-timeout=10"]);
        assert!(e.to_string().contains("for flag -handshake-timeout: expected a duration"), "{e}");
    }
}
