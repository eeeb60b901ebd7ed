//! `csi-proxyctl`: the operator's command line for a running csi-proxy. It talks to the daemon
//! the way a CSI driver does (the named pipes on Windows, the socket directory on Linux), through
//! the `csi-proxy-client` crate; `csi-proxyctl --help` describes the commands.

// Every module prints through `out` (no panic on a closed pipe): these shadow std's macros of the
// same names in the whole crate, because they are defined before the modules.
macro_rules! print {
    ($($t:tt)*) => { $crate::out::stdout(format_args!($($t)*)) };
}
macro_rules! println {
    () => { $crate::out::stdout(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::stdout(format_args!("{}\n", format_args!($($t)*))) };
}
#[allow(unused_macros)] // for any module that prints to standard error without a newline
macro_rules! eprint {
    ($($t:tt)*) => { $crate::out::stderr(format_args!($($t)*)) };
}
macro_rules! eprintln {
    () => { $crate::out::stderr(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::stderr(format_args!("{}\n", format_args!($($t)*))) };
}

mod args;
mod conformance;
mod dynamic;
mod list;
mod out;
mod table;
mod term;

use anyhow::Context as _;
use args::{Command, Parsed};
use csi_proxy_client::{Connector, Status};
use std::io::{BufRead, IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

/// Exit codes: 0 done, 1 a call or connection failed (for a listing: any of its rows), 2 a usage
/// error or a refused call.
const FAILED: u8 = 1;
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let code = run_main();
    // Output that could not be written (other than into a closed pipe) fails the run.
    if out::failed() && code == ExitCode::SUCCESS {
        return ExitCode::from(FAILED);
    }
    code
}

fn run_main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // The conformance run's probe of the virtual disk API (a child of its own, see
    // conformance/vhd.rs): not a command.
    #[cfg(windows)]
    if let [arg, file] = &argv[..] {
        if arg == conformance::VHD_PROBE_ARG {
            return conformance::vhd_probe_main(file);
        }
    }
    let parsed = match args::parse(&argv) {
        Ok(Parsed::Help) => {
            print!("{}", args::usage_text());
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("csi-proxyctl {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Run(o)) => *o,
        Err(e) => {
            let e = term::shown(&e, term::MESSAGE);
            eprintln!("error: {e}\n\nRun 'csi-proxyctl --help' for the commands and options.");
            return ExitCode::from(USAGE);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(FAILED);
        }
    };
    match rt.block_on(run(parsed)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Refused(msg) | Failure::Usage(msg)) => {
            eprintln!("error: {}", term::shown(&msg, term::MESSAGE));
            ExitCode::from(USAGE)
        }
        Err(Failure::Rpc { what, status }) => {
            // The code as gRPC names it, then the daemon's own message.
            let message = term::shown(status.message(), term::MESSAGE);
            eprintln!("error: {what}: code {:?} ({}): {message}", status.code(), status.code() as i32);
            ExitCode::from(FAILED)
        }
        Err(Failure::Other(e)) => {
            eprintln!("error: {}", term::shown(&format!("{e:#}"), term::MESSAGE));
            ExitCode::from(FAILED)
        }
        Err(Failure::Partial(msg)) => {
            eprintln!("error: {}", term::shown(&msg, term::MESSAGE));
            ExitCode::from(FAILED)
        }
    }
}

pub enum Failure {
    /// A mutating call that was not confirmed.
    Refused(String),
    /// Options that can't be used (exit status 2), found after parsing (a secret's file, an
    /// unknown method, a request that is not the method's JSON).
    Usage(String),
    /// A listing printed, but some of its rows could not be read (their calls' errors were
    /// shown as warnings): exit status 1.
    Partial(String),
    /// A call the daemon answered with an error.
    Rpc {
        what: String,
        status: Status,
    },
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Other(e)
    }
}

impl From<csi_proxy_client::Error> for Failure {
    fn from(e: csi_proxy_client::Error) -> Self {
        // Its message already ends with its source's.
        Failure::Other(anyhow::anyhow!("{e}"))
    }
}

/// `status` of the call `what` as a [`Failure`].
pub fn rpc(what: impl Into<String>) -> impl FnOnce(Status) -> Failure {
    let what = what.into();
    move |status| Failure::Rpc { what, status }
}

pub struct Ctx {
    pub connector: Connector,
    pub output: args::Output,
    /// `output` is JSON (what the conformance report asks).
    pub json: bool,
    pub timeout: Duration,
}

impl Ctx {
    /// A connection to `api`, bounded by the timeout.
    pub async fn connect(&self, api: csi_proxy_client::Api) -> Result<csi_proxy_client::Channel, Failure> {
        match tokio::time::timeout(self.timeout, self.connector.connect(api)).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(Failure::Other(anyhow::anyhow!(
                "connecting to {} took longer than {:?}",
                self.connector.endpoint(&api),
                self.timeout
            ))),
        }
    }

    /// Prints `rows` under `header` as an aligned table (`-o table`: the first `narrow` columns;
    /// `-o wide`: all of them), or `json` (`-o json`).
    pub fn print(&self, header: &[&str], narrow: usize, rows: Vec<Vec<String>>, json: serde_json::Value) {
        match self.output {
            args::Output::Json => println!("{}", term::json_pretty(&json)),
            args::Output::Wide => print!("{}", table::render(header, &rows)),
            args::Output::Table => {
                let rows: Vec<Vec<String>> = rows.into_iter().map(|r| r.into_iter().take(narrow).collect()).collect();
                print!("{}", table::render(&header[..narrow.min(header.len())], &rows))
            }
        }
    }
}

