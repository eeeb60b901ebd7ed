//! What a call ended with, as the client, the log and the audit trail see it: the code and
//! message of a result, and the `Internal` error of a call whose conversion or host work panicked.

use crate::status::{code_of, go_code_name, to_status};
use csi_proxy_host::{Error, Result};
use tonic::Code;

/// A call's service and method (`v1.Disk`, `PartitionDisk`).
pub(crate) type Name = (&'static str, &'static str);

/// The `Internal` error of a call whose conversion or host work panicked.
pub(crate) fn panicked((service, method): Name, why: &str) -> Error {
    Error::internal(format!("{service}/{method} failed: the handler panicked ({why})"))
}

/// The message of a panic's payload.
pub(crate) fn payload_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// The code (as Go names it) and message a client gets for `result`.
pub(crate) fn outcome_of<T>(result: &Result<T>) -> (&'static str, Option<String>) {
    match result {
        Ok(_) => (go_code_name(Code::Ok), None),
        Err(e) => error_outcome(e),
    }
}

pub(crate) fn error_outcome(e: &Error) -> (&'static str, Option<String>) {
    (go_code_name(code_of(e)), Some(to_status(e).message().to_string()))
}
