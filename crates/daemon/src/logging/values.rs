//! Field values as they were recorded (numbers, booleans, strings, errors), for both line formats
//! to write typed: a number stays a number, an error becomes its text with its sources.
//!
//! Key names follow Kubernetes' structured logging: a field called `error` is written as `err`,
//! the key `klog.ErrorS` and Kubernetes' JSON lines give the error. Durations are not a type of
//! their own: call sites log them as numbers with the unit in the key (`elapsed_ms`).

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};

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
