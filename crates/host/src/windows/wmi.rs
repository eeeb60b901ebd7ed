//! WMI as the backend sees it: typed queries built in one place (WQL literals are escaped only
//! here), rows of named values, and method calls with named arguments.
//!
//! The real [`Wmi`] (COM, in `sys::windows::wmi`) checks that a queried class exists before it
//! trusts an empty answer: Wine, and a Windows without the Storage or SMB providers, answer zero
//! rows for a class they don't know, and "no rows" must never read as "nothing there".

use crate::types::Secret;
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::fmt;

/// The WMI namespaces the backend uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Namespace {
    /// `ROOT\CIMV2`: Win32_* classes.
    Cimv2,
    /// `ROOT\Microsoft\Windows\Storage`: MSFT_Disk, MSFT_Partition, MSFT_Volume, MSFT_iSCSI*.
    Storage,
    /// `ROOT\Microsoft\Windows\SMB`: MSFT_SmbGlobalMapping.
    Smb,
}

impl Namespace {
    pub fn path(self) -> &'static str {
        match self {
            Namespace::Cimv2 => r"ROOT\CIMV2",
            Namespace::Storage => r"ROOT\Microsoft\Windows\Storage",
            Namespace::Smb => r"ROOT\Microsoft\Windows\SMB",
        }
    }
}

/// A property value or method argument.
#[derive(Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// Signed and unsigned integers up to 32 bits, and sint64.
    I64(i64),
    /// uint64. WMI hands these over as decimal strings; [`Row::u64`] accepts both.
    U64(u64),
    Str(String),
    /// A string argument that must never be logged (credentials, CHAP secrets). The real
    /// layer passes it as a string; `Debug` redacts it.
    Secret(Secret),
    StrArray(Vec<String>),
    /// Arrays of integers (e.g. uint16[] OperationalStatus).
    IntArray(Vec<i64>),
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::I64(n) => write!(f, "{n}"),
            Value::U64(n) => write!(f, "{n}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Secret(s) => write!(f, "{s:?}"),
            Value::StrArray(v) => write!(f, "{v:?}"),
            Value::IntArray(v) => write!(f, "{v:?}"),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}
impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Value::I64(n.into())
    }
}
impl From<u16> for Value {
    fn from(n: u16) -> Self {
        Value::I64(n.into())
    }
}
impl From<u64> for Value {
    fn from(n: u64) -> Self {
        Value::U64(n)
    }
}

/// One instance (or a method's out-parameters): its class, its object path (`__PATH`, used to
/// call its methods; empty for out-parameters) and the properties that were asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub class: String,
    pub path: String,
    pub props: BTreeMap<String, Value>,
}

impl Row {
    pub fn new(class: impl Into<String>, path: impl Into<String>) -> Self {
        Row { class: class.into(), path: path.into(), props: BTreeMap::new() }
    }

    /// Builder for scripted rows.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.props.insert(name.to_owned(), value.into());
        self
    }

    /// The value of `name`; [`Value::Null`] when absent (WMI's NULL and "not selected" alike).
    pub fn get(&self, name: &str) -> &Value {
        self.props.get(name).unwrap_or(&Value::Null)
    }

    fn wrong(&self, name: &str, expected: &str) -> Error {
        Error::internal(format!(
            "WMI {} {}: property {name} is {:?}, expected {expected}",
            self.class,
            if self.path.is_empty() { "result" } else { &self.path },
            self.get(name)
        ))
    }

    /// A string property; NULL is an error.
    pub fn str(&self, name: &str) -> Result<&str> {
        self.opt_str(name)?.ok_or_else(|| self.wrong(name, "a string"))
    }

    /// A string property that may be NULL.
    pub fn opt_str(&self, name: &str) -> Result<Option<&str>> {
        match self.get(name) {
            Value::Str(s) => Ok(Some(s)),
            Value::Null => Ok(None),
            _ => Err(self.wrong(name, "a string")),
        }
    }

    /// An unsigned integer, from an integer value or WMI's decimal string for uint64.
    pub fn u64(&self, name: &str) -> Result<u64> {
        match self.get(name) {
            Value::U64(n) => Ok(*n),
            Value::I64(n) if *n >= 0 => Ok(*n as u64),
            Value::Str(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().map_err(|_| self.wrong(name, "an unsigned integer"))
            }
            _ => Err(self.wrong(name, "an unsigned integer")),
        }
    }

    pub fn u32(&self, name: &str) -> Result<u32> {
        u32::try_from(self.u64(name)?).map_err(|_| self.wrong(name, "a 32-bit unsigned integer"))
    }

    pub fn u16(&self, name: &str) -> Result<u16> {
        u16::try_from(self.u64(name)?).map_err(|_| self.wrong(name, "a 16-bit unsigned integer"))
    }

    /// A string array; NULL (no element, as WMI gives an empty array) is empty.
    pub fn strs(&self, name: &str) -> Result<&[String]> {
        match self.get(name) {
            Value::StrArray(v) => Ok(v),
            Value::Null => Ok(&[]),
            _ => Err(self.wrong(name, "an array of strings")),
        }
    }

    pub fn bool(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            Value::Bool(b) => Ok(*b),
            _ => Err(self.wrong(name, "a boolean")),
        }
    }

    /// A method's `ReturnValue` (0 is success).
    pub fn return_value(&self) -> Result<u32> {
        self.u32("ReturnValue")
    }
}

