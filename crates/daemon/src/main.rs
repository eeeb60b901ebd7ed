//! `csi-proxy`: serves the 23 upstream APIs on named pipes (Windows) or unix sockets (Linux).

mod audit;
mod authz;
#[cfg(windows)]
mod console;
mod flags;
mod logging;
#[cfg(target_os = "linux")]
mod sdnotify;
mod startup;
#[cfg(windows)]
mod winsvc;

use anyhow::Context as _;
use csi_proxy_metrics::Metrics;
use csi_proxy_server::{CallObserver, Config, Context};
use csi_proxy_transport::{ConnPolicy, Endpoints, ServeOptions};
use flags::{Options, ParseOutcome};
use startup::{COMMIT, DIRTY, VERSION};
use std::future::Future;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

fn main() -> ExitCode {
    let opts = match flags::parse(std::env::args().skip(1)) {
        Ok(ParseOutcome::Run(o)) => o,
        Ok(ParseOutcome::Help) => return print_stdout(&flags::usage()),
        Ok(ParseOutcome::Version) => return print_stdout(&format!("{}\n", startup::version_line())),
        Err(e) => {
            eprintln!("csi-proxy: {e}\n\n{}", flags::usage());
            return ExitCode::from(2);
        }
    };
    if let Err(e) = startup::check_roots(&opts) {
        eprintln!("csi-proxy: {e}");
        return ExitCode::from(2);
    }
    let _log = match logging::init(&opts.log) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("csi-proxy: {}", startup::error_chain(&e));
            return ExitCode::from(1);
        }
    };
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let text = startup::error_chain(&e);
            tracing::error!("{text}");
            eprintln!("csi-proxy: {text}");
            ExitCode::from(1)
        }
    }
}

/// Writes `text` to standard output. A reader that has gone away (`csi-proxy --help | head -1`)
/// is not an error: it has all it wanted.
fn print_stdout(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("csi-proxy: writing to standard output: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(opts: Options) -> anyhow::Result<()> {
    if opts.windows_service {
        #[cfg(windows)]
        return winsvc::run(opts);
        #[cfg(not(windows))]
        anyhow::bail!("-windows-service is only meaningful on Windows");
    }
    // Under systemd (`Type=notify`), READY=1 once every socket is served and STOPPING=1 as the
    // stop begins.
    #[cfg(target_os = "linux")]
    let (ready, stopping) = (|| sdnotify::notify("READY=1"), || sdnotify::notify("STOPPING=1"));
    #[cfg(not(target_os = "linux"))]
    let (ready, stopping) = (|| {}, || {});
    run_until(opts, ready, async move {
        let event = shutdown_signal().await;
        tracing::info!(event, "stop requested");
        stopping();
    })
}

/// How long host calls still running after the endpoints have drained may hold up the exit.
/// Connections get the transport's own drain first; a host call stuck past both (a hung WMI
/// provider, a dead SMB server) is abandoned so that Stop always completes.
pub(crate) const STOP_BUDGET: Duration = Duration::from_secs(10);

/// The longest a stop may take, from its request to the process's exit: the transport's drain of
/// connections, then [`STOP_BUDGET`] for host calls, and 5 s for the rest (the metrics listener,
/// the logs). Past it the process exits with code 1 whatever is still running (K4: a stop
/// always ends, and nothing a second stop request does lengthens or shortens it).
pub(crate) const DRAIN_DEADLINE: Duration =
    Duration::from_secs(csi_proxy_transport::DRAIN.as_secs() + STOP_BUDGET.as_secs() + 5);

/// Starts the clock of [`DRAIN_DEADLINE`], once: a thread that ends the process when it runs out.
fn arm_drain_deadline() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let started = std::thread::Builder::new().name("drain-deadline".into()).spawn(|| {
            std::thread::sleep(DRAIN_DEADLINE);
            tracing::error!(deadline = ?DRAIN_DEADLINE, "the stop did not finish in time; exiting now");
            eprintln!("csi-proxy: the stop did not finish within {DRAIN_DEADLINE:?}; exiting");
            std::process::exit(1);
        });
        if let Err(e) = started {
            tracing::warn!(error = %e, "cannot start the drain deadline's thread; the stop has no deadline");
        }
    });
}

/// Blocking threads tokio may add for its own blocking work (tokio's default allows 512). Calls'
/// host work does not run there but on the server's bounded pools (`csi_proxy_server::call`);
/// this only keeps the runtime's own pool bounded too.
const HOST_THREADS: usize = 64;
/// How long an idle blocking thread of tokio's is kept (tokio's default: 10 s), so that threads
/// do not come and go at every burst.
const HOST_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(120);

