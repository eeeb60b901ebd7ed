//! `-logging-format=json`: one object per line, as Kubernetes' JSON log format
//! (k8s.io/component-base/logs/json) writes them: `ts` (milliseconds since the Unix epoch as a
//! floating-point number, as that format's time encoder writes it), `caller` (`file:line`),
//! `msg`, `v` (the klog verbosity the level stands for: info 0, debug 2, trace 5, warnings 0;
//! absent on errors, as there), then the fields of the enclosing spans and of the event as keys
//! of their own, typed (numbers and booleans as JSON numbers and booleans), the error under
//! `err`. Two keys Kubernetes does not write are added: `level` (`error`, `warn`, `info`,
//! `debug`, `trace`: a warning is otherwise an info line) and `logger` (the tracing target). A
//! field named like one of these keys is written as `field_<name>`.

use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::{Level, Metadata};

use super::values::{LineFormat, PairFields, Value};

/// Keys of a JSON line that event and span fields may not take.
const JSON_RESERVED: &[&str] = &["ts", "caller", "msg", "v", "level", "logger"];

/// Formats events as JSON lines (see the module text).
pub struct JsonFormat;

/// Span fields as `,"key":value` pieces for [`JsonFormat`] to append.
pub type JsonFields = PairFields<JsonFormat>;

impl LineFormat for JsonFormat {
    fn line(&self, meta: &Metadata<'_>, msg: Option<&str>, fields: &str) -> String {
        json_line(SystemTime::now(), meta, msg, fields)
    }

    /// Appends `,"name":value` (a reserved name as `field_<name>`).
    fn push_pair(out: &mut String, name: &str, value: &Value) {
        out.push(',');
        if JSON_RESERVED.contains(&name) {
            push_str_value(out, &format!("field_{name}"));
        } else {
            push_str_value(out, name);
        }
        out.push(':');
        match value {
            Value::Str(s) => push_str_value(out, s),
            Value::I64(n) => write_display(out, n),
            Value::U64(n) => write_display(out, n),
            Value::I128(n) => write_display(out, n),
            Value::U128(n) => write_display(out, n),
            Value::Bool(b) => write_display(out, b),
            Value::F64(n) => match serde_json::Number::from_f64(*n) {
                Some(n) => write_display(out, n),
                // NaN and infinities have no JSON number.
                None => push_str_value(out, &n.to_string()),
            },
        }
    }
}

/// One JSON line: the fixed keys, then `fields` (already `,"key":value` pieces).
fn json_line(now: SystemTime, meta: &Metadata<'_>, msg: Option<&str>, fields: &str) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let level = *meta.level();
    let millis = since.as_secs().saturating_mul(1000) + u64::from(since.subsec_millis());
    let mut line = format!("{{\"ts\":{millis}.{:03}", since.subsec_micros() % 1000);
    if let (Some(file), Some(n)) = (meta.file(), meta.line()) {
        line.push_str(",\"caller\":");
        push_str_value(&mut line, &format!("{file}:{n}"));
    }
    line.push_str(",\"msg\":");
    push_str_value(&mut line, msg.unwrap_or(""));
    let v = match level {
        Level::ERROR => None,
        Level::WARN | Level::INFO => Some(0),
        Level::DEBUG => Some(2),
        Level::TRACE => Some(5),
    };
    if let Some(v) = v {
        let _ = write!(line, ",\"v\":{v}");
    }
    line.push_str(",\"level\":");
    push_str_value(&mut line, &level.as_str().to_ascii_lowercase());
    line.push_str(",\"logger\":");
    push_str_value(&mut line, meta.target());
    line.push_str(fields);
    line.push_str("}\n");
    line
}

fn write_display(out: &mut String, v: impl fmt::Display) {
    let _ = write!(out, "{v}");
}

/// Appends a JSON string.
fn push_str_value(out: &mut String, s: &str) {
    // Serialising a str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::sink::Sink;
    use crate::logging::testutil::{read, temp_dir};
    use crate::logging::{subscriber, LogFile, LogFormat, KEEP_ROTATED};
    use std::io;
    use std::path::PathBuf;
    use tracing_subscriber::EnvFilter;

    /// JSON lines parse, and carry ts, level, v, logger, caller, msg and the fields as keys.
    #[test]
    fn json_lines_carry_msg_and_fields() {
        let dir = temp_dir("json");
        let path = dir.join("csi-proxy.log");
        let sink = Sink::start(Some(LogFile::open(&path, 0, KEEP_ROTATED).unwrap()), false).unwrap();
        let subscriber = subscriber(LogFormat::Json, EnvFilter::new("trace"), sink.clone());
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0;
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("call", method = "FormatVolume", id = 7u64);
            let _entered = span.enter();
            let err = io::Error::other("disk gone");
            tracing::info!(
                target: "csi_proxy::test",
                volume = "vol-\"1\"\n",
                size = 42u64,
                delta = -3i64,
                ratio = 0.5,
                ok = true,
                path = ?PathBuf::from("/x"),
                msg = "clashes",
                "formatted {}", "here"
            );
            tracing::debug!(target: "csi_proxy::test", "debug");
            tracing::trace!(target: "csi_proxy::test", "trace");
            tracing::warn!(target: "csi_proxy::test", "warn");
            tracing::error!(target: "csi_proxy::test", error = &err as &dyn std::error::Error, "failed");
        });
        sink.sync(false);
        let text = read(&path);
        let lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
        assert_eq!(lines.len(), 5, "{text}");
        let first = &lines[0];
        let ts = first["ts"].as_f64().unwrap();
        assert!(ts >= before.floor() && ts < before + 60_000.0, "milliseconds: {ts} vs {before}");
        assert_eq!(first["level"], "info");
        assert_eq!(first["v"], 0);
        assert_eq!(first["logger"], "csi_proxy::test");
        assert!(first["caller"].as_str().unwrap().contains("json.rs:"), "{first}");
        assert_eq!(first["msg"], "formatted here");
        assert_eq!(first["volume"], "vol-\"1\"\n");
        assert_eq!(first["size"], 42);
        assert_eq!(first["delta"], -3);
        assert_eq!(first["ratio"], 0.5);
        assert_eq!(first["ok"], true);
        assert_eq!(first["path"], "\"/x\"");
        assert_eq!(first["field_msg"], "clashes");
        assert_eq!(first["method"], "FormatVolume", "span fields: {first}");
        assert_eq!(first["id"], 7);
        let levels: Vec<_> = lines.iter().map(|l| (l["level"].as_str().unwrap(), l.get("v").cloned())).collect();
        assert_eq!(
            levels,
            [
                ("info", Some(0.into())),
                ("debug", Some(2.into())),
                ("trace", Some(5.into())),
                ("warn", Some(0.into())),
                ("error", None)
            ]
        );
        assert_eq!(lines[4]["err"], "disk gone", "the error under klog's key");
        assert!(text.ends_with("}\n") && !text.contains('\x1b'), "{text:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
