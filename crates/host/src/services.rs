//! Service-control logic shared by the native backends (Windows' service control manager,
//! Linux' systemd), kept free of OS calls so that it is tested on every OS.

use crate::{Error, Result};
use std::time::{Duration, Instant};

/// How long a start or stop may take before the call gives up, as upstream (30 s).
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the state is polled while waiting, as upstream (200 ms).
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Service names as Windows' service control manager compares them: ignoring case.
pub fn same_scm_name(a: &str, b: &str) -> bool {
    crate::same_ignoring_case(a, b)
}

/// Unit names as systemd compares them: exactly.
pub fn same_unit_name(a: &str, b: &str) -> bool {
    a == b
}

/// Limits of [`stop_order`]: a dependency graph beyond these is refused rather than walked.
const MAX_DEPTH: usize = 64;
const MAX_DEPENDENTS: usize = 1024;

/// The order in which to stop the active dependents of `root` so that no service is stopped while
/// something that depends on it is still running: every dependent comes after its own dependents
/// (depth-first post-order), `root` itself is not included. `active_dependents(name)` lists the
/// active services that depend directly (or, as Windows' `EnumDependentServices` does, also
/// indirectly) on `name`; `same` compares names as the OS does. Cycles are tolerated.
pub fn stop_order<F>(root: &str, same: fn(&str, &str) -> bool, mut active_dependents: F) -> Result<Vec<String>>
where
    F: FnMut(&str) -> Result<Vec<String>>,
{
    fn visit<F>(
        name: &str,
        depth: usize,
        root: &str,
        same: fn(&str, &str) -> bool,
        deps: &mut F,
        seen: &mut Vec<String>,
        order: &mut Vec<String>,
    ) -> Result<()>
    where
        F: FnMut(&str) -> Result<Vec<String>>,
    {
        if depth > MAX_DEPTH {
            return Err(Error::internal(format!(
                "the dependents of service {root:?} nest deeper than {MAX_DEPTH} levels (at {name:?})"
            )));
        }
        for d in deps(name)? {
            if same(&d, root) || seen.iter().any(|s| same(s, &d)) {
                continue;
            }
            if seen.len() >= MAX_DEPENDENTS {
                return Err(Error::internal(format!("service {root:?} has more than {MAX_DEPENDENTS} dependents")));
            }
            seen.push(d.clone());
            visit(&d, depth + 1, root, same, deps, seen, order)?;
            order.push(d);
        }
        Ok(())
    }
    let (mut seen, mut order) = (Vec::new(), Vec::new());
    visit(root, 0, root, same, &mut active_dependents, &mut seen, &mut order)?;
    Ok(order)
}

/// The error of a plain (not forced) stop of a service that has active dependents.
pub fn dependents_running(name: &str, dependents: &[String]) -> Error {
    Error::precondition(format!(
        "service {name:?} cannot be stopped: services that depend on it are running: {}; \
         stop them first or set force to stop them too",
        dependents.join(", ")
    ))
}

/// Refuses a forced stop that would take down a dependent `may_stop` rejects, before anything
/// has been stopped.
pub fn refuse_unstoppable(name: &str, order: &[String], may_stop: &dyn Fn(&str) -> bool) -> Result<()> {
    let refused: Vec<&str> = order.iter().map(String::as_str).filter(|d| !may_stop(d)).collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(Error::denied(format!(
        "stopping service {name:?} with force would also stop {}, which may not be stopped (-allowed-service)",
        refused.join(", ")
    )))
}

/// A `may_stop` that allows every service (no `-allowed-service`).
pub fn any_service(_: &str) -> bool {
    true
}

/// Time as the waiting loops see it; tests substitute a virtual one.
pub trait Clock {
    fn elapsed(&self) -> Duration;
    fn sleep(&mut self, d: Duration);
}

/// The real clock, started at creation.
pub struct RealClock(Instant);

impl RealClock {
    pub fn start() -> Self {
        RealClock(Instant::now())
    }
}

