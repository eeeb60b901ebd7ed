//! Process metrics on Windows, under the names and meanings Prometheus' Go client gives them
//! there (what upstream exports): CPU time from `GetProcessTimes`, resident memory as the working
//! set and virtual memory as the commit charge (private bytes) from `GetProcessMemoryInfo`, open
//! handles from
//! `GetProcessHandleCount` as `process_open_fds`, and the creation time as
//! `process_start_time_seconds`.
#![allow(unsafe_code)]

use csi_proxy_sync::LockExt;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};
use std::sync::Mutex;
use windows_sys::Win32::Foundation::FILETIME;
use windows_sys::Win32::System::ProcessStatus::{K32GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, GetProcessHandleCount, GetProcessTimes};

/// Seconds between 1601-01-01 (the FILETIME epoch) and 1970-01-01.
const FILETIME_TO_UNIX_SECONDS: f64 = 11_644_473_600.0;
/// Windows has no per-process handle limit to read; Go's client reports this fixed one.
const MAX_HANDLES: f64 = 16.0 * 1024.0 * 1024.0;

/// One reading of the process's counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Reading {
    pub(crate) cpu_seconds: f64,
    pub(crate) start_time_seconds: f64,
    pub(crate) resident_bytes: f64,
    pub(crate) virtual_bytes: f64,
    pub(crate) handles: f64,
}

fn filetime_ticks(t: FILETIME) -> u64 {
    (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)
}

/// FILETIME counts 100 ns ticks.
fn ticks_to_seconds(ticks: u64) -> f64 {
    ticks as f64 / 1e7
}

/// Reads the current process's counters; the calls that fail are named in the error.
pub(crate) fn read() -> Result<Reading, std::io::Error> {
    // Pseudo-handle for this process: no need to close it.
    // SAFETY: GetCurrentProcess has no preconditions.
    let process = unsafe { GetCurrentProcess() };
    let zero = FILETIME { dwLowDateTime: 0, dwHighDateTime: 0 };
    let (mut creation, mut exit, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: the process handle is valid and the four out-pointers point at live FILETIMEs.
    if unsafe { GetProcessTimes(process, &mut creation, &mut exit, &mut kernel, &mut user) } == 0 {
        return Err(named("GetProcessTimes"));
    }
    // SAFETY: PROCESS_MEMORY_COUNTERS is plain data, valid all zero.
    let mut memory: PROCESS_MEMORY_COUNTERS = unsafe { std::mem::zeroed() };
    memory.cb = std::mem::size_of::<PROCESS_MEMORY_COUNTERS>() as u32;
    // SAFETY: the process handle is valid and `memory` is writable for `cb` bytes.
    if unsafe { K32GetProcessMemoryInfo(process, &mut memory, memory.cb) } == 0 {
        return Err(named("GetProcessMemoryInfo"));
    }
    let mut handles = 0u32;
    // SAFETY: the process handle is valid and `handles` is a live u32.
    if unsafe { GetProcessHandleCount(process, &mut handles) } == 0 {
        return Err(named("GetProcessHandleCount"));
    }
    Ok(Reading {
        cpu_seconds: ticks_to_seconds(filetime_ticks(kernel) + filetime_ticks(user)),
        start_time_seconds: ticks_to_seconds(filetime_ticks(creation)) - FILETIME_TO_UNIX_SECONDS,
        resident_bytes: memory.WorkingSetSize as f64,
        // The commit charge; the _EX form's PrivateUsage is the same figure (and Wine leaves it 0).
        virtual_bytes: memory.PagefileUsage as f64,
        handles: f64::from(handles),
    })
}

fn named(call: &str) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    std::io::Error::new(e.kind(), format!("{call}: {e}"))
}

/// The collector: reads the counters at every scrape.
pub(crate) struct ProcessCollector {
    cpu: Counter,
    /// What `cpu` was last set to (a counter only goes up: it is advanced by the difference).
    cpu_seen: Mutex<f64>,
    start_time: Gauge,
    resident: Gauge,
    virtual_memory: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    descs: Vec<Desc>,
}

