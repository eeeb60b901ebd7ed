//! The path of every unary call: wire request → internal operation → host → wire response.

use crate::status::{code_of, go_code_name, to_status};
use crate::Context;
use csi_proxy_host::error::{bound_message, clip};
use csi_proxy_host::{Error, Result};
use std::fmt::Debug;
use std::time::Instant;
use tonic::{Code, Request, Response, Status};

/// One internal, version-less operation: validates itself, then does its host work.
pub trait Op: Debug + Send + 'static {
    type Output: Send + 'static;
    fn run(self, ctx: &Context) -> Result<Self::Output>;
}

/// A wire request of some version, convertible into its internal operation.
pub trait IntoOp: Send + 'static {
    type Op: Op;
    fn into_op(self) -> Result<Self::Op>;
}

/// A wire response of some version, built from its operation's output.
pub trait FromOutput<T>: Sized {
    fn from_output(output: T) -> Result<Self>;
}

impl Context {
    /// Serves one unary call. Conversion and host work may block freely, and a panic anywhere in
    /// them fails only this call, with `Internal`.
    pub async fn unary<Req, Resp>(
        &self,
        service: &'static str,
        method: &'static str,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: IntoOp,
        Resp: FromOutput<<Req::Op as Op>::Output> + Send + 'static,
    {
        let start = Instant::now();
        if let Some(o) = &self.0.observer {
            o.started(service, method);
        }
        let ctx = self.clone();
        let message = request.into_inner();
        // The work also returns the request as logged, rendered only when it will be written (one
        // line per call, together with the outcome, after the work).
        let work = move || -> (Result<Resp>, Option<String>) {
            let op = match message.into_op() {
                Ok(op) => op,
                Err(e) => return (Err(e), None),
            };
            let shown = tracing::enabled!(target: "csi_proxy::call", tracing::Level::DEBUG).then(|| format!("{op:?}"));
            (op.run(&ctx).and_then(Resp::from_output), shown)
        };
        let joined = match tokio::runtime::Handle::current().runtime_flavor() {
            // The daemon: run on this worker thread, while tokio moves its other tasks to a
            // fresh one. This saves the two thread hand-offs of spawn_blocking, which dominate
            // the round trip of cheap calls.
            tokio::runtime::RuntimeFlavor::MultiThread => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tokio::task::block_in_place(work)))
                    .map_err(|payload| payload_message(payload.as_ref()))
            }
            // block_in_place is not available on a current-thread runtime.
            _ => tokio::task::spawn_blocking(work).await.map_err(panic_message),
        };
        let (result, shown) = match joined {
            Ok(done) => done,
            Err(why) => {
                (Err(Error::internal(format!("{service}/{method} failed: the handler panicked ({why})"))), None)
            }
        };
        let elapsed = start.elapsed();
        let code = match &result {
            Ok(_) => Code::Ok,
            Err(e) => code_of(e),
        };
        if let Some(o) = &self.0.observer {
            o.handled(service, method, go_code_name(code), elapsed);
        }
        // Requests and errors can quote values of any size: the log line is bounded like the
        // status (see `bound_message`).
        let request = bound_message(shown.as_deref().unwrap_or("-"));
        let request = request.as_ref();
        match result {
            Ok(resp) => {
                tracing::debug!(target: "csi_proxy::call", %service, %method, request, ?elapsed, "ok");
                Ok(Response::new(resp))
            }
            Err(e) => {
                let status = to_status(&e);
                let error = status.message();
                if code == Code::Internal {
                    tracing::error!(target: "csi_proxy::call", %service, %method, request, ?elapsed, error, "failed");
                } else {
                    tracing::info!(target: "csi_proxy::call", %service, %method, request, ?elapsed, code = ?code, error, "failed");
                }
                Err(status)
            }
        }
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return e.to_string();
    }
    payload_message(e.into_panic().as_ref())
}

fn payload_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Parses a disk number that older versions carry as a decimal string. Only plain ASCII digits
/// are accepted (no sign, no blanks) and values beyond u32 are refused rather than truncated.
pub fn parse_disk_number(field: &str, value: &str) -> Result<u32> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} is empty: expected a decimal disk number")));
    }
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::invalid(format!(
            "{field} {:?} is not a decimal disk number (expected digits 0-9 only)",
            clip(value)
        )));
    }
    value.parse::<u32>().map_err(|_| {
        Error::invalid(format!("{field} {:?} is out of range: disk numbers go up to {}", clip(value), u32::MAX))
    })
}

/// Converts a size or count that the wire carries as int64 into the host's unsigned form.
pub fn non_negative(field: &str, value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::invalid(format!("{field} {value} is negative: expected 0 or more")))
}

/// Converts an unsigned host value into the wire's int64, refusing silent wrap-around.
pub fn to_i64(field: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::internal(format!("{field} {value} does not fit the wire's int64")))
}

/// Rejects an empty required string field.
pub fn required<'a>(field: &str, value: &'a str) -> Result<&'a str> {
    if value.is_empty() {
        Err(Error::invalid(format!("{field} is empty")))
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_numbers_parse_strictly() {
        assert_eq!(parse_disk_number("diskID", "0").unwrap(), 0);
        assert_eq!(parse_disk_number("diskID", "4294967295").unwrap(), u32::MAX);
        for bad in ["", "-1", "+1", " 1", "1 ", "0x10", "abc", "4294967296", "99999999999999999999999"] {
            let e = parse_disk_number("diskID", bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}");
            assert!(e.to_string().contains("diskID"), "{e}");
            if !bad.is_empty() {
                assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
            }
        }
        assert!(parse_disk_number("diskID", "4294967296").unwrap_err().to_string().contains("out of range"));
    }

    #[test]
    fn sizes_refuse_negative_values() {
        assert_eq!(non_negative("size_bytes", 5).unwrap(), 5);
        assert!(non_negative("size_bytes", -1).unwrap_err().to_string().contains("size_bytes -1"));
        assert!(to_i64("total_bytes", u64::MAX).is_err());
    }
}
