//! The HRESULTs the WMI layer tells apart, and how they are named in errors.

use windows::core::HRESULT;

/// HRESULTs the layer tells apart (winerror.h, wbemcli.h), as u32 for matching.
pub(super) mod hr {
    pub const E_ACCESSDENIED: u32 = 0x8007_0005;
    pub const E_NOINTERFACE: u32 = 0x8000_4002;
    pub const RPC_E_CHANGED_MODE: u32 = 0x8001_0106;
    pub const RPC_E_DISCONNECTED: u32 = 0x8001_0108;
    pub const RPC_E_TOO_LATE: u32 = 0x8001_0119;
    /// HRESULT_FROM_WIN32(RPC_S_SERVER_UNAVAILABLE = 1722).
    pub const RPC_S_SERVER_UNAVAILABLE: u32 = 0x8007_06BA;
    /// HRESULT_FROM_WIN32(RPC_S_CALL_FAILED = 1726).
    pub const RPC_S_CALL_FAILED: u32 = 0x8007_06BE;
    pub const WBEM_S_FALSE: u32 = 0x0000_0001;
    pub const WBEM_S_TIMEDOUT: u32 = 0x0004_0004;
    pub const WBEM_E_FAILED: u32 = 0x8004_1001;
    pub const WBEM_E_NOT_FOUND: u32 = 0x8004_1002;
    pub const WBEM_E_ACCESS_DENIED: u32 = 0x8004_1003;
    pub const WBEM_E_PROVIDER_FAILURE: u32 = 0x8004_1004;
    pub const WBEM_E_TYPE_MISMATCH: u32 = 0x8004_1005;
    pub const WBEM_E_OUT_OF_MEMORY: u32 = 0x8004_1006;
    pub const WBEM_E_INVALID_PARAMETER: u32 = 0x8004_1008;
    pub const WBEM_E_NOT_AVAILABLE: u32 = 0x8004_1009;
    pub const WBEM_E_NOT_SUPPORTED: u32 = 0x8004_100C;
    pub const WBEM_E_INVALID_NAMESPACE: u32 = 0x8004_100E;
    pub const WBEM_E_INVALID_OBJECT: u32 = 0x8004_100F;
    pub const WBEM_E_INVALID_CLASS: u32 = 0x8004_1010;
    pub const WBEM_E_PROVIDER_NOT_FOUND: u32 = 0x8004_1011;
    pub const WBEM_E_PROVIDER_LOAD_FAILURE: u32 = 0x8004_1013;
    pub const WBEM_E_TRANSPORT_FAILURE: u32 = 0x8004_1015;
    pub const WBEM_E_INVALID_QUERY: u32 = 0x8004_1017;
    pub const WBEM_E_INVALID_QUERY_TYPE: u32 = 0x8004_1018;
    pub const WBEM_E_ALREADY_EXISTS: u32 = 0x8004_1019;
    pub const WBEM_E_INVALID_SYNTAX: u32 = 0x8004_1021;
    pub const WBEM_E_INVALID_METHOD: u32 = 0x8004_102E;
    pub const WBEM_E_INVALID_METHOD_PARAMETERS: u32 = 0x8004_102F;
    pub const WBEM_E_INVALID_PROPERTY: u32 = 0x8004_1031;
    pub const WBEM_E_INVALID_OBJECT_PATH: u32 = 0x8004_103A;
    pub const WBEM_E_METHOD_NOT_IMPLEMENTED: u32 = 0x8004_1055;
    pub const WBEM_E_METHOD_DISABLED: u32 = 0x8004_1056;
    pub const WBEM_E_TIMED_OUT: u32 = 0x8004_1069;
}

