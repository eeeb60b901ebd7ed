//! The decisions over a scripted OS.

use super::*;
use crate::admission::CallerKey;
use std::cell::RefCell;
use std::collections::HashMap;

const PID: u32 = 4120;
const ADMIN: &str = "S-1-5-93-2-1"; // ContainerAdministrator
const SYSTEM: &str = "S-1-5-18";
const A: &str = "3f2a9c0b7d1e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c";
const B: &str = "9b1e0f2a3c4d5e6f708192a3b4c5d6e7f8091a2b3c3f2a9c0b7d1e4f5a6b7c8d";

/// What each call answers; `Err` texts stand for the OS's errors.
struct Scripted {
    token: Result<&'static str, &'static str>,
    open: Result<(), &'static str>,
    process_user: Result<&'static str, &'static str>,
    in_job: Result<bool, &'static str>,
    running: bool,
    connected: bool,
    systems: Result<String, &'static str>,
    lists: HashMap<String, Result<String, &'static str>>,
    /// The compute systems whose process list was asked for.
    asked: RefCell<Vec<String>>,
}

fn host() -> Scripted {
    Scripted {
        token: Ok(SYSTEM),
        open: Ok(()),
        process_user: Ok(SYSTEM),
        in_job: Ok(false),
        running: true,
        connected: true,
        systems: Err("not to be asked"),
        lists: HashMap::new(),
        asked: RefCell::default(),
    }
}