async fn run(o: args::Options) -> Result<(), Failure> {
    #[allow(unused_mut)]
    let mut connector = Connector::new();
    #[cfg(unix)]
    if let Some(dir) = args::socket_dir(o.socket_dir.clone(), std::env::var_os(args::SOCKET_DIR_ENV)) {
        connector = connector.socket_dir(dir);
    }
    let ctx = Ctx { connector, output: o.output, json: o.output == args::Output::Json, timeout: o.timeout };
    // A call's request is read and confirmed before the time limit starts: it bounds the
    // daemon's answer, not the person at the prompt.
    // Its -timeout bounds each step; the whole run takes as long as its steps.
    // `-list` prints the table of checks: no daemon, no host, nothing run.
    if let Command::Conformance { list: true, .. } = &o.command {
        print!("{}", conformance::check::list(ctx.json));
        return Ok(());
    }
    if let Command::Conformance { kubelet_path, cleanup: true, .. } = &o.command {
        return conformance::cleanup(&ctx, kubelet_path);
    }
    if let Command::Conformance { kubelet_path, scratch_dir, remote, audit_log, .. } = &o.command {
        let given = conformance::Given::read(remote).map_err(Failure::Usage)?;
        return conformance::run(&ctx, kubelet_path, scratch_dir, given, audit_log.as_deref()).await;
    }
    let prepared = match &o.command {
        Command::Call { api, method, request } => Some(prepare_call(*api, method, request, o.yes, o.dry_run)?),
        _ => None,
    };
    let work = async {
        match o.command {
            Command::Apis => list::apis(&ctx).await,
            Command::Disks => list::disks(&ctx).await,
            Command::Volumes => list::volumes(&ctx).await,
            Command::IscsiPortals => list::iscsi_portals(&ctx).await,
            Command::BiosSerial => list::bios_serial(&ctx).await,
            Command::Service(name) => list::service(&ctx, &name).await,
            Command::Methods(api) => methods(&ctx, api),
            Command::Version => version(&ctx).await,
            Command::Whoami => whoami(&ctx).await,
            Command::Conformance { .. } => Err(Failure::Other(anyhow::anyhow!("conformance runs above"))),
            Command::Call { api, .. } => match prepared {
                Some(prepared) => call(&ctx, api, prepared).await,
                None => Err(Failure::Other(anyhow::anyhow!("the call was not prepared"))),
            },
        }
    };
    match tokio::time::timeout(o.timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Other(anyhow::anyhow!("no answer within {:?} (raise it with --timeout)", o.timeout))),
    }
}

