//! Field values as they were recorded (numbers, booleans, strings, errors), for both line formats
//! to write typed: a number stays a number, an error becomes its text with its sources.
//!
//! Key names follow Kubernetes' structured logging: a field called `error` is written as `err`,
//! the key `klog.ErrorS` and Kubernetes' JSON lines give the error. Durations are not a type of
//! their own: call sites log them as numbers with the unit in the key (`elapsed_ms`).

use std::fmt::{self, Write as _};
use std::marker::PhantomData;

use tracing::field::{Field, Visit};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// One recorded value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    I64(i64),
    U64(u64),
    I128(i128),
    U128(u128),
    F64(f64),
    Bool(bool),
}

/// The message (the `message` field) and the other fields, in the order they were recorded.
#[derive(Debug, Default)]
pub struct Collected {
    pub msg: Option<String>,
    pub fields: Vec<(&'static str, Value)>,
}

/// The key a field is written under.
pub fn key(name: &'static str) -> &'static str {
    if name == "error" {
        "err"
    } else {
        name
    }
}

impl Collected {
    fn push(&mut self, field: &Field, value: Value) {
        self.fields.push((key(field.name()), value));
    }
}

impl Visit for Collected {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%x` fields arrive here too, their Debug being their Display.
        self.record_str(field, &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" && self.msg.is_none() {
            self.msg = Some(value.to_string());
        } else {
            self.push(field, Value::Str(value.to_string()));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Value::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Value::U64(value));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.push(field, Value::I128(value));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.push(field, Value::U128(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Value::Bool(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Value::F64(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(s) = source {
            let _ = write!(text, ": {s}");
            source = s.source();
        }
        self.push(field, Value::Str(text));
    }
}

/// A line format (klog's, JSON's): how it appends one field to its line (` key=value`,
/// `,"key":value`), and the line it makes of an event's metadata, message and fields (already
/// such pieces: the enclosing spans' from the root, then the event's own).
pub trait LineFormat: Send + Sync + 'static {
    fn push_pair(out: &mut String, key: &str, value: &Value);
    fn line(&self, meta: &Metadata<'_>, msg: Option<&str>, fields: &str) -> String;
}

/// Formats span fields as `F`'s pieces, once per span (tracing-subscriber keeps them in the
/// span's extensions), for [`Lines`] to append.
pub struct PairFields<F>(PhantomData<fn() -> F>);

impl<F> Default for PairFields<F> {
    fn default() -> Self {
        PairFields(PhantomData)
    }
}

impl<'w, F: LineFormat> FormatFields<'w> for PairFields<F> {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut c = Collected::default();
        fields.record(&mut c);
        let mut out = String::new();
        if let Some(msg) = c.msg {
            // A span field called `message`: kept, under its own name.
            F::push_pair(&mut out, "message", &Value::Str(msg));
        }
        for (k, v) in &c.fields {
            F::push_pair(&mut out, k, v);
        }
        writer.write_str(&out)
    }

    fn add_fields(&self, current: &'w mut FormattedFields<Self>, fields: &tracing::span::Record<'_>) -> fmt::Result {
        self.format_fields(current.as_writer(), fields)
    }
}

/// Formats events as `F`'s lines.
pub struct Lines<F>(pub F);

impl<S, F> FormatEvent<S, PairFields<F>> for Lines<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    F: LineFormat,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, PairFields<F>>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut c = Collected::default();
        event.record(&mut c);
        let mut fields = String::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                if let Some(pieces) = span.extensions().get::<FormattedFields<PairFields<F>>>() {
                    fields.push_str(pieces);
                }
            }
        }
        for (k, v) in &c.fields {
            F::push_pair(&mut fields, k, v);
        }
        writer.write_str(&self.0.line(event.metadata(), c.msg.as_deref(), &fields))
    }
}
