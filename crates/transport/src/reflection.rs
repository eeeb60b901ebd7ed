//! gRPC server reflection (`grpc.reflection.v1` and the older `v1alpha` that some tools still
//! ask for) on every endpoint, so that standard tools (grpcurl, grpcui, Postman) can list and
//! call the API without the .proto files.
//!
//! Each endpoint describes only what it serves: its own API's file and service (`v1.Disk` on the
//! disk v1 endpoint), the health service and reflection itself. Upstream has no reflection: this
//! adds the paths `/grpc.reflection.v1.ServerReflection/` and
//! `/grpc.reflection.v1alpha.ServerReflection/` and changes nothing else on the endpoint.

use crate::body::CallBody;
use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use prost::Message;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tonic_reflection::server::Builder;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

/// Paths of the two reflection services' methods start with these.
pub const PATH_PREFIXES: [&str; 2] =
    ["/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"];

/// A reflection request names one symbol or file; anything bigger is refused before it is decoded.
const MAX_REQUEST_BYTES: usize = 4096;

pub(crate) type Reflection =
    BoxCloneSyncService<http::Request<CallBody>, http::Response<tonic::body::Body>, Infallible>;

/// The endpoint's own .proto file (of its API's version and group), encoded as a descriptor set.
fn api_file(api: &csi_proxy_wire::Api) -> Vec<u8> {
    let all = prost_types::FileDescriptorSet::decode(csi_proxy_wire::FILE_DESCRIPTOR_SET)
        .expect("the wire crate's descriptor set decodes (checked by its tests)");
    let file = all
        .file
        .into_iter()
        .filter(|f| f.package() == api.version && f.service.iter().any(|s| s.name() == api.group.service()));
    prost_types::FileDescriptorSet { file: file.collect() }.encode_to_vec()
}

/// The v1 and v1alpha reflection services of the endpoint serving `api`.
pub(crate) fn services(api: &csi_proxy_wire::Api) -> (Reflection, Reflection) {
    let own = api_file(api);
    let builder = || {
        Builder::configure()
            .register_encoded_file_descriptor_set(&own)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name(api.service_name())
            .with_service_name("grpc.health.v1.Health")
    };
    let v1 = builder()
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .build_v1()
        .expect("the descriptor sets are well formed")
        .max_decoding_message_size(MAX_REQUEST_BYTES);
    let v1alpha = builder()
        .with_service_name("grpc.reflection.v1alpha.ServerReflection")
        .build_v1alpha()
        .expect("the descriptor sets are well formed")
        .max_decoding_message_size(MAX_REQUEST_BYTES);
    // The built services' types cannot be named (`impl ServerReflection`): boxed.
    (refusing_oversized(v1), refusing_oversized(v1alpha))
}

/// `service` with an oversized request answered by an error status. tonic-reflection's stream
/// handler stops at any error of the request stream and the call then ends with OK and no answer,
/// so a client could not tell the refusal from an empty reply. The request's messages are watched
/// here instead, and if one was over [`MAX_REQUEST_BYTES`] the call's final status becomes
/// RESOURCE_EXHAUSTED, what gRPC answers for a message over the receive limit.
fn refusing_oversized<S>(service: S) -> Reflection
where
    S: Service<http::Request<Watched>, Response = http::Response<tonic::body::Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
{
    BoxCloneSyncService::new(tower::service_fn(move |req: http::Request<CallBody>| {
        let service = service.clone();
        async move {
            let oversized = Arc::new(AtomicBool::new(false));
            let req = req.map(|body| Watched::new(body, oversized.clone()));
            let answer = service.oneshot(req).await?;
            Ok(answer.map(|body| tonic::body::Body::new(Amended { body, oversized })))
        }
    }))
}

/// A reflection request body, passed on as it is, noting whether a gRPC message in it (after a
/// 5-byte prefix: a compression flag and the length, big-endian) is over [`MAX_REQUEST_BYTES`].
pub(crate) struct Watched {
    body: CallBody,
    oversized: Arc<AtomicBool>,
    prefix: [u8; 5],
    /// Bytes of `prefix` read so far.
    have: usize,
    /// Bytes of the current message not yet seen.
    rest: u64,
}

impl Watched {
    fn new(body: CallBody, oversized: Arc<AtomicBool>) -> Watched {
        Watched { body, oversized, prefix: [0; 5], have: 0, rest: 0 }
    }

    fn scan(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.rest > 0 {
                let n = usize::try_from(self.rest).map_or(data.len(), |r| r.min(data.len()));
                self.rest -= n as u64;
                data = &data[n..];
                continue;
            }
            let n = (self.prefix.len() - self.have).min(data.len());
            self.prefix[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == self.prefix.len() {
                let [_, a, b, c, d] = self.prefix;
                let len = u32::from_be_bytes([a, b, c, d]);
                if usize::try_from(len).map_or(true, |l| l > MAX_REQUEST_BYTES) {
                    self.oversized.store(true, Ordering::SeqCst);
                }
                self.rest = u64::from(len);
                self.have = 0;
            }
        }
    }
}

impl Body for Watched {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if let Some(Ok(Some(data))) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
            let chunk = data.chunk().to_vec();
            self.scan(&chunk);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An answer body whose final status is RESOURCE_EXHAUSTED if its request was oversized.
struct Amended {
    body: tonic::body::Body,
    oversized: Arc<AtomicBool>,
}

impl Body for Amended {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        Poll::Ready(match frame {
            Some(Ok(f)) if f.is_trailers() && self.oversized.load(Ordering::SeqCst) => {
                let mut trailers = f.into_trailers().unwrap_or_default();
                trailers.insert("grpc-status", http::HeaderValue::from(tonic::Code::ResourceExhausted as i32));
                trailers.insert("grpc-message", http::HeaderValue::from_static(OVERSIZED));
                Some(Ok(Frame::trailers(trailers)))
            }
            other => other,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
}

/// The final status message of a reflection call whose request was too large (ASCII, so it needs
/// no percent-encoding).
const OVERSIZED: &str = "a reflection request message is larger than 4096 bytes";
