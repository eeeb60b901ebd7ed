//! Services on Linux, through systemd's `systemctl`: the decision logic (unit names, argv,
//! parsing of `systemctl show`, state mapping, dependents and `force`) independent of how the
//! command is run. The native Linux backend plugs in a runner that spawns the real `systemctl`;
//! tests plug in scripted ones (youki's Syscall pattern), so all of this runs in plain
//! `cargo test` on any machine.
//!
//! `systemctl` is always invoked with an argument vector, never through a shell, and the unit
//! name comes after `--`, after it was checked to be a valid systemd unit name.
//!
//! Mapping onto the API (whose enums are Windows' service control manager's):
//!
//! | `ActiveState`                       | `ServiceStatus` |
//! |-------------------------------------|-----------------|
//! | `active`, `reloading`, `refreshing` | Running         |
//! | `activating`                        | StartPending    |
//! | `deactivating`                      | StopPending     |
//! | `inactive`, `failed`                | Stopped         |
//! | anything else (`maintenance`, ...)  | Unknown         |
//!
//! | `UnitFileState` (or `LoadState=masked`)                     | `StartType` |
//! |-------------------------------------------------------------|-------------|
//! | `enabled`, `enabled-runtime`, `linked`, `linked-runtime`, `generated` | Automatic |
//! | `masked`, `masked-runtime`                                  | Disabled    |
//! | `disabled`, `static`, `indirect`, `alias`, `transient`, empty, other | Manual |
//!
//! (`Boot` and `System` are Windows driver start types and never come from systemd.) The display
//! name is the unit's `Description`, or its name when that is empty. `LoadState=not-found` for a
//! unit that is not running is NotFound.
//!
//! Dependents: the units systemd stops together with a unit are those that `Requires=`,
//! `Requisite=`, `BindsTo=` or are `PartOf=` it — its `RequiredBy`, `RequisiteOf`, `BoundBy` and
//! `ConsistsOf` properties — transitively. A plain stop refuses (FailedPrecondition naming them)
//! while any of them is active, instead of letting systemd take them down silently; with `force`
//! they are stopped first, dependents of dependents before their dependencies, then the unit. A
//! weak `Wants=` (e.g. `multi-user.target` of every enabled service) is not a dependency here.
//!
//! When there is no systemd (containers, CI: `systemctl` missing, or "System has not been booted
//! with systemd") that is a missing host capability, [`Error::FailedPrecondition`]; a bus that
//! can't be reached may come back, so that alone is [`Error::Unavailable`]. Never a fake success.
//! (gRPC clients read Unavailable as a broken connection and retry it.)

use crate::services::{dependents_running, refuse_unstoppable, stop_order};
use crate::types::{ServiceInfo, ServiceStatus, StartType};
use crate::{Error, Result, SystemHost};
use std::collections::BTreeMap;

/// The program every call runs.
pub const SYSTEMCTL: &str = "systemctl";

/// The unit types of systemd; a name ending in `.<one of these>` already has its suffix.
const UNIT_TYPES: &[&str] =
    &["service", "socket", "target", "device", "mount", "automount", "swap", "timer", "path", "slice", "scope"];
/// systemd's limit on unit names (`UNIT_NAME_MAX` minus the NUL).
const UNIT_NAME_MAX: usize = 255;
/// Properties read for one service.
const SERVICE_PROPERTIES: &str =
    "Id,LoadState,ActiveState,SubState,UnitFileState,Description,RequiredBy,RequisiteOf,BoundBy,ConsistsOf";
/// Properties that list the units systemd stops together with a unit.
const DEPENDENT_PROPERTIES: [&str; 4] = ["RequiredBy", "RequisiteOf", "BoundBy", "ConsistsOf"];

/// What a finished command printed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    /// Exit code; `None` when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// The system group's platform calls on Linux.
pub trait Runner: Send + Sync {
    /// Runs a program with an argument vector. `Err` means it could not be run at all (not
    /// installed: `NotFound`; did not finish in time: `TimedOut`).
    fn run(&self, program: &str, args: &[String]) -> std::io::Result<Output>;
    /// The machine's serial number as the firmware (DMI) reports it.
    fn bios_serial_number(&self) -> Result<String>;
}

