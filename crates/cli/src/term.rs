//! Text from the daemon made safe for a terminal. Disk serials, page-83 identifiers, volume
//! labels and error messages come from whoever controls a disk, an iSCSI target or an SMB server;
//! printed raw, an ESC, CR or LF in them could retitle or clear the terminal, move the cursor or
//! forge a table row (kubectl escapes such text since CVE-2021-25743). Every control character
//! (C0, DEL and C1) is shown as its escape (`\u{1b}`, `\r`, `\n`); other text is unchanged.
//! JSON output needs none of this: serde_json escapes control characters itself.

use std::borrow::Cow;

/// `text` with every control character escaped.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_nothing_else() {
        // A serial that would retitle the terminal, clear it and print a fake row.
        let serial = "SN1\u{1b}]0;pwned\u{7}\u{1b}[2J\r\n9  fake-row\u{9b}31m";
        let shown = printable(serial);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(shown, r"SN1\u{1b}]0;pwned\u{7}\u{1b}[2J\r\n9  fake-row\u{9b}31m");
        assert!(matches!(printable("disk 3: Ünïcode ok"), Cow::Borrowed("disk 3: Ünïcode ok")));
    }
}