fn hr_name(code: u32) -> Option<&'static str> {
    use hr::*;
    Some(match code {
        E_ACCESSDENIED => "E_ACCESSDENIED",
        E_NOINTERFACE => "E_NOINTERFACE",
        RPC_E_CHANGED_MODE => "RPC_E_CHANGED_MODE",
        RPC_E_DISCONNECTED => "RPC_E_DISCONNECTED",
        RPC_E_TOO_LATE => "RPC_E_TOO_LATE",
        RPC_S_SERVER_UNAVAILABLE => "RPC_S_SERVER_UNAVAILABLE",
        RPC_S_CALL_FAILED => "RPC_S_CALL_FAILED",
        WBEM_E_FAILED => "WBEM_E_FAILED",
        WBEM_E_NOT_FOUND => "WBEM_E_NOT_FOUND",
        WBEM_E_ACCESS_DENIED => "WBEM_E_ACCESS_DENIED",
        WBEM_E_PROVIDER_FAILURE => "WBEM_E_PROVIDER_FAILURE",
        WBEM_E_TYPE_MISMATCH => "WBEM_E_TYPE_MISMATCH",
        WBEM_E_OUT_OF_MEMORY => "WBEM_E_OUT_OF_MEMORY",
        WBEM_E_INVALID_PARAMETER => "WBEM_E_INVALID_PARAMETER",
        WBEM_E_NOT_AVAILABLE => "WBEM_E_NOT_AVAILABLE",
        WBEM_E_NOT_SUPPORTED => "WBEM_E_NOT_SUPPORTED",
        WBEM_E_INVALID_NAMESPACE => "WBEM_E_INVALID_NAMESPACE",
        WBEM_E_INVALID_OBJECT => "WBEM_E_INVALID_OBJECT",
        WBEM_E_INVALID_CLASS => "WBEM_E_INVALID_CLASS",
        WBEM_E_PROVIDER_NOT_FOUND => "WBEM_E_PROVIDER_NOT_FOUND",
        WBEM_E_PROVIDER_LOAD_FAILURE => "WBEM_E_PROVIDER_LOAD_FAILURE",
        WBEM_E_TRANSPORT_FAILURE => "WBEM_E_TRANSPORT_FAILURE",
        WBEM_E_INVALID_QUERY => "WBEM_E_INVALID_QUERY",
        WBEM_E_INVALID_QUERY_TYPE => "WBEM_E_INVALID_QUERY_TYPE",
        WBEM_E_ALREADY_EXISTS => "WBEM_E_ALREADY_EXISTS",
        WBEM_E_INVALID_SYNTAX => "WBEM_E_INVALID_SYNTAX",
        WBEM_E_INVALID_METHOD => "WBEM_E_INVALID_METHOD",
        WBEM_E_INVALID_METHOD_PARAMETERS => "WBEM_E_INVALID_METHOD_PARAMETERS",
        WBEM_E_INVALID_PROPERTY => "WBEM_E_INVALID_PROPERTY",
        WBEM_E_INVALID_OBJECT_PATH => "WBEM_E_INVALID_OBJECT_PATH",
        WBEM_E_METHOD_NOT_IMPLEMENTED => "WBEM_E_METHOD_NOT_IMPLEMENTED",
        WBEM_E_METHOD_DISABLED => "WBEM_E_METHOD_DISABLED",
        WBEM_E_TIMED_OUT => "WBEM_E_TIMED_OUT",
        _ => return None,
    })
}

/// `0x8004100E (WBEM_E_INVALID_NAMESPACE)`; codes outside the table get the system's text, if any.
pub(super) fn hr_text(code: HRESULT) -> String {
    let n = code.0 as u32;
    match hr_name(n) {
        Some(name) => format!("0x{n:08X} ({name})"),
        None => {
            let msg = code.message();
            let msg = msg.trim();
            if msg.is_empty() {
                format!("0x{n:08X}")
            } else {
                format!("0x{n:08X} ({msg})")
            }
        }
    }
}

/// The connection itself broke (winmgmt restarted, RPC gone): worth one retry on a fresh one.
pub(super) fn is_transport(code: HRESULT) -> bool {
    matches!(
        code.0 as u32,
        hr::RPC_E_DISCONNECTED | hr::RPC_S_SERVER_UNAVAILABLE | hr::RPC_S_CALL_FAILED | hr::WBEM_E_TRANSPORT_FAILURE
    )
}

/// The namespace or class does not exist here (no provider installed).
pub(super) fn is_missing(code: HRESULT) -> bool {
    matches!(code.0 as u32, hr::WBEM_E_INVALID_CLASS | hr::WBEM_E_NOT_FOUND | hr::WBEM_E_INVALID_NAMESPACE)
}
