//! What the tests that call every method from its descriptor share: raw request bytes built
//! from the wire descriptors, and one call through a server's service.

#![allow(dead_code)] // each test file uses its part

use bytes::{Buf, BufMut};
use csi_proxy_server::{service, Context};
use csi_proxy_wire::{Api, Caller, APIS, DRY_RUN_METADATA, PLAN_METADATA};
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor, Value};
use std::sync::Arc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

/// Request and response bytes as they are: the tests build the requests from the descriptors.
#[derive(Clone, Default)]
pub struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

pub fn pool() -> DescriptorPool {
    DescriptorPool::decode(csi_proxy_wire::FILE_DESCRIPTOR_SET).unwrap()
}

/// The outcome of one call: its code, its message, and the plan header if any.
pub struct Answer {
    pub code: Code,
    pub message: String,
    pub plan: Option<String>,
    pub dry_run_header: bool,
}

pub async fn call(ctx: &Context, api: Api, method: &str, request: Vec<u8>, dry_run: Option<&str>) -> Answer {
    call_as(ctx, api, method, request, dry_run, None).await
}

/// [`call`] on a connection whose caller is `caller` (as the transport would attach it).
pub async fn call_as(
    ctx: &Context,
    api: Api,
    method: &str,
    request: Vec<u8>,
    dry_run: Option<&str>,
    caller: Option<Caller>,
) -> Answer {
    let mut grpc = tonic::client::Grpc::new(service::<tonic::body::Body>(ctx, api));
    grpc.ready().await.unwrap();
    let path: http::uri::PathAndQuery = format!("/{}/{method}", api.service_name()).parse().unwrap();
    let mut req = tonic::Request::new(request);
    if let Some(v) = dry_run {
        req.metadata_mut().insert(DRY_RUN_METADATA, v.parse().unwrap());
    }
    if let Some(c) = caller {
        req.extensions_mut().insert(Arc::new(c));
    }
    match grpc.unary(req, path, Raw).await {
        Ok(r) => Answer {
            code: Code::Ok,
            message: String::new(),
            plan: r.metadata().get(PLAN_METADATA).map(|v| v.to_str().unwrap().to_string()),
            dry_run_header: r.metadata().get(DRY_RUN_METADATA).is_some_and(|v| v == "true"),
        },
        Err(s) => Answer { code: s.code(), message: s.message().to_string(), plan: None, dry_run_header: false },
    }
}

/// A request of `descriptor` from JSON (the protobuf JSON mapping).
pub fn request(descriptor: MessageDescriptor, json: &str) -> Vec<u8> {
    let mut de = serde_json::Deserializer::from_str(json);
    let m = DynamicMessage::deserialize(descriptor, &mut de).unwrap_or_else(|e| panic!("{json}: {e}"));
    prost::Message::encode_to_vec(&m)
}

/// Every field set to a plausible value: strings say "1" (a disk number in the string-typed
/// versions, a name elsewhere), numbers 1, booleans true.
pub fn filled(descriptor: MessageDescriptor, depth: usize) -> DynamicMessage {
    let mut m = DynamicMessage::new(descriptor.clone());
    if depth < 4 {
        for field in descriptor.fields() {
            let value = match field.kind() {
                Kind::String => Value::String("1".into()),
                Kind::Bool => Value::Bool(true),
                Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(1),
                Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(1),
                Kind::Uint32 | Kind::Fixed32 => Value::U32(1),
                Kind::Uint64 | Kind::Fixed64 => Value::U64(1),
                Kind::Enum(e) => Value::EnumNumber(e.values().last().map_or(0, |v| v.number())),
                Kind::Message(sub) => Value::Message(filled(sub, depth + 1)),
                _ => continue,
            };
            let value = if field.is_list() { Value::List(vec![value]) } else { value };
            if field.is_map() {
                continue;
            }
            m.set_field(&field, value);
        }
    }
    m
}

pub fn api(service: &str) -> Api {
    *APIS.iter().find(|a| a.service_name() == service).unwrap_or_else(|| panic!("{service}"))
}

pub fn input(pool: &DescriptorPool, service: &str, method: &str) -> MessageDescriptor {
    let s = pool.get_service_by_name(service).unwrap_or_else(|| panic!("{service}"));
    let m = s.methods().find(|m| m.name() == method).unwrap_or_else(|| panic!("{service}/{method}"));
    m.input()
}
