//! Helpers for the unit tests of every backend.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// Every `tracing` event emitted while `f` runs, as `field=value` lines.
pub(crate) fn traced<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata};

    struct Lines(Arc<Mutex<Vec<String>>>);
    struct Fields(String);
    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, "{}={:?} ", field.name(), value);
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            let _ = write!(self.0, "{}={} ", field.name(), value);
        }
    }
    impl tracing::Subscriber for Lines {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields(format!("{} ", event.metadata().level()));
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = tracing::subscriber::with_default(Lines(lines.clone()), f);
    let lines = lines.lock().unwrap().clone();
    (out, lines)
}
