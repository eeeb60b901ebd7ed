//! Lexical rules for Windows paths (owned by the Windows filesystem work; stub until then).