fn methods(ctx: &Ctx, only: Option<csi_proxy_client::Api>) -> Result<(), Failure> {
    let pool = dynamic::pool();
    let mut rows = Vec::new();
    let mut json = Vec::new();
    for api in csi_proxy_client::APIS.iter().filter(|a| only.is_none_or(|o| o == **a)) {
        for m in dynamic::methods(&pool, api) {
            let kind = if dynamic::is_read_only(m.name()) { "read-only" } else { "mutating" };
            rows.push(vec![
                format!("{}/{}", api.group, api.version),
                m.name().to_string(),
                kind.to_string(),
                m.input().full_name().to_string(),
                m.output().full_name().to_string(),
            ]);
            json.push(serde_json::json!({
                "api": format!("{}/{}", api.group, api.version),
                "method": m.name(),
                "mutating": kind == "mutating",
                "request": m.input().full_name(),
                "response": m.output().full_name(),
            }));
        }
    }
    ctx.print(&["API", "METHOD", "KIND", "REQUEST", "RESPONSE"], 3, rows, json.into());
    Ok(())
}

/// This program's version, then the daemon's: the `csi-proxy-version` header of its answer to a
/// health check on the first endpoint that answers (every answer of csi-proxy carries it).
/// The first endpoint that answers a health check, and its answer's headers; else the last
/// error.
async fn first_answer(ctx: &Ctx) -> Result<(String, tonic::metadata::MetadataMap), String> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let mut last_error = String::new();
    for api in csi_proxy_client::APIS {
        let channel = match ctx.connector.connect(*api).await {
            Ok(c) => c,
            Err(e) => {
                last_error = e.to_string();
                continue;
            }
        };
        let metadata = match HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await {
            Ok(r) => r.metadata().clone(),
            // A daemon without the health service (upstream's) still answers, with its headers.
            Err(s) if s.code() == tonic::Code::Unimplemented => s.metadata().clone(),
            Err(s) => {
                last_error = format!("health check: code {:?}: {}", s.code(), s.message());
                continue;
            }
        };
        return Ok((ctx.connector.endpoint(api), metadata));
    }
    Err(last_error)
}

async fn version(ctx: &Ctx) -> Result<(), Failure> {
    let client = env!("CARGO_PKG_VERSION");
    let (reached, last_error) = match first_answer(ctx).await {
        Ok((endpoint, metadata)) => {
            let daemon = metadata.get(VERSION_HEADER).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            (Some((endpoint, daemon)), None)
        }
        Err(e) => (None, Some(e)),
    };
    let Some((endpoint, daemon)) = reached else {
        if ctx.json {
            println!("{}", term::json(&serde_json::json!({"client": {"version": client}})));
        } else {
            println!("csi-proxyctl {client}");
        }
        return Err(Failure::Other(anyhow::anyhow!(
            "cannot reach the daemon on any endpoint: {}",
            last_error.unwrap_or_default()
        )));
    };
    let shown = daemon.clone().unwrap_or_else(|| "unknown (its answer names no version: not this csi-proxy)".into());
    if ctx.json {
        let out = serde_json::json!({
            "client": {"version": client},
            "daemon": {"version": daemon, "endpoint": endpoint},
        });
        println!("{}", term::json_pretty(&out));
    } else {
        println!("csi-proxyctl {client}");
        println!("csi-proxy {}", term::shown(&shown, term::VALUE));
    }
    Ok(())
}

