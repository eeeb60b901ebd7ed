//! Who a Windows named pipe's client is: the decisions, over [`PipeClientOs`] (the real calls in
//! `caller/windows.rs`; a scripted one in the tests, which run on Linux too).
//!
//! **The user: the client's token first, then its process's.** Microsoft documents two ways to
//! learn a pipe client's user, and each has its limit:
//! - `ImpersonateNamedPipeClient` + `OpenThreadToken` + `RevertToSelf`: the token the named-pipe
//!   file system holds for the client. It needs no access to the client's process, does not go
//!   through a pid (which "uniquely identifies [a process] until [it] terminates", and may be
//!   another process's after), and outlives the client process. But the contract is that the
//!   thread impersonates "the security context of the last message read from the pipe", and
//!   ERROR_CANNOT_IMPERSONATE is documented as "Unable to impersonate using a named pipe until
//!   data has been read from that pipe": we identify a client at accept, before reading, so
//!   the call may be refused. A client may also open the pipe with SECURITY_ANONYMOUS
//!   (`SECURITY_SQOS_PRESENT`), and OpenThreadToken then fails (ERROR_CANT_OPEN_ANONYMOUS).
//! - `GetNamedPipeClientProcessId` + `OpenProcess` + `OpenProcessToken`: needs no data, but
//!   names a process by pid, so it is the client only while the client runs, and the process
//!   may refuse to be opened.
//!
//! So: the user is the client token's when the pipe gives it, else the process token's; the
//! process (image, container) is kept only when it is shown to be the client: it still runs
//! once everything is read and the pipe is still connected (a client that exited has closed
//! its end, unless it gave its handle to another process), and, when both tokens were read,
//! they name the same user (else the pid is someone else's or the client was impersonating:
//! the token's user is kept, the rest is unknown). A process that cannot be opened still has
//! its user from the client token, so it is one principal across its connections, not a new
//! unknown one each time.
//!
//! **The container.** A process-isolated Windows container's processes run in its server silo,
//! which is a job object; so a process in no job object (`IsProcessInJob(process, NULL)`) is in
//! no container: [`Isolation::Host`]. For a process in a job, the host compute service (HCS,
//! computecore.dll) is asked: `HcsEnumerateComputeSystems`, then for each compute system of
//! type `Container` `HcsOpenComputeSystem` and `HcsGetComputeSystemProperties` with the
//! property query `{"PropertyTypes":["ProcessList"]}`; the one whose process list holds the pid
//! is the container, named by its ID (hcsshim creates a process-isolated container's compute
//! system with the container's ID, which is containerd's CRI container ID). Process IDs are the
//! host's inside a process-isolated container (Windows has no PID namespaces), and the process
//! is held open and checked running after the lists are read, so its pid named it throughout.
//! A process in a job that no compute system lists is a host process in a job: a HostProcess
//! container (hcsshim runs those as a job object of the host, no compute system), an ssh
//! session, a service's job: [`Isolation::Host`], with its image and user, which is the truth
//! for a policy (it sees and can do what the host's processes can). Hyper-V isolated
//! containers' processes run in a utility VM and cannot be a host pipe's client. Anything that
//! could not be asked is [`Isolation::Unknown`] with why.

use csi_proxy_wire::{Caller, Isolation};
use std::io;
use std::time::{Duration, Instant};

/// How long the compute service is waited for, all its answers for one connection together.
pub const HCS_BUDGET: Duration = Duration::from_secs(2);

/// The compute systems asked for their process lists at most (a node runs a few hundred
/// containers at most: each pod has its sandbox's and one per container).
pub const MAX_COMPUTE_SYSTEMS: usize = 512;

/// The longest text kept from an OS answer in a reason.
const MAX_TEXT: usize = 200;

/// The longest container ID accepted from HCS (containerd's are 64 hex digits).
const MAX_ID: usize = 128;