/// Serves until `shutdown` completes, on a runtime of its own; calls `ready` once every endpoint
/// exists and is served (not at all if one cannot be bound).
fn run_until(
    opts: Options,
    ready: impl FnOnce(),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(HOST_THREADS)
        .thread_keep_alive(HOST_THREAD_KEEP_ALIVE)
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(serve(opts, ready, shutdown));
    // Dropping the runtime would wait for blocking host calls without bound.
    runtime.shutdown_timeout(STOP_BUDGET);
    if result.is_ok() {
        tracing::info!("stopped");
    }
    result
}

/// Adapts the Prometheus metrics to the server's call hooks.
struct MetricsObserver(Metrics);

impl CallObserver for MetricsObserver {
    fn started(&self, service: &str, method: &str) {
        self.0.started(service, method)
    }
    fn handled(&self, service: &str, method: &str, code: &str, elapsed: Duration) {
        self.0.handled(service, method, code, elapsed)
    }
    fn joined(&self, service: &str, method: &str) {
        self.0.joined(service, method)
    }
}

/// Adapts the Prometheus metrics to the transport's admission reports.
struct ConnectionMetrics(Metrics);

impl csi_proxy_transport::ConnectionObserver for ConnectionMetrics {
    fn refused(&self, endpoint: &str, reason: &'static str) {
        self.0.connection_refused(endpoint, reason)
    }
    fn evicted(&self, endpoint: &str, reason: &'static str) {
        self.0.connection_evicted(endpoint, reason)
    }
    fn cancelled(&self, endpoint: &str, reason: &'static str) {
        self.0.call_cancelled(endpoint, reason)
    }
    fn opened(&self, endpoint: &str) {
        self.0.connection_opened(endpoint)
    }
    fn closed(&self, endpoint: &str) {
        self.0.connection_closed(endpoint)
    }
}