/// Who the daemon takes this program to be: its csi-proxy-caller header, decoded.
async fn whoami(ctx: &Ctx) -> Result<(), Failure> {
    let (endpoint, metadata) = first_answer(ctx)
        .await
        .map_err(|e| Failure::Other(anyhow::anyhow!("cannot reach the daemon on any endpoint: {e}")))?;
    let caller = metadata
        .get(csi_proxy_client::wire::CALLER_HEADER)
        .map(|v| percent_encoding::percent_decode(v.as_bytes()).decode_utf8_lossy().into_owned());
    let Some(caller) = caller else {
        return Err(Failure::Other(anyhow::anyhow!(
            "{endpoint} does not say who it takes callers to be (no {} header: a daemon without caller \
             identity, such as upstream's)",
            csi_proxy_client::wire::CALLER_HEADER
        )));
    };
    if ctx.json {
        println!("{}", term::json_pretty(&serde_json::json!({"caller": caller, "endpoint": endpoint})));
    } else {
        println!("{}", term::shown(&caller, term::VALUE));
    }
    Ok(())
}

/// The header every answer of csi-proxy carries, naming its version (crates/transport).
const VERSION_HEADER: &str = "csi-proxy-version";

/// A call ready to send: its method, its request and how it is named in messages.
struct Prepared {
    method: prost_reflect::MethodDescriptor,
    request: prost_reflect::DynamicMessage,
    what: String,
    /// Sent as a dry run (a mutating method with -dry-run).
    dry_run: bool,
}

/// Most a request read from standard input or a file may hold.
const MAX_REQUEST: u64 = 1 << 20;

/// Reads the request (`-` standard input, `@FILE` a file, else the argument itself: the first
/// two keep passwords and CHAP secrets out of the command line, where `ps` shows them) and, for
/// a mutating method, asks for confirmation.
fn prepare_call(
    api: csi_proxy_client::Api,
    method: &str,
    request: &str,
    yes: bool,
    dry_run: bool,
) -> Result<Prepared, Failure> {
    let pool = dynamic::pool();
    // An unknown method, a request file that can't be read, a request that is too large or not
    // the method's JSON: usage errors (exit status 2), nothing was sent.
    let usage = |e: anyhow::Error| Failure::Usage(format!("{e:#}"));
    let m = dynamic::method(&pool, &api, method).map_err(usage)?;
    let (text, from_stdin) = match request {
        "-" => (read_bounded(std::io::stdin().lock(), "standard input")?, true),
        _ => match request.strip_prefix('@') {
            Some(file) => {
                let f = std::fs::File::open(file)
                    .with_context(|| format!("opening the request file {:?}", bounded(file)))
                    .map_err(usage)?;
                (read_bounded(f, file)?, false)
            }
            None => (request.to_string(), false),
        },
    };
    let req = dynamic::request(&m, &text).map_err(usage)?;
    let what = format!("{}/{}", api.service_name(), m.name());
    // A dry run changes nothing: nothing to confirm.
    let dry_run = dry_run && !dynamic::is_read_only(m.name());
    if !dynamic::is_read_only(m.name()) && !yes && !dry_run {
        if from_stdin {
            return Err(Failure::Refused(format!(
                "{what} changes the host and its request came from standard input, so there is no terminal \
                 to confirm it on; add --yes to run it"
            )));
        }
        confirm(&what, &dynamic::redacted(dynamic::to_json(&req)))?;
    }
    Ok(Prepared { method: m, request: req, what, dry_run })
}