/// A WQL literal for a string: single-quoted, with `\` and `'` escaped by a backslash (WQL's
/// escape character). A NUL can't be passed through COM's BSTR intact and no name WMI stores
/// holds one, so it is refused rather than truncated.
pub fn string_literal(s: &str) -> Result<String> {
    if s.contains('\0') {
        return Err(Error::invalid(format!("{s:?} contains a NUL character")));
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\\' || c == '\'' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    Ok(out)
}

/// A comparison in a WHERE clause.
#[derive(Debug, Clone, PartialEq)]
enum Cond {
    Eq(&'static str, Value),
    Ne(&'static str, Value),
}

/// `SELECT props FROM class [WHERE a = v AND …]` in one namespace. Class and property names
/// are compile-time constants; only values come from requests, and they are escaped when the
/// query is rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub namespace: Namespace,
    pub class: &'static str,
    pub props: Vec<&'static str>,
    conds: Vec<Cond>,
}

impl Query {
    /// Every instance of `class`, with the properties of `props` (`__PATH` is always fetched).
    pub fn select(namespace: Namespace, class: &'static str, props: &[&'static str]) -> Self {
        Query { namespace, class, props: props.to_vec(), conds: Vec::new() }
    }

    /// `AND prop = value`.
    pub fn eq(mut self, prop: &'static str, value: impl Into<Value>) -> Self {
        self.conds.push(Cond::Eq(prop, value.into()));
        self
    }

    /// `AND prop <> value`.
    pub fn ne(mut self, prop: &'static str, value: impl Into<Value>) -> Self {
        self.conds.push(Cond::Ne(prop, value.into()));
        self
    }

    /// The conditions as (property, value, equal?) for scripted platforms that evaluate them.
    pub fn conditions(&self) -> impl Iterator<Item = (&'static str, &Value, bool)> {
        self.conds.iter().map(|c| match c {
            Cond::Eq(p, v) => (*p, v, true),
            Cond::Ne(p, v) => (*p, v, false),
        })
    }

    /// The WQL text.
    pub fn wql(&self) -> Result<String> {
        let mut q = format!(
            "SELECT {} FROM {}",
            if self.props.is_empty() { "*".to_owned() } else { self.props.join(", ") },
            self.class
        );
        for (i, (prop, value, equal)) in self.conditions().enumerate() {
            q.push_str(if i == 0 { " WHERE " } else { " AND " });
            q.push_str(prop);
            q.push_str(if equal { " = " } else { " <> " });
            q.push_str(&literal(value)?);
        }
        Ok(q)
    }
}

fn literal(v: &Value) -> Result<String> {
    Ok(match v {
        Value::Null => "NULL".to_owned(),
        Value::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_owned(),
        Value::I64(n) => n.to_string(),
        Value::U64(n) => n.to_string(),
        Value::Str(s) => string_literal(s)?,
        Value::Secret(_) | Value::StrArray(_) | Value::IntArray(_) => {
            return Err(Error::internal(format!("{v:?} can't be a WQL literal")))
        }
    })
}

/// WMI access. Implementations: the COM one in `sys::windows::wmi`, scripted ones in tests.
pub trait Wmi: Send + Sync {
    /// The rows `query` selects. A class the namespace doesn't have is an error
    /// ([`Error::FailedPrecondition`] naming class and namespace: the host lacks the provider),
    /// never zero rows.
    fn query(&self, query: &Query) -> Result<Vec<Row>>;

    /// Calls `method` with `args` (by name) on the instance at object path `target` (a row's
    /// [`Row::path`]), or, for a static method, on the class named `target`. Returns the
    /// out-parameters, `ReturnValue` among them; a non-zero `ReturnValue` is not an error here.
    fn call(&self, namespace: Namespace, target: &str, method: &str, args: &[(&'static str, Value)]) -> Result<Row>;

    /// The instances of `result_class` associated with the instance at object path `path`
    /// through `assoc_class` (`ASSOCIATORS OF {path} WHERE AssocClass = … ResultClass = …`), with
    /// the properties of `props` and `__PATH`.
    fn associators(
        &self,
        namespace: Namespace,
        path: &str,
        assoc_class: &'static str,
        result_class: &'static str,
        props: &[&'static str],
    ) -> Result<Vec<Row>>;
}

/// The WQL of [`Wmi::associators`]. The object path comes from WMI itself (a row's `__PATH`);
/// one holding a brace, which would end the reference early, is refused.
pub fn associators_wql(path: &str, assoc_class: &'static str, result_class: &'static str) -> Result<String> {
    if path.contains(['{', '}', '\0']) {
        return Err(Error::internal(format!("object path {path:?} can't be used in ASSOCIATORS OF")));
    }
    Ok(format!("ASSOCIATORS OF {{{path}}} WHERE AssocClass = {assoc_class} ResultClass = {result_class}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_literals_escape_quote_and_backslash() {
        let cases = [
            ("", "''"),
            ("plain", "'plain'"),
            (r"\\?\Volume{0b1c}\", r"'\\\\?\\Volume{0b1c}\\'"),
            ("o'brien", r"'o\'brien'"),
            (r"\'", r"'\\\''"),
            ("' OR Name <> '", r"'\' OR Name <> \''"),
            ("\"double\"", "'\"double\"'"),
            ("ünï\u{200b}", "'ünï\u{200b}'"),
        ];
        for (raw, want) in cases {
            assert_eq!(string_literal(raw).unwrap(), want, "{raw:?}");
        }
        assert!(matches!(string_literal("a\0b"), Err(Error::InvalidArgument(_))));
    }

    /// Undoes [`string_literal`] as WQL's lexer reads it, to check that no input can end the
    /// literal early.
    fn unescape(lit: &str) -> Option<String> {
        let body = lit.strip_prefix('\'')?.strip_suffix('\'')?;
        let mut out = String::new();
        let mut chars = body.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => out.push(chars.next()?),
                '\'' => return None,
                c => out.push(c),
            }
        }
        Some(out)
    }

    #[test]
    fn every_string_survives_a_round_trip() {
        use proptest::prelude::*;
        proptest!(|(s in "[\\\\'a-z\"{}\\- \u{80}-\u{10ff}]{0,24}")| {
            let lit = string_literal(&s).unwrap();
            prop_assert_eq!(unescape(&lit), Some(s));
        });
    }

    #[test]
    fn queries_render_as_wql() {
        let q = Query::select(Namespace::Storage, "MSFT_Partition", &["DiskNumber", "PartitionNumber"])
            .eq("DiskNumber", 3u32)
            .ne("GptType", "{e3c9e316-0b5c-4db8-817d-f92df00215ae}")
            .eq("IsHidden", false);
        assert_eq!(
            q.wql().unwrap(),
            "SELECT DiskNumber, PartitionNumber FROM MSFT_Partition WHERE DiskNumber = 3 \
             AND GptType <> '{e3c9e316-0b5c-4db8-817d-f92df00215ae}' AND IsHidden = FALSE"
        );
        let all = Query::select(Namespace::Smb, "MSFT_SmbGlobalMapping", &[]).eq("RemotePath", r"\\srv\o'x");
        assert_eq!(all.wql().unwrap(), r"SELECT * FROM MSFT_SmbGlobalMapping WHERE RemotePath = '\\\\srv\\o\'x'");
        let secret = Query::select(Namespace::Cimv2, "Win32_Service", &[]).eq("Name", Value::Secret(Secret::new("pw")));
        assert!(secret.wql().is_err());
    }

    #[test]
    fn rows_convert_and_name_what_is_wrong() {
        let row = Row::new("MSFT_Volume", r#"\\H\ROOT:MSFT_Volume.ObjectId="x""#)
            .with("Size", "10737418240")
            .with("SizeRemaining", 5u64)
            .with("FileSystemType", 14u32)
            .with("Path", r"\\?\Volume{a}\")
            .with("IsOffline", false)
            .with("Neg", Value::I64(-1));
        assert_eq!(row.u64("Size").unwrap(), 10 << 30);
        assert_eq!(row.u64("SizeRemaining").unwrap(), 5);
        assert_eq!(row.u16("FileSystemType").unwrap(), 14);
        assert!(!row.bool("IsOffline").unwrap());
        assert_eq!(row.opt_str("Missing").unwrap(), None);
        let err = row.u32("Size").unwrap_err().to_string();
        assert!(err.contains("MSFT_Volume") && err.contains("Size") && err.contains("10737418240"), "{err}");
        assert!(row.u64("Neg").is_err());
        assert!(row.str("Missing").is_err());
        assert!(row.bool("Path").is_err());
        assert!(Row::new("X", "").with("N", "12a").u64("N").is_err());
        assert!(Row::new("X", "").with("N", "").u64("N").is_err());
    }

    #[test]
    fn associators_render_and_refuse_braces() {
        let path = r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_Volume.ObjectId="v""#;
        assert_eq!(
            associators_wql(path, "MSFT_PartitionToVolume", "MSFT_Partition").unwrap(),
            format!("ASSOCIATORS OF {{{path}}} WHERE AssocClass = MSFT_PartitionToVolume ResultClass = MSFT_Partition")
        );
        assert!(associators_wql("a}b", "A", "B").is_err());
        assert!(associators_wql("a{b", "A", "B").is_err());
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let args = [("Credential", Value::Secret(Secret::new("hunter2")))];
        assert!(!format!("{args:?}").contains("hunter2"));
    }
}