fn list(pids: &[u32]) -> Result<String, &'static str> {
    let items: Vec<String> = pids.iter().map(|p| format!(r#"{{"ProcessId":{p},"ImageName":"x.exe"}}"#)).collect();
    Ok(format!(r#"{{"Id":"x","ProcessList":[{}]}}"#, items.join(",")))
}

/// A process of container B, which the node's HCS lists with A and a utility VM.
fn in_container() -> Scripted {
    let systems = format!(
        r#"[{{"Id":"{A}","SystemType":"Container","Owner":"containerd-shim-runhcs-v1.exe"}},
            {{"Id":"{B}@vm","SystemType":"VirtualMachine"}},
            {{"Id":"{B}","SystemType":"Container"}}]"#
    );
    let lists = HashMap::from([(A.to_string(), list(&[100, 101])), (B.to_string(), list(&[200, PID]))]);
    Scripted { token: Ok(ADMIN), process_user: Ok(ADMIN), in_job: Ok(true), systems: Ok(systems), lists, ..host() }
}

fn err(what: &str) -> io::Error {
    io::Error::other(what.to_string())
}

impl PipeClientOs for Scripted {
    type Process = ();
    fn client_pid(&self) -> io::Result<u32> {
        Ok(PID)
    }
    fn client_token_user(&self) -> io::Result<String> {
        self.token.map(str::to_string).map_err(err)
    }
    fn open_process(&self, pid: u32) -> io::Result<()> {
        assert_eq!(pid, PID);
        self.open.map_err(err)
    }
    fn process_token_user(&self, _: &()) -> io::Result<String> {
        self.process_user.map(str::to_string).map_err(err)
    }
    fn image(&self, _: &()) -> io::Result<String> {
        Ok(r"C:\Program Files\driver\driver.exe".into())
    }
    fn in_any_job(&self, _: &()) -> io::Result<bool> {
        self.in_job.map_err(err)
    }
    fn still_running(&self, _: &()) -> io::Result<bool> {
        Ok(self.running)
    }
    fn client_connected(&self) -> io::Result<bool> {
        Ok(self.connected)
    }
    fn compute_systems(&self, timeout: Duration) -> io::Result<String> {
        assert!(timeout <= HCS_BUDGET);
        self.systems.clone().map_err(err)
    }
    fn process_list(&self, id: &str, timeout: Duration) -> io::Result<String> {
        assert!(timeout <= HCS_BUDGET && !timeout.is_zero());
        self.asked.borrow_mut().push(id.to_string());
        self.lists.get(id).cloned().unwrap_or(Err("HCS_E_SYSTEM_NOT_FOUND")).map_err(err)
    }
}

fn why(c: &Caller) -> &str {
    match &c.isolation {
        Some(Isolation::Unknown { why }) => why,
        other => panic!("not unknown: {other:?}"),
    }
}

#[test]
fn a_process_in_no_job_is_host_with_its_image_and_user() {
    let c = identify(&host());
    assert_eq!(c.pid, Some(PID));
    assert_eq!(c.user.as_deref(), Some(SYSTEM));
    assert_eq!(c.exe.as_deref(), Some(r"C:\Program Files\driver\driver.exe"));
    assert_eq!(c.isolation, Some(Isolation::Host));
}

#[test]
fn a_process_that_cannot_be_opened_is_still_its_tokens_user() {
    let os = Scripted { token: Ok(ADMIN), open: Err("Access is denied. (os error 5)"), ..host() };
    let c = identify(&os);
    assert_eq!(c.user.as_deref(), Some(ADMIN), "the user comes from the client's token");
    assert_eq!(c.exe, None);
    assert!(why(&c).contains("process 4120 could not be opened") && why(&c).contains("os error 5"), "{}", why(&c));
    // One principal across its connections, not a new unknown one per connection.
    assert_eq!(CallerKey::of(&c), CallerKey::Sid(ADMIN.into()));
}

#[test]
fn without_the_client_token_the_process_token_names_the_user() {
    // ERROR_CANNOT_IMPERSONATE: nothing has been read from the pipe yet.
    let os = Scripted { token: Err("(os error 1368)"), process_user: Ok(ADMIN), ..host() };
    let c = identify(&os);
    assert_eq!(c.user.as_deref(), Some(ADMIN));
    assert_eq!(c.isolation, Some(Isolation::Host));
    assert!(c.exe.is_some());
}

#[test]
fn tokens_that_disagree_keep_the_clients_user_and_trust_nothing_of_the_process() {
    let os = Scripted { token: Ok(ADMIN), process_user: Ok(SYSTEM), ..in_container() };
    let c = identify(&os);
    assert_eq!(c.user.as_deref(), Some(ADMIN));
    assert_eq!(c.exe, None);
    assert!(why(&c).contains(ADMIN) && why(&c).contains(SYSTEM), "{}", why(&c));
    assert!(os.asked.borrow().is_empty(), "the process is not the client: its container is not asked for");
}

#[test]
fn a_process_that_exits_or_disconnects_while_identified_is_not_trusted() {
    let gone = Scripted { running: false, token: Err("(os error 1368)"), ..in_container() };
    let c = identify(&gone);
    assert!(why(&c).contains("exited"), "{}", why(&c));
    assert_eq!((c.exe, c.user), (None, None), "what was read of a pid that may be another process's is dropped");
    let closed = Scripted { connected: false, ..in_container() };
    let c = identify(&closed);
    assert!(why(&c).contains("disconnected"), "{}", why(&c));
    assert_eq!(c.user.as_deref(), Some(ADMIN), "the client token's user is the client's whatever its process does");
}

#[test]
fn a_containers_process_is_named_by_the_compute_system_that_lists_it() {
    let os = in_container();
    let c = identify(&os);
    assert_eq!(c.isolation, Some(Isolation::Container { id: B.into() }));
    assert_eq!(c.user.as_deref(), Some(ADMIN));
    assert_eq!(*os.asked.borrow(), [A, B], "the utility VM is not asked");
}

#[test]
fn a_process_in_a_job_that_no_container_lists_is_host() {
    // A HostProcess container (a job object of the host), an ssh session.
    let os = Scripted { lists: HashMap::from([(A.into(), list(&[1])), (B.into(), list(&[2]))]), ..in_container() };
    assert_eq!(identify(&os).isolation, Some(Isolation::Host));
    let none = Scripted { systems: Ok("[]".into()), ..in_container() };
    assert_eq!(identify(&none).isolation, Some(Isolation::Host));
}

#[test]
fn what_could_not_be_asked_is_unknown_with_why() {
    let no_hcs = Scripted { systems: Err("computecore.dll could not be loaded: (os error 126)"), ..in_container() };
    let c = identify(&no_hcs);
    assert!(why(&c).contains("process 4120 is in a job object") && why(&c).contains("computecore.dll"), "{}", why(&c));
    assert!(c.exe.is_some() && c.user.is_some(), "the process itself was told");

    let no_job_answer = Scripted { in_job: Err("(os error 5)"), ..host() };
    assert!(why(&identify(&no_job_answer)).contains("IsProcessInJob of process 4120"));

    // A silent container may be the one: unknown, naming it.
    let mut silent = in_container();
    silent.lists.insert(B.into(), Err("HCS_E_CONNECTION_TIMEOUT"));
    let c = identify(&silent);
    assert!(why(&c).contains(B) && why(&c).contains("HCS_E_CONNECTION_TIMEOUT"), "{}", why(&c));
    // ... but not when another lists the process.
    let mut other_silent = in_container();
    other_silent.lists.insert(A.into(), Err("HCS_E_CONNECTION_TIMEOUT"));
    assert_eq!(identify(&other_silent).isolation, Some(Isolation::Container { id: B.into() }));

    let mut twice = in_container();
    twice.lists.insert(A.into(), list(&[PID]));
    assert!(why(&identify(&twice)).contains("2 containers"));
}

#[test]
fn hcs_documents_that_are_not_as_documented_are_unknown_and_bounded() {
    let long = format!("{{\"x\":\"{}\n\"", "y".repeat(10_000));
    for doc in ["not json", "{}", r#"[{"SystemType":"Container"}]"#, long.as_str()] {
        let c = identify(&Scripted { systems: Ok(doc.into()), ..in_container() });
        assert!(why(&c).len() < 2_000 && !why(&c).contains('\n'), "{}", why(&c));
    }
    let weird = "a\"b\nc".repeat(100);
    let systems = format!(r#"[{{"Id":{},"SystemType":"Container"}}]"#, serde_json::Value::from(weird.clone()));
    let os = Scripted { systems: Ok(systems), ..in_container() };
    let c = identify(&os);
    assert!(why(&c).contains("not a container ID") && !why(&c).contains('\n') && why(&c).len() < 2_000, "{}", why(&c));
    assert!(os.asked.borrow().is_empty(), "an ID that cannot be one is not passed to HCS");
    let mut bad_list = in_container();
    bad_list.lists.insert(B.into(), Ok(r#"{"ProcessList":[{"ImageName":"x"}]}"#.into()));
    assert!(why(&identify(&bad_list)).contains("without a ProcessId"));

    let many: Vec<String> =
        (0..=MAX_COMPUTE_SYSTEMS).map(|n| format!(r#"{{"Id":"{n:064x}","SystemType":"Container"}}"#)).collect();
    let os = Scripted { systems: Ok(format!("[{}]", many.join(","))), ..in_container() };
    assert!(why(&identify(&os)).contains("more than the"));
    assert!(os.asked.borrow().is_empty());
}
