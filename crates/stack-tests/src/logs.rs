//! A process-wide tracing subscriber that keeps every event and span field as text, so a test
//! can check what the server would have logged (secrets must never appear).

use csi_proxy_sync::LockExt;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

static LOG: Mutex<String> = Mutex::new(String::new());

struct Line<'a>(&'a mut String);
impl Visit for Line<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

fn keep(target: &str, record: impl FnOnce(&mut Line<'_>)) {
    let mut line = format!("{target}:");
    record(&mut Line(&mut line));
    line.push('\n');
    LOG.lock_ignoring_poison().push_str(&line);
}

struct Capture;
impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        keep(span.metadata().target(), |l| span.record(l));
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        keep("record", |l| values.record(l));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        keep(event.metadata().target(), |l| event.record(l));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Installs the subscriber (once per test binary).
pub fn install() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| tracing::subscriber::set_global_default(Capture).expect("global subscriber"));
}

/// Everything logged so far by any test of this binary.
pub fn text() -> String {
    LOG.lock_ignoring_poison().clone()
}
