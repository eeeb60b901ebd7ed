//! `csi-proxyctl`: the operator's command line for a running csi-proxy. It talks to the daemon
//! the way a CSI driver does (the named pipes on Windows, the socket directory on Linux), through
//! the `csi-proxy-client` crate; `csi-proxyctl --help` describes the commands.

mod args;
mod dynamic;
mod list;
mod table;

use anyhow::Context as _;
use args::{Command, Parsed};
use csi_proxy_client::{Connector, Status};
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

/// Exit codes: 0 done, 1 a call or connection failed, 2 a usage error or a refused call.
const FAILED: u8 = 1;
const USAGE: u8 = 2;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args::parse(&argv) {
        Ok(Parsed::Help) => {
            print!("{}", args::USAGE_TEXT);
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("csi-proxyctl {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Run(o)) => o,
        Err(e) => {
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
        Err(Failure::Refused(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(USAGE)
        }
        Err(Failure::Rpc { what, status }) => {
            // The code as gRPC names it, then the daemon's own message.
            eprintln!("error: {what}: code {:?} ({}): {}", status.code(), status.code() as i32, status.message());
            ExitCode::from(FAILED)
        }
        Err(Failure::Other(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(FAILED)
        }
    }
}

pub enum Failure {
    /// A mutating call that was not confirmed.
    Refused(String),
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

    /// Prints `rows` under `header` as an aligned table, or `json` with --json.
    pub fn print(&self, header: &[&str], rows: Vec<Vec<String>>, json: serde_json::Value) {
        if self.json {
            println!("{}", serde_json::to_string_pretty(&json).unwrap_or_default());
        } else {
            print!("{}", table::render(header, &rows));
        }
    }
}

async fn run(o: args::Options) -> Result<(), Failure> {
    #[allow(unused_mut)]
    let mut connector = Connector::new();
    #[cfg(unix)]
    if let Some(dir) = &o.socket_dir {
        connector = connector.socket_dir(dir);
    }
    let ctx = Ctx { connector, json: o.json, timeout: o.timeout };
    let work = async {
        match o.command {
            Command::Apis => list::apis(&ctx).await,
            Command::Disks => list::disks(&ctx).await,
            Command::Volumes => list::volumes(&ctx).await,
            Command::IscsiPortals => list::iscsi_portals(&ctx).await,
            Command::BiosSerial => list::bios_serial(&ctx).await,
            Command::Service(name) => list::service(&ctx, &name).await,
            Command::Methods(api) => methods(&ctx, api),
            Command::Call { api, method, request } => call(&ctx, api, &method, &request, o.yes).await,
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
            rows.push(vec![format!("{}/{}", api.group, api.version), m.name().to_string(), kind.to_string()]);
            json.push(serde_json::json!({
                "api": format!("{}/{}", api.group, api.version),
                "method": m.name(),
                "mutating": kind == "mutating",
                "request": m.input().full_name(),
            }));
        }
    }
    ctx.print(&["API", "METHOD", "KIND"], rows, json.into());
    Ok(())
}

async fn call(ctx: &Ctx, api: csi_proxy_client::Api, method: &str, request: &str, yes: bool) -> Result<(), Failure> {
    let pool = dynamic::pool();
    let m = dynamic::method(&pool, &api, method)?;
    let req = dynamic::request(&m, request)?;
    let what = format!("{}/{}", api.service_name(), m.name());
    if !dynamic::is_read_only(m.name()) && !yes {
        confirm(&what, &dynamic::to_json(&req))?;
    }
    let channel = ctx.connect(api).await?;
    let answer = dynamic::call(channel, &m, req).await.map_err(rpc(what))?;
    let text = serde_json::to_string_pretty(&dynamic::to_json(&answer)).context("printing the answer")?;
    println!("{text}");
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
    let _ = write!(err, "{what} changes the host. Request: {request}\nRun it? [y/N] ");
    let _ = err.flush();
    let mut line = String::new();
    stdin.lock().read_line(&mut line).context("reading the answer")?;
    if matches!(line.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        Err(Failure::Refused(format!("{what} not run: not confirmed")))
    }
}
