//! Timing shared by the per-RPC latency benches (`block`, `win_block`): the same warm-up, the
//! same percentiles. RPCs are timed with [`time_rpc!`](crate::time_rpc), host calls with [`time`].

use std::time::{Duration, Instant};

/// Unmeasured calls before the measured ones.
pub const WARMUP: usize = 50;

/// Median, 99th percentile and maximum.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Figures {
    pub fn of(mut t: Vec<Duration>) -> Figures {
        t.sort();
        Figures { p50: t[t.len() / 2], p99: t[t.len() * 99 / 100], max: t[t.len() - 1] }
    }

    /// `p50 p99 max` in µs, right-aligned in columns of 10.
    pub fn micros(&self) -> String {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        format!("{:>10.1} {:>10.1} {:>10.1}", us(self.p50), us(self.p99), us(self.max))
    }
}

/// Times `calls` runs of `f` after [`WARMUP`] unmeasured ones.
pub fn time(calls: usize, mut f: impl FnMut()) -> Figures {
    for _ in 0..WARMUP {
        f();
    }
    Figures::of(
        (0..calls)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed()
            })
            .collect(),
    )
}

/// Times `calls` awaits of the RPC `$call` (each must succeed) after `WARMUP` unmeasured ones.
/// A macro, because the call borrows its client mutably afresh each time.
#[macro_export]
macro_rules! time_rpc {
    ($calls:expr, $call:expr) => {{
        for _ in 0..$crate::latency::WARMUP {
            $call.await.unwrap();
        }
        let mut t = Vec::with_capacity($calls);
        for _ in 0..$calls {
            let start = std::time::Instant::now();
            $call.await.unwrap();
            t.push(start.elapsed());
        }
        $crate::latency::Figures::of(t)
    }};
}