impl ProcessCollector {
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        let gauge = |name: &str, help: &str| Gauge::with_opts(Opts::new(name, help));
        let cpu = Counter::with_opts(Opts::new(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
        ))?;
        let start_time = gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")?;
        let resident = gauge("process_resident_memory_bytes", "Resident memory size in bytes.")?;
        let virtual_memory = gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.")?;
        let open_fds = gauge("process_open_fds", "Number of open file descriptors.")?;
        let max_fds = gauge("process_max_fds", "Maximum number of open file descriptors.")?;
        max_fds.set(MAX_HANDLES);
        let mut descs = Vec::new();
        for c in [&cpu as &dyn Collector, &start_time, &resident, &virtual_memory, &open_fds, &max_fds] {
            descs.extend(c.desc().into_iter().cloned());
        }
        Ok(ProcessCollector {
            cpu,
            cpu_seen: Mutex::new(0.0),
            start_time,
            resident,
            virtual_memory,
            open_fds,
            max_fds,
            descs,
        })
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        match read() {
            Ok(r) => {
                let mut seen = self.cpu_seen.lock_ignoring_poison();
                if r.cpu_seconds > *seen {
                    self.cpu.inc_by(r.cpu_seconds - *seen);
                    *seen = r.cpu_seconds;
                }
                self.start_time.set(r.start_time_seconds);
                self.resident.set(r.resident_bytes);
                self.virtual_memory.set(r.virtual_bytes);
                self.open_fds.set(r.handles);
            }
            // The last values stay; the scrape goes on with the gRPC series.
            Err(e) => tracing::warn!(error = %e, "cannot read process metrics"),
        }
        let mut out = Vec::new();
        for c in [
            &self.cpu as &dyn Collector,
            &self.start_time,
            &self.resident,
            &self.virtual_memory,
            &self.open_fds,
            &self.max_fds,
        ] {
            out.extend(c.collect());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether this runs under Wine, whose ntdll exports `wine_get_version`.
    fn under_wine() -> bool {
        use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleA, GetProcAddress};
        // SAFETY: both names are NUL-terminated; a null module is checked before use.
        unsafe {
            let ntdll = GetModuleHandleA(c"ntdll.dll".as_ptr().cast());
            !ntdll.is_null() && GetProcAddress(ntdll, c"wine_get_version".as_ptr().cast()).is_some()
        }
    }

    /// `process_cpu_seconds_total` counts in fractions of a second (100 ns units), as the scrape
    /// shows it: after some work a reading is not a whole number.
    #[test]
    fn cpu_seconds_are_fractional() {
        let c = ProcessCollector::new().unwrap();
        let mut values = Vec::new();
        let mut x = 0u64;
        for _ in 0..5 {
            let spin = std::time::Instant::now();
            while spin.elapsed() < std::time::Duration::from_millis(60) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            let families = c.collect();
            let cpu = families.iter().find(|f| f.name() == "process_cpu_seconds_total").unwrap();
            let v = cpu.get_metric()[0].get_counter().get_value();
            values.push(v);
            if v.fract() != 0.0 {
                break;
            }
        }
        assert!(values.iter().any(|v| *v > 0.0 && v.fract() != 0.0), "{values:?}");
    }

    #[test]
    fn filetime_conversions() {
        let t = FILETIME { dwLowDateTime: 0x8000_0000, dwHighDateTime: 1 };
        assert_eq!(filetime_ticks(t), 0x1_8000_0000);
        assert_eq!(ticks_to_seconds(25_000_000), 2.5);
        // 1970-01-01 as a FILETIME.
        assert_eq!(ticks_to_seconds(116_444_736_000_000_000) - FILETIME_TO_UNIX_SECONDS, 0.0);
    }

    /// Real readings of this process: plausible, and they follow what the process does.
    #[test]
    fn readings_follow_the_process() {
        let before = read().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(before.start_time_seconds > 1_500_000_000.0 && before.start_time_seconds <= now + 1.0, "{before:?}");
        assert!(before.resident_bytes > 0.0 && before.virtual_bytes > 0.0, "{before:?}");
        // Wine 8 does not count a process's handles (it answers 0); Windows does.
        let counts_handles = !under_wine();
        if counts_handles {
            assert!(before.handles > 0.0, "{before:?}");
        } else {
            eprintln!("under Wine: handle counts not checked");
        }

        // 64 more open handles, and CPU burnt: both show.
        let files: Vec<_> = (0..64).map(|_| std::fs::File::open(std::env::current_exe().unwrap()).unwrap()).collect();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        let after = read().unwrap();
        if counts_handles {
            assert!(after.handles >= before.handles + 64.0, "{before:?} -> {after:?}");
        }
        assert!(after.cpu_seconds > before.cpu_seconds, "{before:?} -> {after:?}");
        assert_eq!(after.start_time_seconds, before.start_time_seconds);
        drop(files);
    }
}
