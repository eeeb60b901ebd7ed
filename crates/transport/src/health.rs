//! The standard `grpc.health.v1.Health` service, next to each endpoint's API.
//!
//! Every endpoint answers for two names: `""` (the daemon as a whole) and its API's service name
//! (`v1.Disk` on the disk v1 endpoint; other APIs' names are `NOT_FOUND` there, as their calls
//! are `Unimplemented`). Both are `NOT_SERVING` until every endpoint is bound and served — the
//! moment `/readyz` turns ready — `SERVING` from then on, and `NOT_SERVING` again as the stop
//! begins. Upstream registers no health service: this adds the path
//! `/grpc.health.v1.Health/{Check,Watch}` and changes nothing else on the endpoint.

use crate::body::CallBody;
use bytes::Bytes;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;
use tower::Service;

use crate::reflection::{self, Reflection};
use crate::BoxError;

/// Paths of the health service's methods start with this.
pub const PATH_PREFIX: &str = "/grpc.health.v1.Health/";

/// A health request holds one service name: anything bigger is refused before it is decoded.
const MAX_REQUEST_BYTES: usize = 4096;

/// The health statuses one endpoint reports.
#[derive(Debug, Clone)]
pub(crate) struct EndpointHealth {
    reporter: HealthReporter,
    api: String,
}

impl EndpointHealth {
    /// Statuses for an endpoint serving `api` (a gRPC service name), `NOT_SERVING` for now, and
    /// the service that answers them.
    pub(crate) async fn new(api: String) -> (Self, HealthServer<HealthService>) {
        let reporter = HealthReporter::new();
        let server = HealthServer::new(HealthService::from_health_reporter(reporter.clone()))
            .max_decoding_message_size(MAX_REQUEST_BYTES);
        let health = EndpointHealth { reporter, api };
        health.set(ServingStatus::NotServing).await;
        (health, server)
    }

    /// Sets both names' status; `Watch` streams get the change.
    pub(crate) async fn set(&self, status: ServingStatus) {
        for name in ["", self.api.as_str()] {
            self.reporter.set_service_status(name, status).await;
        }
    }

    /// Ends the endpoint's `Watch` streams (each delivers the last status first), so that they
    /// do not hold their connections open through the drain of a stop.
    pub(crate) async fn close(mut self) {
        let api = std::mem::take(&mut self.api);
        for name in ["", api.as_str()] {
            self.reporter.clear_service_status(name).await;
        }
    }
}

/// Sends the health service's paths to `health`, the reflection services' to `reflection`
/// (v1, v1alpha) and every other request to `api`.
#[derive(Clone)]
pub(crate) struct WithHealth<S> {
    pub(crate) api: S,
    pub(crate) health: HealthServer<HealthService>,
    pub(crate) reflection: (Reflection, Reflection),
}

type Answer = Result<http::Response<tonic::body::Body>, Infallible>;

impl<S, B> Service<http::Request<CallBody>> for WithHealth<S>
where
    S: Service<http::Request<CallBody>, Response = http::Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Ready once every service a call may go to is (tonic's servers always are), so that
        // `call` can start the call on the one it routes to without cloning it.
        std::task::ready!(self.api.poll_ready(cx))?;
        std::task::ready!(Service::<http::Request<CallBody>>::poll_ready(&mut self.health, cx))?;
        std::task::ready!(self.reflection.0.poll_ready(cx))?;
        std::task::ready!(self.reflection.1.poll_ready(cx))?;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<CallBody>) -> Self::Future {
        let path = req.uri().path();
        if path.starts_with(PATH_PREFIX) {
            Box::pin(self.health.call(req))
        } else if path.starts_with(reflection::PATH_PREFIXES[0]) {
            Box::pin(self.reflection.0.call(req))
        } else if path.starts_with(reflection::PATH_PREFIXES[1]) {
            Box::pin(self.reflection.1.call(req))
        } else {
            let call = self.api.call(req);
            Box::pin(async move { Ok(call.await?.map(tonic::body::Body::new)) })
        }
    }
}