/// All of `from`, as UTF-8, refusing more than [`MAX_REQUEST`] bytes (a usage error).
fn read_bounded(from: impl std::io::Read, name: &str) -> Result<String, Failure> {
    let mut text = String::new();
    let name = bounded(name);
    from.take(MAX_REQUEST + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading the request from {name}"))
        .map_err(|e| Failure::Usage(format!("{e:#}")))?;
    if text.len() as u64 > MAX_REQUEST {
        return Err(Failure::Usage(format!("the request in {name} is larger than {MAX_REQUEST} bytes")));
    }
    Ok(text)
}

/// At most [`term::VALUE`] characters of `s`, for quoting what was given in a message.
fn bounded(s: &str) -> String {
    term::bounded(s, term::VALUE).into_owned()
}

async fn call(ctx: &Ctx, api: csi_proxy_client::Api, p: Prepared) -> Result<(), Failure> {
    let channel = ctx.connect(api).await?;
    if p.dry_run {
        return dry_run(ctx, api, channel, p).await;
    }
    let answer = dynamic::call(channel, &p.method, p.request).await.map_err(rpc(p.what))?;
    println!("{}", term::json_pretty(&dynamic::to_json(&answer)));
    Ok(())
}

/// A dry run of a mutating call: sent only to a daemon that lists `dry-run` among its features
/// (any other would do the work); prints the plan.
async fn dry_run(
    ctx: &Ctx,
    api: csi_proxy_client::Api,
    channel: csi_proxy_client::Channel,
    p: Prepared,
) -> Result<(), Failure> {
    use csi_proxy_client::wire::{DRY_RUN_METADATA, FEATURES_HEADER, PLAN_METADATA};
    // FEATURES_HEADER: named in the refusal.
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let endpoint = ctx.connector.endpoint(&api);
    let headers = match HealthClient::new(channel.clone()).check(HealthCheckRequest { service: String::new() }).await {
        Ok(r) => r.metadata().clone(),
        Err(s) => s.metadata().clone(),
    };
    if !dynamic::understands_dry_run(&headers) {
        return Err(Failure::Refused(format!(
            "{} does not say it understands dry runs (its answers carry no {FEATURES_HEADER}: dry-run): it would \
             run {} for real, so nothing was sent",
            term::shown(&endpoint, term::VALUE),
            p.what
        )));
    }
    let mut req = tonic::Request::new(p.request);
    req.metadata_mut().insert(DRY_RUN_METADATA, tonic::metadata::MetadataValue::from_static("true"));
    let answer = match dynamic::call_with(channel, &p.method, req).await {
        Ok(a) => a,
        Err(s) if s.metadata().get(DRY_RUN_METADATA).is_none_or(|v| v != "true") => {
            return Err(Failure::Other(anyhow::anyhow!(
                "{}: code {:?}: {} (the answer is not marked {DRY_RUN_METADATA}: true; the daemon may have tried the call for real)",
                p.what,
                s.code(),
                term::shown(s.message(), 300)
            )))
        }
        Err(s) => return Err(rpc(p.what.clone())(s)),
    };
    let meta = answer.metadata();
    if meta.get(DRY_RUN_METADATA).is_none_or(|v| v != "true") {
        return Err(Failure::Other(anyhow::anyhow!(
            "{} answered without {DRY_RUN_METADATA}: true; it may have run the call for real",
            p.what
        )));
    }
    let plan = meta
        .get(PLAN_METADATA)
        .map(|v| percent_encoding::percent_decode(v.as_bytes()).decode_utf8_lossy().into_owned())
        .unwrap_or_default();
    let out = serde_json::json!({"dry_run": true, "method": p.what, "plan": plan});
    println!("{}", term::json_pretty(&out));
    Ok(())
}

/// Asks on the terminal before a call that changes the host; without a terminal, refuses.
fn confirm(what: &str, request: &serde_json::Value) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::Refused(format!(
            "{what} changes the host and there is no terminal to confirm it on; add --yes to run it"
        )));
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{what} changes the host. Request: {}\nRun it? [y/N] ", term::json(request));
    let _ = err.flush();
    let mut line = String::new();
    stdin.lock().read_line(&mut line).context("reading the answer")?;
    if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        Err(Failure::Refused(format!("{what} not run: not confirmed")))
    }
}
