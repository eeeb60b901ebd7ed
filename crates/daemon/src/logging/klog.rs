//! `-logging-format=text`: klog's line format, so that log pipelines that parse the klog daemons
//! of a node parse ours too. klog's header, as its `klog.go` documents it:
//!
//! `Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg...`: `L` the severity (`I`, `W`, `E`), month
//! and day, the time of day with microseconds, the thread id space-padded to 7 (klog writes the
//! process id there; so do we), the source file's base name and line, `]`, a space. The message
//! follows as klog's structured calls (`InfoS`, `ErrorS`) write it: quoted, then ` key=value`
//! for every field of the enclosing spans and of the event, strings quoted as Go's
//! `strconv.Quote` does, numbers and booleans bare, the error under `err`. A line is always one
//! line: newlines inside values are escaped.
//!
//! klog writes local time; this writes UTC (the standard library has no time zones, and nodes'
//! daemons run in UTC as a rule).

use std::fmt::{self, Write as _};
use std::time::SystemTime;

use tracing::{Level, Metadata};

use super::clock::Utc;
use super::values::{LineFormat, PairFields, Value};

/// Formats events as klog lines.
pub struct KlogFormat {
    pid: u32,
}

impl KlogFormat {
    pub fn new() -> KlogFormat {
        KlogFormat { pid: std::process::id() }
    }
}

impl Default for KlogFormat {
    fn default() -> Self {
        Self::new()
    }
}

/// Span fields as ` key=value` pieces for [`KlogFormat`] to append.
pub type KlogFields = PairFields<KlogFormat>;

impl LineFormat for KlogFormat {
    fn line(&self, meta: &Metadata<'_>, msg: Option<&str>, fields: &str) -> String {
        let mut line = header(SystemTime::now(), *meta.level(), self.pid, meta.file(), meta.line());
        push_quoted(&mut line, msg.unwrap_or(""));
        line.push_str(fields);
        line.push('\n');
        line
    }

    /// Appends ` key=value`.
    fn push_pair(out: &mut String, key: &str, value: &Value) {
        out.push(' ');
        out.push_str(key);
        out.push('=');
        match value {
            Value::Str(s) => push_quoted(out, s),
            Value::I64(n) => write_display(out, n),
            Value::U64(n) => write_display(out, n),
            Value::I128(n) => write_display(out, n),
            Value::U128(n) => write_display(out, n),
            Value::F64(n) => write_display(out, n),
            Value::Bool(b) => write_display(out, b),
        }
    }
}

/// klog's severity letter: info, warning, error (debug and trace are info at a higher `-v`).
fn severity(level: Level) -> char {
    match level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

/// `Lmmdd hh:mm:ss.uuuuuu threadid file:line] `.
pub fn header(now: SystemTime, level: Level, pid: u32, file: Option<&str>, line: Option<u32>) -> String {
    let t = Utc::of(now);
    // The base name, whichever separator the path was built with.
    let file = file.map(|f| f.rsplit(['/', '\\']).next().unwrap_or(f)).unwrap_or("???");
    format!(
        "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {pid:>7} {file}:{}] ",
        severity(level),
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        t.micros,
        line.unwrap_or(0)
    )
}

fn write_display(out: &mut String, v: impl fmt::Display) {
    let _ = write!(out, "{v}");
}

/// Appends `s` quoted as Go's `strconv.Quote` does: `\"`, `\\`, the C escapes (`\n`, `\t`, ...),
/// other ASCII control characters as `\xNN`, other non-printable ones as `\uNNNN`.
pub fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            // C1 controls and the line/paragraph separators: not printable in Go's sense.
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn the_header_is_klogs() {
        let at = UNIX_EPOCH + Duration::from_micros(1_795_575_204_123_456); // 2026-11-25 02:53:24.123456
        assert_eq!(
            header(at, Level::INFO, 1234, Some("crates/daemon/src/main.rs"), Some(42)),
            "I1125 02:53:24.123456    1234 main.rs:42] "
        );
        assert_eq!(header(at, Level::WARN, 7, Some(r"src\x.rs"), Some(1)), "W1125 02:53:24.123456       7 x.rs:1] ");
        assert_eq!(header(at, Level::ERROR, 12345678, None, None), "E1125 02:53:24.123456 12345678 ???:0] ");
        assert!(header(at, Level::TRACE, 1, None, None).starts_with('I'));
    }

    #[test]
    fn values_are_quoted_as_go_quotes_them() {
        let mut s = String::new();
        push_quoted(&mut s, "a\"b\\c\nd\te\x1b\x7f\u{85}é");
        assert_eq!(s, r#""a\"b\\c\nd\te\x1b\x7f\u0085é""#);
        let mut s = String::new();
        KlogFormat::push_pair(&mut s, "n", &Value::U64(3));
        KlogFormat::push_pair(&mut s, "ok", &Value::Bool(true));
        KlogFormat::push_pair(&mut s, "ms", &Value::F64(0.25));
        KlogFormat::push_pair(&mut s, "path", &Value::Str("/x y".into()));
        assert_eq!(s, r#" n=3 ok=true ms=0.25 path="/x y""#);
    }
}