/// The unit name for a service name from a request: a valid systemd unit name with `.service`
/// appended when it has no unit suffix. Anything else is InvalidArgument naming the value:
/// other unit types (`.socket`, `.mount`, ...) are not services, templates (`foo@.service`) cannot
/// be started, and a leading `-` could read as an option.
pub fn unit_name(name: &str) -> Result<String> {
    let bad = |why: &str| Error::invalid(format!("service name {name:?} is not a valid systemd unit name: {why}"));
    if name.is_empty() {
        return Err(bad("it is empty"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || ":-_.\\@".contains(*c))) {
        return Err(bad(&format!("{c:?} is not allowed (only ASCII letters, digits and : - _ . \\ @)")));
    }
    if name.starts_with('-') || name.starts_with('.') {
        return Err(bad("it must not start with '-' or '.'"));
    }
    let unit = match name.rsplit_once('.') {
        Some((_, "service")) => name.to_string(),
        Some((_, suffix)) if UNIT_TYPES.contains(&suffix) => {
            return Err(bad(&format!("it names a .{suffix} unit, not a service")));
        }
        _ => format!("{name}.service"),
    };
    if unit.len() > UNIT_NAME_MAX {
        return Err(bad(&format!("unit names are limited to {UNIT_NAME_MAX} characters")));
    }
    let prefix = &unit[..unit.len() - ".service".len()];
    if prefix.is_empty() {
        return Err(bad("the part before .service is empty"));
    }
    match prefix.split_once('@') {
        None => {}
        Some((template, instance)) => {
            if template.is_empty() {
                return Err(bad("nothing before '@'"));
            }
            if instance.is_empty() {
                return Err(bad("it is a template without an instance"));
            }
            if instance.contains('@') {
                return Err(bad("more than one '@'"));
            }
        }
    }
    Ok(unit)
}

/// The argument vector of `systemctl show` for a service's properties.
pub fn show_args(properties: &str, units: &[String]) -> Vec<String> {
    let mut v =
        vec!["show".to_string(), "--no-pager".to_string(), format!("--property={properties}"), "--".to_string()];
    v.extend(units.iter().cloned());
    v
}

/// The argument vector of `systemctl start` or `stop` for one unit.
pub fn control_args(verb: &str, unit: &str) -> Vec<String> {
    [verb, "--no-pager", "--no-ask-password", "--", unit].iter().map(|s| s.to_string()).collect()
}

/// `systemctl show` output: one map of `Key=Value` per unit, units separated by blank lines. A
/// value may contain `=`; lines without one are ignored.
pub fn parse_show(stdout: &str) -> Vec<BTreeMap<String, String>> {
    let mut units = Vec::new();
    let mut cur = BTreeMap::new();
    for line in stdout.lines() {
        if line.trim().is_empty() {
            if !cur.is_empty() {
                units.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            cur.insert(k.to_string(), v.to_string());
        }
    }
    if !cur.is_empty() {
        units.push(cur);
    }
    units
}

/// See the table in the module documentation.
pub fn status_of(active_state: &str) -> ServiceStatus {
    match active_state {
        "active" | "reloading" | "refreshing" => ServiceStatus::Running,
        "activating" => ServiceStatus::StartPending,
        "deactivating" => ServiceStatus::StopPending,
        "inactive" | "failed" => ServiceStatus::Stopped,
        _ => ServiceStatus::Unknown,
    }
}

/// See the table in the module documentation.
pub fn start_type_of(load_state: &str, unit_file_state: &str) -> StartType {
    if load_state == "masked" {
        return StartType::Disabled;
    }
    match unit_file_state {
        "enabled" | "enabled-runtime" | "linked" | "linked-runtime" | "generated" => StartType::Automatic,
        "masked" | "masked-runtime" => StartType::Disabled,
        _ => StartType::Manual,
    }
}

/// Whether a unit in `active_state` counts as running for the dependents check: everything but
/// stopped (pending states included, as Windows' `SERVICE_ACTIVE`).
pub fn is_active(active_state: &str) -> bool {
    !matches!(active_state, "inactive" | "failed" | "")
}

/// The properties of one unit, as `systemctl show` printed them.
#[derive(Debug, Clone, Default)]
struct Unit(BTreeMap<String, String>);

impl Unit {
    fn get(&self, key: &str) -> &str {
        self.0.get(key).map(String::as_str).unwrap_or("")
    }
    fn missing(&self) -> bool {
        self.get("LoadState") == "not-found" && !is_active(self.get("ActiveState"))
    }
    fn dependents(&self) -> Vec<String> {
        DEPENDENT_PROPERTIES.iter().flat_map(|p| self.get(p).split_whitespace()).map(str::to_string).collect()
    }
}

/// Service control through `systemctl` run by `R`.
pub struct Systemd<R> {
    runner: R,
}

/// The system group on Linux: services through systemd, the BIOS serial from DMI.
impl<R: Runner> SystemHost for Systemd<R> {
    fn get_bios_serial_number(&self) -> Result<String> {
        self.runner.bios_serial_number()
    }

    fn get_service(&self, name: &str) -> Result<ServiceInfo> {
        let unit = unit_name(name)?;
        let u = self.unit(name, &unit)?;
        let description = u.get("Description").trim();
        Ok(ServiceInfo {
            display_name: if description.is_empty() { unit.clone() } else { description.to_string() },
            start_type: start_type_of(u.get("LoadState"), u.get("UnitFileState")),
            status: status_of(u.get("ActiveState")),
        })
    }

    /// Already running is success. systemctl waits for the start job to finish.
    fn start_service(&self, name: &str) -> Result<()> {
        let unit = unit_name(name)?;
        let u = self.unit(name, &unit)?;
        if status_of(u.get("ActiveState")) == ServiceStatus::Running {
            return Ok(());
        }
        if u.get("LoadState") == "masked" {
            return Err(Error::precondition(format!(
                "service {name:?} cannot be started: systemd unit {unit} is masked (disabled)"
            )));
        }
        self.control("start", name, &unit)
    }

    /// Already stopped is success. Active dependents (see the module documentation) make a plain
    /// stop fail with FailedPrecondition; with `force` they are stopped first.
    fn stop_service(&self, name: &str, force: bool, may_stop: &dyn Fn(&str) -> bool) -> Result<()> {
        let unit = unit_name(name)?;
        let u = self.unit(name, &unit)?;
        if !is_active(u.get("ActiveState")) {
            return Ok(());
        }
        // The unit's canonical name (an alias resolves to it) is what dependents refer to.
        let id = match u.get("Id") {
            "" => unit.clone(),
            id => id.to_string(),
        };
        let first = u.dependents();
        let order = stop_order(&id, crate::services::same_unit_name, |n| {
            let deps = if n == id {
                first.clone()
            } else {
                self.units(&[n.to_string()])?.pop().unwrap_or_default().dependents()
            };
            self.active(&deps)
        })?;
        if !order.is_empty() && !force {
            return Err(dependents_running(name, &order));
        }
        refuse_unstoppable(name, &order, may_stop)?;
        for dep in &order {
            self.control("stop", dep, dep)?;
        }
        self.control("stop", name, &unit)
    }
}

impl<R: Runner> Systemd<R> {
    pub fn new(runner: R) -> Self {
        Systemd { runner }
    }

    pub fn runner(&self) -> &R {
        &self.runner
    }

    /// The properties of `unit`; NotFound naming `name` when systemd knows no such unit.
    fn unit(&self, name: &str, unit: &str) -> Result<Unit> {
        let u = self.units(&[unit.to_string()])?.pop().unwrap_or_default();
        if u.0.is_empty() {
            return Err(Error::internal(format!("systemctl show {unit} printed no properties")));
        }
        if u.missing() {
            return Err(Error::not_found(format!("service {name:?} not found (systemd has no unit {unit})")));
        }
        Ok(u)
    }

    fn units(&self, units: &[String]) -> Result<Vec<Unit>> {
        let args = show_args(SERVICE_PROPERTIES, units);
        let out = self.run(&args)?;
        Ok(parse_show(&out.stdout).into_iter().map(Unit).collect())
    }

    /// Those of `units` that are active.
    fn active(&self, units: &[String]) -> Result<Vec<String>> {
        if units.is_empty() {
            return Ok(Vec::new());
        }
        let out = self.run(&show_args("Id,ActiveState", units))?;
        let states = parse_show(&out.stdout);
        Ok(units
            .iter()
            .filter(|u| {
                states.iter().any(|s| s.get("Id") == Some(u) && is_active(s.get("ActiveState").map_or("", |v| v)))
            })
            .cloned()
            .collect())
    }

    fn control(&self, verb: &str, name: &str, unit: &str) -> Result<()> {
        self.run(&control_args(verb, unit)).map(drop).map_err(|e| match e {
            // The wording of upstream's timeout errors.
            Error::Internal(m) if m.contains("did not finish within") => {
                let goal = if verb == "start" { "become running" } else { "stop" };
                Error::internal(format!("timed out waiting for service {name:?} to {goal}: {m}"))
            }
            e => e,
        })
    }

    /// Runs `systemctl args`; a failure becomes the error kind its message tells.
    fn run(&self, args: &[String]) -> Result<Output> {
        let shown = format!("{SYSTEMCTL} {}", args.join(" "));
        let out = self.runner.run(SYSTEMCTL, args).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::FailedPrecondition(format!(
                "{SYSTEMCTL} is not installed: services on Linux are controlled through systemd ({e})"
            )),
            std::io::ErrorKind::TimedOut => {
                Error::internal(format!("{shown} did not finish within the time limit ({e})"))
            }
            _ => Error::internal(format!("cannot run {shown}: {e}")),
        })?;
        if out.code == Some(0) {
            return Ok(out);
        }
        let msg = out.stderr.trim();
        let exit = out.code.map_or("killed by a signal".to_string(), |c| format!("exit code {c}"));
        let text = format!("{shown} failed ({exit}): {msg}");
        let first_line = msg.lines().next().unwrap_or(msg);
        Err(if msg.contains(NOT_BOOTED) {
            Error::FailedPrecondition(format!(
                "systemd is not running on this host, so services cannot be queried or controlled: {first_line}"
            ))
        } else if unavailable(msg) {
            Error::Unavailable(format!(
                "systemd's bus cannot be reached, so services cannot be queried now: {first_line}"
            ))
        } else if msg.contains("not found") || msg.contains("not loaded") {
            Error::NotFound(text)
        } else if msg.contains("is masked") {
            Error::FailedPrecondition(text)
        } else if msg.contains("Access denied")
            || msg.contains("Interactive authentication required")
            || msg.contains("Permission denied")
        {
            Error::PermissionDenied(text)
        } else {
            Error::Internal(text)
        })
    }
}

