//! gRPC server reflection (`grpc.reflection.v1` and the older `v1alpha` that some tools still
//! ask for) on every endpoint, so that standard tools (grpcurl, grpcui, Postman) can list and
//! call the API without the .proto files.
//!
//! Each endpoint describes only what it serves: its own API's file and service (`v1.Disk` on the
//! disk v1 endpoint), the health service and reflection itself. Upstream has no reflection: this
//! adds the paths `/grpc.reflection.v1.ServerReflection/` and
//! `/grpc.reflection.v1alpha.ServerReflection/` and changes nothing else on the endpoint.

use crate::body::CallBody;
use prost::Message;
use std::convert::Infallible;
use tonic_reflection::server::Builder;
use tower::util::BoxCloneSyncService;

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
    (BoxCloneSyncService::new(v1), BoxCloneSyncService::new(v1alpha))
}
