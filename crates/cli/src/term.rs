//! Text from the daemon made safe for a terminal, in every form csi-proxyctl prints it. Disk
//! serials, page-83 identifiers, volume IDs and labels and error messages come from whoever
//! controls a disk, an iSCSI target or an SMB server; printed raw, an ESC, CR or LF in them could
//! retitle or clear the terminal, move the cursor or forge a table row (kubectl escapes such text
//! since CVE-2021-25743), and a bidi override could make a value read as another.
//!
//! One rule, [`escaped`], says which characters are never printed raw: every control character
//! (C0, DEL and C1) and the bidi formatting characters. Text shows them as their Rust escape
//! ([`printable`]: `\u{1b}`, `\r`, `\n`); JSON as its `\uXXXX` escape ([`json`],
//! [`json_pretty`]: serde_json escapes C0 itself but leaves DEL, C1 and bidi raw). Messages and
//! values quoted in warnings and errors are also bounded ([`shown`]).

use std::borrow::Cow;
use std::io;

/// Most characters of a daemon's message shown in a warning or an error.
pub const MESSAGE: usize = 1024;
/// Most characters of a value (a volume ID) quoted in a warning or an error.
pub const VALUE: usize = 256;

/// Whether `c` is never printed raw: a control character (C0, DEL, C1), or a bidi formatting
/// character (marks, embeddings, overrides, isolates), which reorders what follows it.
pub fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every [`escaped`] character shown as its escape.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// At most `max` characters of `text`, with `…` when some were cut.
pub fn bounded(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
    }
}

/// `text` bounded to `max` characters, then escaped (cut first, so no escape is cut in half):
/// for a daemon's value or message quoted in a warning or an error.
pub fn shown(text: &str, max: usize) -> String {
    printable(&bounded(text, max)).into_owned()
}

/// `value` as one line of JSON, every [`escaped`] character as `\uXXXX`.
pub fn json(value: &serde_json::Value) -> String {
    write_json(value, serde_json::ser::CompactFormatter)
}

/// `value` as indented JSON, every [`escaped`] character as `\uXXXX`.
pub fn json_pretty(value: &serde_json::Value) -> String {
    write_json(value, serde_json::ser::PrettyFormatter::new())
}

fn write_json<F: serde_json::ser::Formatter>(value: &serde_json::Value, formatter: F) -> String {
    use serde::Serialize as _;
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Escaping(formatter));
    // A Value has string keys and finite numbers, and a Vec does not fail to grow.
    value.serialize(&mut ser).expect("a JSON value serializes");
    // Only whole UTF-8 strings and ASCII are written.
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// A serde_json formatter that writes `F`'s layout, with what serde_json leaves raw in strings
/// (DEL, C1, bidi) escaped too. serde_json escapes `"`, `\` and C0 before a fragment gets here.
struct Escaping<F>(F);

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for Escaping<F> {
    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| escaped(c)) {
            w.write_all(&rest.as_bytes()[..at])?;
            // Every escaped character is in the Basic Multilingual Plane: one \uXXXX.
            write!(w, "\\u{:04x}", u32::from(c))?;
            rest = &rest[at + c.len_utf8()..];
        }
        w.write_all(rest.as_bytes())
    }

    // The layout is F's: the methods PrettyFormatter overrides are passed on.
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn end_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_key(w)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ESC (a title and a clear), BEL, CR LF and a forged row, DEL, C1 (NEL, CSI) and a bidi
    /// override with its pop: a daemon's string no output may print raw.
    const HOSTILE: &str = "SN1\u{1b}]0;pwned\u{7}\u{1b}[2J\r\n9  fake-row\u{7f}\u{85}\u{9b}31m\u{202e}gpj.exe\u{202c}";

    #[test]
    fn control_and_bidi_characters_are_escaped_and_nothing_else() {
        let shown = printable(HOSTILE);
        assert!(!shown.chars().any(escaped), "{shown:?}");
        assert_eq!(
            shown,
            r"SN1\u{1b}]0;pwned\u{7}\u{1b}[2J\r\n9  fake-row\u{7f}\u{85}\u{9b}31m\u{202e}gpj.exe\u{202c}"
        );
        assert!(matches!(printable("disk 3: Ünïcode ok"), Cow::Borrowed("disk 3: Ünïcode ok")));
        for c in ['\u{7f}', '\u{80}', '\u{9f}', '\u{200f}', '\u{2067}', '\u{61c}'] {
            assert!(escaped(c), "{c:?}");
        }
        for c in ['\u{a0}', '\u{ff}', '\u{2010}', '\u{2070}', 'é'] {
            assert!(!escaped(c), "{c:?}");
        }
    }

    #[test]
    fn json_escapes_del_c1_and_bidi_too_and_still_parses_back() {
        let value = serde_json::json!({"id": HOSTILE, HOSTILE: [HOSTILE, 1, true, null], "plain": "Ünïcode"});
        for text in [json(&value), json_pretty(&value)] {
            assert!(!text.chars().any(|c| escaped(c) && c != '\n'), "{text:?}");
            assert!(text.contains(r"fake-row\u007f\u0085\u009b31m\u202egpj.exe\u202c"), "{text}");
            assert!(text.contains(r"\u001b]0;pwned\u0007\u001b[2J\r\n9"), "{text}");
            assert!(text.contains("Ünïcode"), "{text}");
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back, value);
        }
        // The layouts are serde_json's own.
        let plain = serde_json::json!({"a": [1, {"b": "c"}], "d": {}});
        assert_eq!(json(&plain), serde_json::to_string(&plain).unwrap());
        assert_eq!(json_pretty(&plain), serde_json::to_string_pretty(&plain).unwrap());
    }

    #[test]
    fn shown_values_are_bounded_before_they_are_escaped() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("abcd", 3), "abc…");
        assert_eq!(bounded("ééééé", 2), "éé…");
        let long = format!("{}\u{1b}[2J", "v".repeat(VALUE));
        let s = shown(&long, VALUE);
        assert_eq!(s, format!("{}…", "v".repeat(VALUE)));
        let s = shown(&format!("\u{9b}{}", "x".repeat(MESSAGE * 2)), MESSAGE);
        assert!(s.starts_with(r"\u{9b}xx") && s.ends_with('…') && s.chars().count() == MESSAGE + 6, "{}", s.len());
    }
}