/// systemctl's way of saying the host has no systemd at all.
const NOT_BOOTED: &str = "System has not been booted with systemd";

/// systemctl's ways of saying systemd's bus can't be reached.
fn unavailable(stderr: &str) -> bool {
    ["Failed to connect to bus", "Failed to connect to system scope bus", "Failed to get D-Bus connection"]
        .iter()
        .any(|m| stderr.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::any_service;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    fn ok(stdout: &str) -> std::io::Result<Output> {
        Ok(Output { code: Some(0), stdout: stdout.into(), stderr: String::new() })
    }

    fn failed(code: i32, stderr: &str) -> std::io::Result<Output> {
        Ok(Output { code: Some(code), stdout: String::new(), stderr: stderr.into() })
    }

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    /// Answers a fixed script and checks every argument vector against it, in order.
    struct Scripted {
        steps: Mutex<VecDeque<(Vec<String>, std::io::Result<Output>)>>,
    }

    impl Scripted {
        fn new(steps: Vec<(&str, std::io::Result<Output>)>) -> Self {
            Scripted { steps: Mutex::new(steps.into_iter().map(|(a, o)| (argv(a), o)).collect()) }
        }
        fn done(&self) {
            let left = self.steps.lock().unwrap();
            assert!(left.is_empty(), "steps not run: {:?}", left.iter().map(|s| s.0.join(" ")).collect::<Vec<_>>());
        }
    }

    impl Runner for Scripted {
        fn bios_serial_number(&self) -> Result<String> {
            Err(Error::internal("these tests control services only"))
        }
        fn run(&self, program: &str, args: &[String]) -> std::io::Result<Output> {
            assert_eq!(program, "systemctl");
            let (want, out) = self.steps.lock().unwrap().pop_front().unwrap_or_else(|| panic!("unexpected {args:?}"));
            assert_eq!(args, want, "argv");
            out
        }
    }

    const SHOW: &str = "show --no-pager --property=Id,LoadState,ActiveState,SubState,UnitFileState,Description,RequiredBy,RequisiteOf,BoundBy,ConsistsOf --";

    fn show_iscsid(active: &str, file_state: &str) -> String {
        format!(
            "Id=iscsid.service\nLoadState=loaded\nActiveState={active}\nSubState=running\n\
             UnitFileState={file_state}\nDescription=iSCSI initiator daemon (iscsid)\nRequiredBy=\nRequisiteOf=\n\
             BoundBy=\nConsistsOf=\n"
        )
    }

    #[test]
    fn unit_names() {
        assert_eq!(unit_name("iscsid").unwrap(), "iscsid.service");
        assert_eq!(unit_name("iscsid.service").unwrap(), "iscsid.service");
        assert_eq!(unit_name("getty@tty1").unwrap(), "getty@tty1.service");
        assert_eq!(unit_name("getty@tty1.service").unwrap(), "getty@tty1.service");
        let escaped = "systemd-fsck@dev-disk-by\\x2duuid-1.service";
        assert_eq!(unit_name(escaped).unwrap(), escaped);
        assert_eq!(unit_name("foo.bar").unwrap(), "foo.bar.service", "not a unit type: part of the name");
        assert_eq!(unit_name("a:b_c-d").unwrap(), "a:b_c-d.service");
        assert_eq!(unit_name(&"x".repeat(247)).unwrap().len(), 255);
        for (bad, why) in [
            ("", "empty"),
            ("a b", "' '"),
            ("a;reboot", "';'"),
            ("$(id)", "'$'"),
            ("a/b", "'/'"),
            ("ü", "'ü'"),
            ("a\nb", "'\\n'"),
            ("-x", "start with '-'"),
            ("--help", "start with '-'"),
            (".service", "start with"),
            ("docker.socket", ".socket unit"),
            ("local-fs.target", ".target unit"),
            ("var-lib.mount", ".mount unit"),
            ("getty@.service", "template"),
            ("getty@", "template"),
            ("@x", "nothing before"),
            ("a@b@c", "more than one"),
        ] {
            let e = unit_name(bad).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains(why) && m.contains(&format!("{bad:?}"))),
                "{bad:?}: {e}"
            );
        }
        assert!(unit_name(&"x".repeat(248)).unwrap_err().to_string().contains("255"));
    }

    #[test]
    fn argv_vectors() {
        assert_eq!(
            show_args("Id,ActiveState", &["a.service".into()]).join(" "),
            "show --no-pager --property=Id,ActiveState -- a.service"
        );
        assert_eq!(control_args("stop", "a.service").join(" "), "stop --no-pager --no-ask-password -- a.service");
    }

    #[test]
    fn show_output_parsing() {
        let u = parse_show("Id=a.service\nDescription=x = y\nnoise\n\nId=b.service\nActiveState=active\n\n\n");
        assert_eq!(u.len(), 2);
        assert_eq!(u[0]["Description"], "x = y");
        assert_eq!(u[1]["ActiveState"], "active");
        assert!(parse_show("").is_empty());
    }

    #[test]
    fn state_mapping() {
        use ServiceStatus as S;
        for (a, s) in [
            ("active", S::Running),
            ("reloading", S::Running),
            ("refreshing", S::Running),
            ("activating", S::StartPending),
            ("deactivating", S::StopPending),
            ("inactive", S::Stopped),
            ("failed", S::Stopped),
            ("maintenance", S::Unknown),
            ("", S::Unknown),
        ] {
            assert_eq!(status_of(a), s, "{a}");
        }
        use StartType as T;
        for (f, t) in [
            ("enabled", T::Automatic),
            ("enabled-runtime", T::Automatic),
            ("linked", T::Automatic),
            ("linked-runtime", T::Automatic),
            ("generated", T::Automatic),
            ("masked", T::Disabled),
            ("masked-runtime", T::Disabled),
            ("disabled", T::Manual),
            ("static", T::Manual),
            ("indirect", T::Manual),
            ("alias", T::Manual),
            ("transient", T::Manual),
            ("", T::Manual),
            ("bad", T::Manual),
        ] {
            assert_eq!(start_type_of("loaded", f), t, "{f}");
        }
        assert_eq!(start_type_of("masked", ""), T::Disabled);
    }

    #[test]
    fn get_service() {
        let r = Scripted::new(vec![(&format!("{SHOW} iscsid.service"), ok(&show_iscsid("active", "enabled")))]);
        let sd = Systemd::new(r);
        let info = sd.get_service("iscsid").unwrap();
        assert_eq!(
            info,
            ServiceInfo {
                display_name: "iSCSI initiator daemon (iscsid)".into(),
                start_type: StartType::Automatic,
                status: ServiceStatus::Running
            }
        );
        sd.runner().done();

        // Empty description: the unit name.
        let r = Scripted::new(vec![(
            &format!("{SHOW} x.service"),
            ok("Id=x.service\nLoadState=loaded\nActiveState=inactive\nUnitFileState=static\nDescription=\n"),
        )]);
        let info = Systemd::new(r).get_service("x.service").unwrap();
        assert_eq!(
            (info.display_name.as_str(), info.status, info.start_type),
            ("x.service", ServiceStatus::Stopped, StartType::Manual)
        );
    }

    #[test]
    fn missing_unit_is_not_found_and_bad_names_run_nothing() {
        let r = Scripted::new(vec![(
            &format!("{SHOW} nosuch.service"),
            ok("Id=nosuch.service\nLoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\nDescription=nosuch.service\n"),
        )]);
        let e = Systemd::new(r).get_service("nosuch").unwrap_err();
        assert!(matches!(&e, Error::NotFound(m) if m.contains("\"nosuch\"") && m.contains("nosuch.service")), "{e}");
        // Not found on disk but still running (unit file deleted): it exists.
        let r = Scripted::new(vec![(
            &format!("{SHOW} gone.service"),
            ok("Id=gone.service\nLoadState=not-found\nActiveState=active\nDescription=gone\n"),
        )]);
        assert_eq!(Systemd::new(r).get_service("gone").unwrap().status, ServiceStatus::Running);

        let sd = Systemd::new(Scripted::new(vec![]));
        for bad in ["a;b", "-h", "x y", "docker.socket"] {
            assert!(matches!(sd.get_service(bad), Err(Error::InvalidArgument(_))), "{bad}");
            assert!(matches!(sd.start_service(bad), Err(Error::InvalidArgument(_))), "{bad}");
            assert!(matches!(sd.stop_service(bad, true, &any_service), Err(Error::InvalidArgument(_))), "{bad}");
        }
        sd.runner().done();
    }

    #[test]
    fn no_systemd_is_a_failed_precondition_and_an_unreachable_bus_unavailable() {
        let booted = "System has not been booted with systemd as init system (PID 1). Can't operate.\nFailed to connect to bus: Host is down\n";
        for call in 0..3 {
            let r = Scripted::new(vec![(&format!("{SHOW} iscsid.service"), failed(1, booted))]);
            let sd = Systemd::new(r);
            let e = match call {
                0 => sd.get_service("iscsid").map(drop),
                1 => sd.start_service("iscsid"),
                _ => sd.stop_service("iscsid", false, &any_service),
            }
            .unwrap_err();
            assert!(
                matches!(&e, Error::FailedPrecondition(m) if m.contains("systemd is not running") && m.contains("PID 1")),
                "{e}"
            );
        }
        let r = Scripted::new(vec![(
            &format!("{SHOW} a.service"),
            failed(1, "Failed to connect to bus: No such file or directory"),
        )]);
        assert!(matches!(Systemd::new(r).get_service("a"), Err(Error::Unavailable(_))));
        let r = Scripted::new(vec![(&format!("{SHOW} a.service"), Err(std::io::ErrorKind::NotFound.into()))]);
        let e = Systemd::new(r).get_service("a").unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains("not installed")), "{e}");
    }

    #[test]
    fn start_runs_systemctl_start_only_when_needed() {
        let r = Scripted::new(vec![
            (&format!("{SHOW} iscsid.service"), ok(&show_iscsid("inactive", "disabled"))),
            ("start --no-pager --no-ask-password -- iscsid.service", ok("")),
        ]);
        let sd = Systemd::new(r);
        sd.start_service("iscsid").unwrap();
        sd.runner().done();
        // Already running: nothing to do.
        let r = Scripted::new(vec![(&format!("{SHOW} iscsid.service"), ok(&show_iscsid("active", "enabled")))]);
        let sd = Systemd::new(r);
        sd.start_service("iscsid").unwrap();
        sd.runner().done();
        // Masked: refused without trying.
        let r = Scripted::new(vec![(
            &format!("{SHOW} m.service"),
            ok("Id=m.service\nLoadState=masked\nActiveState=inactive\nUnitFileState=masked\n"),
        )]);
        let e = Systemd::new(r).start_service("m").unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains("masked")), "{e}");
    }

    #[test]
    fn start_and_stop_failures_keep_systemctl_message() {
        let job_failed = "Job for iscsid.service failed because the control process exited with error code.\nSee \"systemctl status iscsid.service\" and \"journalctl -xeu iscsid.service\" for details.\n";
        type Case = (std::io::Result<Output>, fn(&Error) -> bool, &'static str);
        let cases: Vec<Case> = vec![
            (failed(1, job_failed), |e| matches!(e, Error::Internal(_)), "control process exited"),
            (
                failed(4, "Failed to start iscsid.service: Access denied"),
                |e| matches!(e, Error::PermissionDenied(_)),
                "Access denied",
            ),
            (
                failed(1, "Failed to start iscsid.service: Interactive authentication required."),
                |e| matches!(e, Error::PermissionDenied(_)),
                "authentication",
            ),
            (
                failed(5, "Failed to start iscsid.service: Unit iscsid.service not found."),
                |e| matches!(e, Error::NotFound(_)),
                "not found",
            ),
            (
                failed(1, "Failed to start iscsid.service: Unit iscsid.service is masked."),
                |e| matches!(e, Error::FailedPrecondition(_)),
                "masked",
            ),
            (
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "killed after 30s")),
                |e| matches!(e, Error::Internal(_)),
                "timed out waiting for service \"iscsid\" to become running",
            ),
            (
                Ok(Output { code: None, ..Default::default() }),
                |e| matches!(e, Error::Internal(_)),
                "killed by a signal",
            ),
        ];
        for (out, kind, needle) in cases {
            let r = Scripted::new(vec![
                (&format!("{SHOW} iscsid.service"), ok(&show_iscsid("inactive", "enabled"))),
                ("start --no-pager --no-ask-password -- iscsid.service", out),
            ]);
            let e = Systemd::new(r).start_service("iscsid").unwrap_err();
            assert!(kind(&e) && e.to_string().contains(needle), "{needle}: {e:?}");
            assert!(e.to_string().contains("systemctl start --no-pager --no-ask-password -- iscsid.service"), "{e}");
        }
        let r = Scripted::new(vec![
            (&format!("{SHOW} iscsid.service"), ok(&show_iscsid("active", "enabled"))),
            (
                "stop --no-pager --no-ask-password -- iscsid.service",
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "30s")),
            ),
        ]);
        let e = Systemd::new(r).stop_service("iscsid", false, &any_service).unwrap_err();
        assert!(e.to_string().contains("timed out waiting for service \"iscsid\" to stop"), "{e}");
    }

    #[test]
    fn stop_without_dependents_and_when_already_stopped() {
        let r = Scripted::new(vec![
            (&format!("{SHOW} iscsid.service"), ok(&show_iscsid("active", "enabled"))),
            ("stop --no-pager --no-ask-password -- iscsid.service", ok("")),
        ]);
        let sd = Systemd::new(r);
        sd.stop_service("iscsid", false, &any_service).unwrap();
        sd.runner().done();
        for state in ["inactive", "failed"] {
            let r = Scripted::new(vec![(&format!("{SHOW} iscsid.service"), ok(&show_iscsid(state, "enabled")))]);
            let sd = Systemd::new(r);
            sd.stop_service("iscsid", true, &any_service).unwrap();
            sd.runner().done();
        }
    }

    /// The full argv sequence of a forced stop with one active and one inactive dependent.
    #[test]
    fn forced_stop_argv_sequence() {
        let r = Scripted::new(vec![
            (
                &format!("{SHOW} iscsid.service"),
                ok("Id=iscsid.service\nLoadState=loaded\nActiveState=active\nRequiredBy=open-iscsi.service idle.service\nBoundBy=\nConsistsOf=\n"),
            ),
            (
                "show --no-pager --property=Id,ActiveState -- open-iscsi.service idle.service",
                ok("Id=open-iscsi.service\nActiveState=active\n\nId=idle.service\nActiveState=inactive\n"),
            ),
            (&format!("{SHOW} open-iscsi.service"), ok("Id=open-iscsi.service\nLoadState=loaded\nActiveState=active\nRequiredBy=\n")),
            ("stop --no-pager --no-ask-password -- open-iscsi.service", ok("")),
            ("stop --no-pager --no-ask-password -- iscsid.service", ok("")),
        ]);
        let sd = Systemd::new(r);
        sd.stop_service("iscsid", true, &any_service).unwrap();
        sd.runner().done();
    }

    /// A small simulated systemd: units with states and `Requires=`-style reverse dependencies,
    /// answering `show`, `start`, `stop` as systemctl does, and recording what was run.
    #[derive(Default)]
    struct FakeSystemd {
        units: Mutex<BTreeMap<String, (String, Vec<String>)>>,
        log: Mutex<Vec<String>>,
    }

    impl FakeSystemd {
        fn with(units: &[(&str, &str, &[&str])]) -> Self {
            let f = FakeSystemd::default();
            for (n, state, deps) in units {
                f.units
                    .lock()
                    .unwrap()
                    .insert(n.to_string(), (state.to_string(), deps.iter().map(|s| s.to_string()).collect()));
            }
            f
        }
        fn state(&self, n: &str) -> String {
            self.units.lock().unwrap()[n].0.clone()
        }
        fn controls(&self) -> Vec<String> {
            self.log.lock().unwrap().iter().filter(|l| !l.starts_with("show")).cloned().collect()
        }
    }

    impl Runner for FakeSystemd {
        fn bios_serial_number(&self) -> Result<String> {
            Err(Error::internal("these tests control services only"))
        }
        fn run(&self, _program: &str, args: &[String]) -> std::io::Result<Output> {
            let dd = args.iter().position(|a| a == "--").expect("-- before unit names");
            let names = &args[dd + 1..];
            let mut units = self.units.lock().unwrap();
            let mut out = String::new();
            match args[0].as_str() {
                "show" => {
                    for n in names {
                        match units.get(n) {
                            Some((state, deps)) => out += &format!(
                                "Id={n}\nLoadState=loaded\nActiveState={state}\nUnitFileState=enabled\nDescription=D {n}\nRequiredBy={}\nBoundBy=\n\n",
                                deps.join(" ")
                            ),
                            None => out += &format!("Id={n}\nLoadState=not-found\nActiveState=inactive\n\n"),
                        }
                    }
                }
                verb @ ("start" | "stop") => {
                    assert_eq!(names.len(), 1);
                    let u = units.get_mut(&names[0]).expect("known unit");
                    u.0 = if verb == "start" { "active" } else { "inactive" }.into();
                }
                other => panic!("unexpected verb {other}"),
            }
            self.log.lock().unwrap().push(args.join(" "));
            ok(&out)
        }
    }

    #[test]
    fn force_semantics_against_a_simulated_systemd() {
        // iscsid <- mid <- leaf, iscsid <- off (inactive), iscsid <- other (active, no deps);
        // leaf also depends directly on iscsid.
        let fake = FakeSystemd::with(&[
            ("iscsid.service", "active", &["mid.service", "off.service", "other.service", "leaf.service"]),
            ("mid.service", "active", &["leaf.service"]),
            ("leaf.service", "activating", &[]),
            ("off.service", "inactive", &["mid.service"]),
            ("other.service", "active", &[]),
        ]);
        let sd = Systemd::new(fake);
        let e = sd.stop_service("iscsid", false, &any_service).unwrap_err();
        assert!(
            matches!(&e, Error::FailedPrecondition(m) if m.contains("leaf.service, mid.service, other.service")),
            "{e}"
        );
        assert!(sd.runner().controls().is_empty(), "nothing stopped without force");
        assert_eq!(sd.runner().state("iscsid.service"), "active");

        sd.stop_service("iscsid", true, &any_service).unwrap();
        assert_eq!(
            sd.runner().controls(),
            [
                "stop --no-pager --no-ask-password -- leaf.service",
                "stop --no-pager --no-ask-password -- mid.service",
                "stop --no-pager --no-ask-password -- other.service",
                "stop --no-pager --no-ask-password -- iscsid.service",
            ]
        );
        for u in ["iscsid.service", "mid.service", "leaf.service", "other.service", "off.service"] {
            assert_eq!(sd.runner().state(u), "inactive", "{u}");
        }
        // Stopped now: a second stop, forced or not, does nothing.
        sd.stop_service("iscsid.service", false, &any_service).unwrap();
        assert_eq!(sd.runner().controls().len(), 4);

        sd.start_service("iscsid").unwrap();
        assert_eq!(sd.runner().state("iscsid.service"), "active");
        assert_eq!(sd.runner().state("mid.service"), "inactive", "start does not touch dependents");
        // Only inactive dependents: a plain stop goes ahead.
        sd.stop_service("iscsid", false, &any_service).unwrap();
        assert_eq!(sd.runner().state("iscsid.service"), "inactive");

        assert!(matches!(sd.start_service("nosuch"), Err(Error::NotFound(_))));
        assert!(matches!(sd.stop_service("nosuch", true, &any_service), Err(Error::NotFound(_))));
    }
}
