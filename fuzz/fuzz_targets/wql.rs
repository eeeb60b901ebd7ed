//! WQL rendering (`win::wmi`) of values that come from requests.
//!
//! Properties: a string literal holds exactly the string, read back by WQL's lexing rules, so no
//! value ends its literal early or adds a condition; a rendered query lexes into exactly the
//! conditions it was built from; an object path in ASSOCIATORS OF stays inside its braces; WMI's
//! decimal strings convert to integers exactly when they are in range.
#![no_main]

use csi_proxy_host::fuzzing::wmi::{self, Namespace, Query, Row, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (a, b) = text.split_at(text.char_indices().nth(text.chars().count() / 2).map_or(text.len(), |(i, _)| i));
    literal(&text);
    query(a, b, data);
    associators(&text);
    integers(&text);
});

fn literal(s: &str) {
    match wmi::string_literal(s) {
        Err(_) => assert!(s.contains('\0'), "{s:?} refused"),
        Ok(lit) => {
            assert!(!s.contains('\0'));
            let (value, rest) = lex_string(&lit).expect("a literal");
            assert_eq!((value.as_str(), rest), (s, ""), "{lit:?}");
        }
    }
}

fn query(a: &str, b: &str, data: &[u8]) {
    let even = data.len().is_multiple_of(2);
    let n = data.iter().fold(0i64, |n, &x| n.wrapping_mul(31).wrapping_add(i64::from(x)));
    let q = Query::select(Namespace::Storage, "MSFT_Volume", &["Path", "Size"])
        .eq("Path", a)
        .ne("FileSystemLabel", b)
        .eq("Size", Value::U64(n as u64))
        .ne("DriveType", Value::I64(n))
        .eq("IsOffline", even)
        .ne("Gone", Value::Null);
    let Ok(wql) = q.wql() else {
        assert!(a.contains('\0') || b.contains('\0'));
        return;
    };
    let want = format!(
        "SELECT Path, Size FROM MSFT_Volume WHERE Path = S AND FileSystemLabel <> S AND Size = {} \
         AND DriveType <> {n} AND IsOffline = {} AND Gone <> NULL",
        n as u64,
        if even { "TRUE" } else { "FALSE" }
    );
    // Each literal lexes back to its value; the rest of the query is exactly the template.
    let mut shape = String::new();
    let mut strings = Vec::new();
    let mut rest = wql.as_str();
    while let Some(at) = rest.find('\'') {
        shape.push_str(&rest[..at]);
        let (value, after) = lex_string(&rest[at..]).expect("a closed literal");
        strings.push(value);
        shape.push('S');
        rest = after;
    }
    shape.push_str(rest);
    assert_eq!(shape, want, "{wql}");
    assert_eq!(strings, [a, b], "{wql}");
}

/// One string literal at the start of `s` as WQL's lexer reads it (`\` escapes the next
/// character): its value and what follows it. None when it is not closed.
fn lex_string(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('\'')?.char_indices();
    let mut value = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => value.push(chars.next()?.1),
            '\'' => return Some((value, &s[1 + i + 1..])),
            c => value.push(c),
        }
    }
    None
}

fn associators(path: &str) {
    let Ok(wql) = wmi::associators_wql(path, "MSFT_DiskToPartition", "MSFT_Partition") else {
        assert!(path.contains(['{', '}', '\0']), "{path:?} refused");
        return;
    };
    let inner = wql.strip_prefix("ASSOCIATORS OF {").and_then(|r| r.split_once('}'));
    assert_eq!(inner, Some((path, " WHERE AssocClass = MSFT_DiskToPartition ResultClass = MSFT_Partition")));
}

fn integers(s: &str) {
    let row = Row::new("X", "").with("N", s);
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let want = if digits { s.parse::<u64>().ok() } else { None };
    assert_eq!(row.u64("N").ok(), want, "{s:?}");
    assert_eq!(row.u32("N").ok(), want.and_then(|n| u32::try_from(n).ok()), "{s:?}");
    assert_eq!(row.u16("N").ok(), want.and_then(|n| u16::try_from(n).ok()), "{s:?}");
}