async fn serve(
    opts: Options,
    ready: impl FnOnce(),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Polled once before anything is bound: that installs the signal handlers, so a SIGTERM sent
    // the moment READY=1 arrives stops the daemon cleanly instead of killing it (the transport
    // first awaits `shutdown` only after its ready callback).
    let mut shutdown = Box::pin(shutdown);
    let signalled = std::future::poll_fn(|cx| std::task::Poll::Ready(shutdown.as_mut().poll(cx).is_ready())).await;
    let shutdown = async move {
        if !signalled {
            shutdown.await;
        }
    };
    tracing::info!(
        version = VERSION,
        commit = COMMIT,
        dirty = DIRTY,
        working_dirs = %opts.allowed_prefixes().join(","),
        require_privacy = opts.require_privacy,
        allowed_services = %opts.allowed_services.as_ref().map_or("(any)".to_string(), |s| s.join(",")),
        protected_disks = %opts.protected_disks.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        "starting csi-proxy"
    );
    // Every answer's csi-proxy-version header: what -version prints after the program's name.
    let line = startup::version_line();
    csi_proxy_transport::set_version(line.strip_prefix("csi-proxy ").unwrap_or(&line));
    if opts.allowed_services.is_none() {
        tracing::warn!(
            "any host service can be started or stopped through the system API (StartService/StopService); \
             restrict this with -allowed-service NAME (repeatable), or -allowed-service= to allow none"
        );
    }
    startup::warn_missing_roots(&opts);
    #[cfg(target_os = "linux")]
    startup::check_smb_dir(&opts.linux_smb_dir)?;
    let hosts = csi_proxy_host::native(csi_proxy_host::Config {
        roots: csi_proxy_host::paths::Roots::new(opts.allowed_prefixes()),
        fs_type: opts.linux_fs_type,
        smb_dir: opts.linux_smb_dir.clone(),
        protected_disks: opts.protected_disks.clone(),
    });
    let config = Config { require_privacy: opts.require_privacy, allowed_services: opts.allowed_services.clone() };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let mut metrics_task = None;
    // What /readyz answers: set once every endpoint is served, cleared when stopping.
    let mut readiness: Option<Metrics> = None;
    let ctx = match &opts.metrics_bind_address {
        Some(addr) => {
            let metrics = Metrics::new().context("setting up metrics")?;
            metrics.set_build_info(VERSION, COMMIT, DIRTY).context("setting up metrics")?;
            let server = metrics.bind(addr).await.with_context(|| format!("-metrics-bind-address {addr}"))?;
            tracing::info!(address = %server.local_addr(), "metrics on /metrics");
            metrics_task = Some(tokio::spawn(server.serve(stopped())));
            readiness = Some(metrics.clone());
            csi_proxy_transport::set_connection_observer(Arc::new(ConnectionMetrics(metrics.clone())));
            Context::with_observer(hosts, config, Arc::new(MetricsObserver(metrics)))
        }
        None => Context::new(hosts, config),
    };
    authz::start_identifier(&opts);
    let ctx = match authz::start_authorizer(&opts)? {
        Some(authorizer) => ctx.with_authorizer(authorizer),
        None => ctx,
    };
    let ctx = match &opts.audit_log {
        // Read-only calls too at -v=4 and above, where calls are logged in detail anyway.
        Some(path) => {
            let (max_bytes, retention) = audit::rotation(&opts);
            let file = audit::AuditFile::open(path, max_bytes, retention, opts.log.v >= 4)
                .with_context(|| format!("-audit-log {}", path.display()))?;
            tracing::info!(file = %path.display(), read_only_calls = opts.log.v >= 4, max_bytes,
                max_backup = opts.audit_log_max_backup, max_age_days = opts.audit_log_max_age_days, "audit trail on");
            ctx.with_audit(Arc::new(file))
        }
        None => ctx,
    };

    #[cfg(unix)]
    let endpoints = Endpoints::UnixDir(opts.socket_dir.clone());
    #[cfg(windows)]
    let endpoints = Endpoints::Pipes { sddl: opts.pipe_sddl.clone() };
    let mut options = ServeOptions {
        conn: ConnPolicy { handshake_timeout: opts.handshake_timeout, idle_timeout: opts.connection_idle_timeout },
        progress_timeout: opts.progress_timeout,
        max_connections_per_endpoint: opts.max_connections_per_endpoint,
        max_connections: opts.max_connections,
    };
    fit_connections_to_fd_limit(&mut options);

    let unready = readiness.clone();
    let shutdown = async move {
        shutdown.await;
        arm_drain_deadline();
        tracing::info!("shutting down");
        if let Some(m) = &unready {
            m.set_ready(false);
        }
        let _ = stop_tx.send(true);
    };
    let ready = || {
        tracing::info!("every endpoint is bound and served");
        if let Some(m) = &readiness {
            m.set_ready(true);
        }
        ready();
    };
    let apis = csi_proxy_wire::APIS;
    csi_proxy_transport::serve_apis_then(
        apis,
        &endpoints,
        |api| csi_proxy_server::service(&ctx, api),
        options,
        ready,
        shutdown,
    )
    .await
    .context("cannot serve the API endpoints")?;
    if let Some(t) = metrics_task {
        t.await.context("metrics task")?.context("metrics endpoint")?;
    }
    Ok(())
}

/// Descriptors kept free of connections, for listeners, logs and host work.
const FD_RESERVE: u64 = 256;

/// Raises the soft open-file limit to the hard one (as Go does at start), and keeps the
/// connection limits within what is left, so connections can never starve host work of
/// descriptors.
fn fit_connections_to_fd_limit(options: &mut ServeOptions) {
    match csi_proxy_transport::limits::raise_nofile_limit() {
        Ok(limit) => {
            match (limit.soft, limit.hard) {
                (Some(soft), Some(hard)) => tracing::info!(soft, hard, "open-file limit"),
                // Numbers where there are any; an unlimited one as the word.
                (soft, hard) => {
                    let shown = |l: Option<u64>| l.map_or("unlimited".to_string(), |n| n.to_string());
                    tracing::info!(soft = %shown(soft), hard = %shown(hard), "open-file limit")
                }
            }
            if let Some(soft) = limit.soft {
                let room = usize::try_from(soft.saturating_sub(FD_RESERVE).max(1)).unwrap_or(usize::MAX);
                if options.max_connections > room {
                    tracing::warn!(
                        requested = options.max_connections,
                        allowed = room,
                        open_file_limit = soft,
                        "lowering -max-connections to fit the open-file limit"
                    );
                    options.max_connections = room;
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "keeping the open-file limit as it is"),
    }
}

/// Completes with the name of what asked the daemon to stop: SIGINT or SIGTERM on unix; on
/// Windows CTRL_C, CTRL_BREAK, CTRL_CLOSE or CTRL_SHUTDOWN (not CTRL_LOGOFF, see `console`).
async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops the daemon");
                let _ = tokio::signal::ctrl_c().await;
                return "SIGINT";
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    }
    #[cfg(windows)]
    {
        console::stop_requested().await
    }
}