impl Clock for RealClock {
    fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// Calls `check` until it answers `Some`, every `interval`, for at most `timeout` (checked once
/// more at the deadline). `Ok(None)` means the time ran out; an error from `check` ends the wait.
pub fn poll_until<T>(
    clock: &mut dyn Clock,
    interval: Duration,
    timeout: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    let start = clock.elapsed();
    loop {
        if let Some(v) = check()? {
            return Ok(Some(v));
        }
        let spent = clock.elapsed().saturating_sub(start);
        if spent >= timeout {
            return Ok(None);
        }
        clock.sleep(interval.min(timeout - spent));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn forced_stops_refuse_dependents_not_allowed_naming_them() {
        let order = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        refuse_unstoppable("root", &order, &any_service).unwrap();
        let e = refuse_unstoppable("root", &order, &|d| d == "b").unwrap_err();
        assert!(matches!(&e, Error::PermissionDenied(m) if m.contains("would also stop a, c")), "{e:?}");
        refuse_unstoppable("root", &[], &|_| false).unwrap();
    }

    /// Virtual time: sleeping advances it, nothing really waits.
    #[derive(Default)]
    pub struct FakeClock {
        pub now: Duration,
        pub sleeps: usize,
    }

    impl Clock for FakeClock {
        fn elapsed(&self) -> Duration {
            self.now
        }
        fn sleep(&mut self, d: Duration) {
            self.now += d;
            self.sleeps += 1;
        }
    }

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges.iter().map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect())).collect()
    }

    fn order(g: &BTreeMap<String, Vec<String>>, root: &str, same: fn(&str, &str) -> bool) -> Result<Vec<String>> {
        stop_order(root, same, |n| Ok(g.get(n).cloned().unwrap_or_default()))
    }

    fn exact(a: &str, b: &str) -> bool {
        a == b
    }

    /// Every dependent is stopped before what it depends on.
    fn assert_safe(g: &BTreeMap<String, Vec<String>>, root: &str, o: &[String]) {
        for (i, s) in o.iter().enumerate() {
            for d in g.get(s).into_iter().flatten() {
                if d != root {
                    let j = o.iter().position(|x| x == d).unwrap_or_else(|| panic!("{d} missing from {o:?}"));
                    assert!(j < i, "{d} depends on {s} but is stopped after it: {o:?}");
                }
            }
        }
    }

    #[test]
    fn no_dependents() {
        assert!(order(&graph(&[]), "a", exact).unwrap().is_empty());
    }

    #[test]
    fn dependents_of_dependents_come_first() {
        // a <- b <- c, a <- d
        let g = graph(&[("a", &["b", "d"]), ("b", &["c"])]);
        let o = order(&g, "a", exact).unwrap();
        assert_eq!(o, ["c", "b", "d"]);
        assert_safe(&g, "a", &o);
    }

    /// A dependent found directly may depend on another direct dependent: order still holds.
    #[test]
    fn diamond_and_cross_dependencies() {
        // a <- b, a <- c, and c <- b (b also depends on c): b must stop before c.
        let g = graph(&[("a", &["c", "b"]), ("c", &["b"])]);
        let o = order(&g, "a", exact).unwrap();
        assert_eq!(o, ["b", "c"]);
        assert_safe(&g, "a", &o);
        // Windows lists indirect dependents too: the same order comes out.
        let g = graph(&[("a", &["b", "c"]), ("c", &["b"])]);
        let o = order(&g, "a", exact).unwrap();
        assert_safe(&g, "a", &o);
        assert_eq!(o.len(), 2);
    }

    #[test]
    fn cycles_and_the_root_are_skipped() {
        let g = graph(&[("a", &["b"]), ("b", &["c", "a"]), ("c", &["b"])]);
        let o = order(&g, "a", exact).unwrap();
        assert_eq!(o, ["c", "b"]);
    }

    #[test]
    fn names_compare_as_the_os_does() {
        let ci: fn(&str, &str) -> bool = |a, b| a.eq_ignore_ascii_case(b);
        let g = graph(&[("a", &["B", "b", "A"]), ("B", &["c"]), ("b", &["c"])]);
        assert_eq!(order(&g, "a", ci).unwrap(), ["c", "B"]);
        assert_eq!(order(&g, "a", exact).unwrap(), ["c", "B", "b", "A"]);
    }

    #[test]
    fn errors_and_limits() {
        let e = stop_order("a", exact, |_| Err(Error::not_found("x"))).unwrap_err();
        assert!(matches!(e, Error::NotFound(_)));
        // An endless chain of fresh names.
        let e = stop_order("a", exact, |n| Ok(vec![format!("{n}x")])).unwrap_err();
        assert!(e.to_string().contains("deeper than"), "{e}");
        // A huge fan-out.
        let e = stop_order("a", exact, |n| {
            Ok(if n == "a" { (0..2000).map(|i| format!("s{i}")).collect() } else { vec![] })
        })
        .unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
    }

    #[test]
    fn precondition_names_the_dependents() {
        let e = dependents_running("iscsid", &["a".into(), "b".into()]);
        assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains("\"iscsid\"") && m.contains("a, b")), "{e}");
    }

    #[test]
    fn poll_until_answers_times_out_and_stops_on_errors() {
        let mut c = FakeClock::default();
        let mut n = 0;
        let r = poll_until(&mut c, POLL_INTERVAL, WAIT_TIMEOUT, || {
            n += 1;
            Ok((n == 3).then_some(n))
        });
        assert_eq!(r.unwrap(), Some(3));
        assert_eq!(c.now, 2 * POLL_INTERVAL);

        let mut c = FakeClock::default();
        let mut calls = 0;
        let r: Result<Option<()>> = poll_until(&mut c, POLL_INTERVAL, WAIT_TIMEOUT, || {
            calls += 1;
            Ok(None)
        });
        assert_eq!(r.unwrap(), None);
        assert_eq!(c.now, WAIT_TIMEOUT, "waits exactly the timeout");
        assert_eq!(calls, 151, "every 200 ms for 30 s, plus the first and last check");

        let mut c = FakeClock::default();
        let r: Result<Option<()>> = poll_until(&mut c, POLL_INTERVAL, WAIT_TIMEOUT, || Err(Error::internal("gone")));
        assert!(r.is_err());
        assert_eq!(c.sleeps, 0);

        // An interval longer than the timeout still checks at the deadline.
        let mut c = FakeClock::default();
        let mut calls = 0;
        let _ = poll_until::<()>(&mut c, Duration::from_secs(10), Duration::from_secs(1), || {
            calls += 1;
            Ok(None)
        });
        assert_eq!((calls, c.now), (2, Duration::from_secs(1)));
    }
}
