//! System group on Linux: DMI for the BIOS serial, systemd for services (the logic is in
//! [`crate::linux::systemd`]; this file only runs the real `systemctl`).

use crate::linux::block::tools;
use crate::linux::systemd::{Output, Runner, Systemd};
use crate::services::WAIT_TIMEOUT;
use crate::{Error, Result};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DMI_SERIAL: &str = "/sys/class/dmi/id/product_serial";

/// The system group on this machine: [`Systemd`]'s logic over the real `systemctl` and DMI.
pub type System = Systemd<Systemctl>;

impl System {
    pub fn real() -> Self {
        Systemd::new(Systemctl { timeout: WAIT_TIMEOUT })
    }
}

/// Runs the real program: no shell, no stdin, found in the fixed PATH with a clean environment, the C locale (so that messages are the ones
/// [`crate::linux::systemd`] recognises), killed when it runs longer than `timeout` (a start or stop
/// job it waits for then goes on inside systemd).
pub struct Systemctl {
    pub timeout: Duration,
}

impl Runner for Systemctl {
    fn bios_serial_number(&self) -> Result<String> {
        read_serial(Path::new(DMI_SERIAL))
    }
    fn run(&self, program: &str, args: &[String]) -> std::io::Result<Output> {
        // As every tool of the Linux backend runs (linux/block/tools.rs): found in the fixed
        // PATH, with a clean environment holding only that PATH and the C locale, never the
        // daemon's own (its PATH, proxies, credentials).
        let found = tools::find(program).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, format!("{program} is not in {}", tools::SEARCH_PATH))
        })?;
        let mut cmd = Command::new(found);
        cmd.args(args)
            .env_clear()
            .env("PATH", tools::SEARCH_PATH)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        super::die_with_daemon(&mut cmd);
        let mut child = cmd.spawn()?;
        let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
        std::thread::scope(|s| {
            // Both pipes are drained while the child runs, so that it never blocks on a full one.
            let stdout = s.spawn(move || read_all(out.as_mut()));
            let stderr = s.spawn(move || read_all(err.as_mut()));
            let start = Instant::now();
            let mut pause = Duration::from_millis(1);
            let status = loop {
                if let Some(st) = child.try_wait()? {
                    break st;
                }
                if start.elapsed() >= self.timeout {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("{program} was stopped after {:?}", self.timeout),
                    ));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            };
            Ok(Output {
                code: status.code(),
                stdout: stdout.join().unwrap_or_default(),
                stderr: stderr.join().unwrap_or_default(),
            })
        })
    }
}

fn read_all(pipe: Option<&mut impl Read>) -> String {
    let mut buf = Vec::new();
    if let Some(p) = pipe {
        let _ = p.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The kernel exposes the SMBIOS type-1 serial as one line; firmware without one leaves it
/// empty or fills in blanks, which we report as "none" instead of an empty success.
fn read_serial(path: &Path) -> Result<String> {
    let raw = std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let serial = raw.trim();
    if serial.is_empty() {
        return Err(Error::not_found(format!(
            "the firmware reports no system serial number ({} is empty)",
            path.display()
        )));
    }
    Ok(serial.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SystemHost;

    #[test]
    fn serial_is_trimmed_and_empty_is_not_found() {
        let dir = std::env::temp_dir().join(format!("csi-proxy-serial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("product_serial");
        std::fs::write(&f, "VMware-56 4d\n").unwrap();
        assert_eq!(read_serial(&f).unwrap(), "VMware-56 4d");
        std::fs::write(&f, "  \n").unwrap();
        assert!(matches!(read_serial(&f), Err(Error::NotFound(m)) if m.contains("no system serial")));
        assert!(matches!(read_serial(&dir.join("missing")), Err(Error::NotFound(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// The real runner: argv passed as is (no shell), output and exit code collected, a missing
    /// program is NotFound, an overlong run is killed.
    #[test]
    fn real_runner() {
        let r = Systemctl { timeout: Duration::from_secs(10) };
        let out = r.run("sh", &args(&["-c", "echo out; echo err >&2; exit 3", "x"])).unwrap();
        assert_eq!((out.code, out.stdout.as_str(), out.stderr.as_str()), (Some(3), "out\n", "err\n"));
        // A shell metacharacter in an argument stays one literal argument.
        let out = r.run("printf", &args(&["%s|", "a;b", "$(id)", "c d"])).unwrap();
        assert_eq!(out.stdout, "a;b|$(id)|c d|");
        // Large output on both pipes does not block.
        let out = r.run("sh", &args(&["-c", "head -c 300000 /dev/zero; head -c 300000 /dev/zero >&2"])).unwrap();
        assert_eq!((out.stdout.len(), out.stderr.len()), (300000, 300000));
        let e = r.run("csi-proxy-no-such-program", &[]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        // The environment is the fixed PATH and the C locale only, not this process's (a test
        // runs with HOME, CARGO_* and more).
        assert!(std::env::vars().count() > 2);
        let out = r.run("env", &[]).unwrap();
        let mut env: Vec<&str> = out.stdout.lines().collect();
        env.sort_unstable();
        assert_eq!(env, ["LC_ALL=C", &format!("PATH={}", tools::SEARCH_PATH)], "{}", out.stdout);
        let r = Systemctl { timeout: Duration::from_millis(200) };
        let t = Instant::now();
        let e = r.run("sleep", &args(&["5"])).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    /// The real systemctl on this machine. CI and development containers have no systemd
    /// (PID 1 is something else): then every call is Unavailable, never a fake success. Where
    /// systemd runs, a unit that cannot exist is NotFound.
    #[test]
    fn real_systemctl() {
        let sys = System::real();
        let booted = Path::new("/run/systemd/system").is_dir();
        let name = "csi-proxy-test-no-such-unit";
        let results = [
            sys.get_service(name).map(drop),
            sys.start_service(name),
            sys.stop_service(name, false, &crate::services::any_service),
            sys.stop_service(name, true, &crate::services::any_service),
        ];
        for r in results {
            match r {
                Err(Error::FailedPrecondition(m)) if !booted => {
                    assert!(m.contains("systemd is not running") || m.contains("not installed"), "{m}")
                }
                Err(Error::NotFound(m)) if booted => assert!(m.contains(name), "{m}"),
                other => panic!("booted with systemd: {booted}; got {other:?}"),
            }
        }
        assert!(matches!(sys.get_service("bad;name"), Err(Error::InvalidArgument(_))));
    }
}