/// The OS calls that identify a pipe's client. One value per connection: the pipe is implied.
pub trait PipeClientOs {
    /// An open process, closed on drop.
    type Process;
    /// GetNamedPipeClientProcessId.
    fn client_pid(&self) -> io::Result<u32>;
    /// The user SID (`S-1-…`) of the client's token as the pipe holds it
    /// (ImpersonateNamedPipeClient, OpenThreadToken, GetTokenInformation(TokenUser),
    /// RevertToSelf).
    fn client_token_user(&self) -> io::Result<String>;
    /// OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION or more, and SYNCHRONIZE).
    fn open_process(&self, pid: u32) -> io::Result<Self::Process>;
    /// The user SID of the process's primary token (OpenProcessToken).
    fn process_token_user(&self, p: &Self::Process) -> io::Result<String>;
    /// The process's image path (QueryFullProcessImageNameW).
    fn image(&self, p: &Self::Process) -> io::Result<String>;
    /// Whether the process is in any job object (IsProcessInJob with no job).
    fn in_any_job(&self, p: &Self::Process) -> io::Result<bool>;
    /// Whether the process has not exited (WaitForSingleObject with no wait).
    fn still_running(&self, p: &Self::Process) -> io::Result<bool>;
    /// Whether the client end of the pipe is still open (PeekNamedPipe).
    fn client_connected(&self) -> io::Result<bool>;
    /// HcsEnumerateComputeSystems's result document: a JSON array of compute system properties.
    fn compute_systems(&self, timeout: Duration) -> io::Result<String>;
    /// HcsGetComputeSystemProperties's result document for a ProcessList query of compute
    /// system `id`.
    fn process_list(&self, id: &str, timeout: Duration) -> io::Result<String>;
}

/// The client of the pipe `os` stands for.
pub fn identify<O: PipeClientOs>(os: &O) -> Caller {
    let Ok(pid) = os.client_pid() else { return Caller::default() };
    let mut caller = Caller { pid: Some(pid), ..Caller::default() };
    let token_user = os.client_token_user().ok();
    let process = match os.open_process(pid) {
        Ok(p) => p,
        Err(e) => {
            caller.user = token_user;
            caller.isolation = Some(unknown(format!("process {pid} could not be opened: {}", text(&e))));
            return caller;
        }
    };
    let process_user = os.process_token_user(&process).ok();
    if let (Some(t), Some(p)) = (&token_user, &process_user) {
        if t != p {
            caller.isolation = Some(unknown(format!(
                "the pipe's client token is {} but process {pid}'s is {}: that process may not be the client",
                bounded(t),
                bounded(p)
            )));
            caller.user = token_user;
            return caller;
        }
    }
    let exe = os.image(&process).ok();
    let isolation = container(os, &process, pid);
    // Read last: if the process still runs now, its pid named it all along.
    let verified = match (os.still_running(&process), os.client_connected()) {
        (Ok(true), Ok(true)) => Ok(()),
        (Ok(false), _) => Err(format!("process {pid} exited while it was identified")),
        (_, Ok(false)) => Err(format!("the client of process {pid} disconnected while it was identified")),
        (Err(e), _) | (_, Err(e)) => {
            Err(format!("whether process {pid} is still the client could not be told: {}", text(&e)))
        }
    };
    match verified {
        Ok(()) => {
            caller.user = token_user.or(process_user);
            caller.exe = exe;
            caller.isolation = Some(isolation);
        }
        Err(why) => {
            caller.user = token_user;
            caller.isolation = Some(unknown(why));
        }
    }
    caller
}

/// Whether process `pid` runs in a container, and which.
fn container<O: PipeClientOs>(os: &O, process: &O::Process, pid: u32) -> Isolation {
    match os.in_any_job(process) {
        Err(e) => unknown(format!("IsProcessInJob of process {pid} failed: {}", text(&e))),
        // A container's processes are in its silo, a job object.
        Ok(false) => Isolation::Host,
        Ok(true) => compute_system_of(os, pid),
    }
}

