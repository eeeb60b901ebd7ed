//! The one place where host errors become gRPC statuses.

use csi_proxy_host::Error;
use tonic::{Code, Status};

pub fn code_of(err: &Error) -> Code {
    match err {
        Error::InvalidArgument(_) => Code::InvalidArgument,
        Error::NotFound(_) => Code::NotFound,
        Error::AlreadyExists(_) => Code::AlreadyExists,
        Error::FailedPrecondition(_) => Code::FailedPrecondition,
        Error::PermissionDenied(_) => Code::PermissionDenied,
        Error::Unimplemented { .. } => Code::Unimplemented,
        Error::Aborted(_) => Code::Aborted,
        Error::Unavailable(_) => Code::Unavailable,
        Error::Internal(_) => Code::Internal,
    }
}

/// The status of a failed call; its message bounded (see `bound_message`).
pub fn to_status(err: &Error) -> Status {
    Status::new(code_of(err), csi_proxy_host::error::bound_message(&err.to_string()))
}

/// Go's spelling of a code, as upstream's metrics label `grpc_code` carries it.
pub fn go_code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_code_and_keeps_the_message() {
        let cases = [
            (Error::invalid("bad disk \"x\""), Code::InvalidArgument),
            (Error::not_found("disk 7 not found"), Code::NotFound),
            (Error::exists("link L exists"), Code::AlreadyExists),
            (Error::precondition("dir not empty"), Code::FailedPrecondition),
            (Error::denied("outside roots"), Code::PermissionDenied),
            (Error::Unimplemented { operation: "Disk.Rescan", os: "linux" }, Code::Unimplemented),
            (Error::Aborted("disk 7 is locked".into()), Code::Aborted),
            (Error::Unavailable("wmi down".into()), Code::Unavailable),
            (Error::internal("boom"), Code::Internal),
        ];
        for (err, code) in cases {
            let s = to_status(&err);
            assert_eq!(s.code(), code, "{err}");
            assert_eq!(s.message(), err.to_string());
        }
        let s = to_status(&Error::Unimplemented { operation: "Disk.Rescan", os: "linux" });
        assert_eq!(s.message(), "Disk.Rescan is not implemented on linux");
    }
}
