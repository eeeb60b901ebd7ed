//! Process metrics on Linux: the `prometheus` crate's collector for everything but
//! `process_cpu_seconds_total`, which it counts in whole seconds (an integer counter: a daemon
//! that has used 0.46 s shows 0). Ours is a float, read as Prometheus' Go client reads it:
//! utime + stime of `/proc/self/stat`, in clock ticks, divided by `CLK_TCK`.

use csi_proxy_sync::LockExt;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Opts};
use std::sync::Mutex;

const CPU: &str = "process_cpu_seconds_total";

/// User and system CPU time of this process so far, in seconds.
pub(crate) fn cpu_seconds() -> Result<f64, procfs::ProcError> {
    let stat = procfs::process::Process::myself()?.stat()?;
    Ok((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

pub(crate) struct ProcessCollector {
    /// The crate's collector; its CPU family is left out of `desc` and `collect`.
    rest: prometheus::process_collector::ProcessCollector,
    cpu: Counter,
    /// What `cpu` was last set to (a counter only goes up: it is advanced by the difference).
    cpu_seen: Mutex<f64>,
}

impl ProcessCollector {
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        let cpu = Counter::with_opts(Opts::new(CPU, "Total user and system CPU time spent in seconds."))?;
        Ok(ProcessCollector {
            rest: prometheus::process_collector::ProcessCollector::for_self(),
            cpu,
            cpu_seen: Mutex::new(0.0),
        })
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs: Vec<&Desc> = self.rest.desc().into_iter().filter(|d| d.fq_name != CPU).collect();
        descs.extend(self.cpu.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        match cpu_seconds() {
            Ok(now) => {
                let mut seen = self.cpu_seen.lock_ignoring_poison();
                if now > *seen {
                    self.cpu.inc_by(now - *seen);
                    *seen = now;
                }
            }
            // The last value stays; the scrape goes on with the other series.
            Err(e) => tracing::warn!(error = %e, "cannot read the process's CPU time"),
        }
        let mut out: Vec<MetricFamily> = self.rest.collect().into_iter().filter(|f| f.name() != CPU).collect();
        out.extend(self.cpu.collect());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While the process spins, the reading grows, in fractions of a second: the crate's own
    /// collector would still say a whole number.
    #[test]
    fn cpu_seconds_are_fractional_and_follow_the_process() {
        let before = cpu_seconds().unwrap();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = before;
        // Until 0.2 s of CPU time shows: on a busy machine that takes more wall time than that.
        while after - before < 0.2 {
            assert!(spin.elapsed() < std::time::Duration::from_secs(60), "60 s of spinning: {before} -> {after}");
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            after = cpu_seconds().unwrap();
        }
        let c = ProcessCollector::new().unwrap();
        // A reading of 10 ms ticks is a whole number of seconds one time in a hundred: a few
        // scrapes (with a little work between) show a fraction.
        let mut values = Vec::new();
        for _ in 0..5 {
            let families = c.collect();
            let cpu: Vec<_> = families.iter().filter(|f| f.name() == CPU).collect();
            assert_eq!(cpu.len(), 1, "one CPU family, not the crate's too");
            values.push(cpu[0].get_metric()[0].get_counter().get_value());
            let spin = std::time::Instant::now();
            while spin.elapsed() < std::time::Duration::from_millis(15) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
        }
        assert!(values[0] >= after && values.iter().any(|v| v.fract() != 0.0), "{values:?}");
        let families = c.collect();
        // The crate's other series are still there, and each name once in the descriptions.
        assert!(families.iter().any(|f| f.name() == "process_resident_memory_bytes"));
        let mut names: Vec<_> = c.desc().iter().map(|d| d.fq_name.clone()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "{names:?}");
    }
}