fn compute_system_of<O: PipeClientOs>(os: &O, pid: u32) -> Isolation {
    let deadline = Instant::now() + HCS_BUDGET;
    let ids = match os.compute_systems(HCS_BUDGET).and_then(|doc| containers(&doc)) {
        Ok(ids) => ids,
        Err(e) => {
            return unknown(format!(
                "process {pid} is in a job object, and the host compute service could not be asked which container holds it: {}",
                text(&e)
            ));
        }
    };
    if ids.len() > MAX_COMPUTE_SYSTEMS {
        return unknown(format!("the host has {} containers, more than the {MAX_COMPUTE_SYSTEMS} asked", ids.len()));
    }
    let (mut holders, mut failed) = (Vec::new(), Vec::new());
    for id in &ids {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            failed.push(format!("no answer within {HCS_BUDGET:?}"));
            break;
        }
        match checked_id(id).and_then(|id| os.process_list(id, left)).and_then(|doc| pids(&doc)) {
            Ok(pids) if pids.contains(&pid) => holders.push(id.as_str()),
            Ok(_) => {}
            Err(e) => failed.push(format!("{}: {}", bounded(id), text(&e))),
        }
    }
    match holders.as_slice() {
        [one] => Isolation::Container { id: (*one).to_string() },
        // In a job, but in no container's process list: a host process in a job object.
        [] if failed.is_empty() => Isolation::Host,
        [] => unknown(format!(
            "process {pid} is in a job object and in none of the containers that answered; {} did not (first: {})",
            failed.len(),
            failed[0]
        )),
        many => unknown(format!(
            "process {pid} is in the process lists of {} containers: {}",
            many.len(),
            bounded(&many.join(", "))
        )),
    }
}

/// The IDs of the compute systems of type `Container` in HcsEnumerateComputeSystems's document
/// (an array of compute system properties: `Id`, `SystemType`, …).
fn containers(doc: &str) -> io::Result<Vec<String>> {
    let value: serde_json::Value =
        serde_json::from_str(doc).map_err(|e| bad(format!("not JSON ({e}): {}", bounded(doc))))?;
    let systems = value.as_array().ok_or_else(|| bad(format!("not a JSON array: {}", bounded(doc))))?;
    let mut ids = Vec::new();
    for s in systems {
        let ty = s.get("SystemType").and_then(|t| t.as_str());
        if !ty.is_some_and(|t| t.eq_ignore_ascii_case("Container")) {
            continue; // a VM (a Hyper-V isolated container's utility VM): no host process is in it
        }
        match s.get("Id").and_then(|i| i.as_str()) {
            Some(id) => ids.push(id.to_string()),
            None => return Err(bad(format!("a container without an Id: {}", bounded(&s.to_string())))),
        }
    }
    Ok(ids)
}

/// The process IDs in a ProcessList properties document (`{"ProcessList":[{"ProcessId":…}]}`).
fn pids(doc: &str) -> io::Result<Vec<u32>> {
    let value: serde_json::Value =
        serde_json::from_str(doc).map_err(|e| bad(format!("not JSON ({e}): {}", bounded(doc))))?;
    let list = value.get("ProcessList").and_then(|l| l.as_array());
    let list = list.ok_or_else(|| bad(format!("no ProcessList array: {}", bounded(doc))))?;
    list.iter()
        .map(|p| {
            let id = p.get("ProcessId").and_then(|i| i.as_u64()).and_then(|i| u32::try_from(i).ok());
            id.ok_or_else(|| bad(format!("a process without a ProcessId: {}", bounded(&p.to_string()))))
        })
        .collect()
}

/// `id` if it can be a container's ID (what becomes a [`Caller`]'s and is asked of the runtime).
fn checked_id(id: &str) -> io::Result<&str> {
    let ok =
        !id.is_empty() && id.len() <= MAX_ID && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@{}".contains(&b));
    if ok {
        Ok(id)
    } else {
        Err(bad(format!("not a container ID: {:?}", bounded(id))))
    }
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// The pieces of `why` from the OS are [`bounded`] already; the whole is cut to a length.
fn unknown(why: String) -> Isolation {
    let mut why = why;
    if let Some((at, _)) = why.char_indices().nth(3 * MAX_TEXT) {
        why.truncate(at);
        why.push('…');
    }
    Isolation::Unknown { why }
}

fn text(e: &io::Error) -> String {
    bounded(&e.to_string())
}

/// At most [`MAX_TEXT`] characters of `s`, control characters and quotes escaped (so at most
/// a few times that once escaped).
fn bounded(s: &str) -> String {
    let mut out: String = s.chars().take(MAX_TEXT).flat_map(char::escape_debug).collect();
    if s.chars().nth(MAX_TEXT).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests;
