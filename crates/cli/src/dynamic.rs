//! Any RPC of any API, with the request and the answer as JSON: the messages are built at run time
//! from the descriptor set compiled into the wire crate (prost-reflect), and sent with a codec
//! that encodes and decodes those dynamic messages.

use anyhow::{anyhow, Context as _};
use csi_proxy_client::{Api, Channel, Status};
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor, SerializeOptions};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Methods that only read (the wire crate's one list, which the daemon's audit uses too);
/// everything else changes the host and asks for confirmation.
pub use csi_proxy_client::wire::is_read_only;

pub fn pool() -> DescriptorPool {
    DescriptorPool::decode(csi_proxy_client::wire::FILE_DESCRIPTOR_SET)
        .expect("the wire crate's descriptor set decodes (checked by its tests)")
}

/// The methods of `api`'s service, in .proto order.
pub fn methods(pool: &DescriptorPool, api: &Api) -> Vec<MethodDescriptor> {
    let service = pool.get_service_by_name(&api.service_name()).expect("every served API has a descriptor");
    service.methods().collect()
}

/// `method` of `api`, or an error listing the ones there are.
pub fn method(pool: &DescriptorPool, api: &Api, method: &str) -> anyhow::Result<MethodDescriptor> {
    let all = methods(pool, api);
    all.iter().find(|m| m.name() == method).cloned().ok_or_else(|| {
        let names: Vec<_> = all.iter().map(|m| m.name()).collect();
        anyhow!(
            "{} has no method {:?}; it has: {}",
            api.service_name(),
            method.chars().take(64).collect::<String>(),
            names.join(", ")
        )
    })
}

/// Parses `json` as `method`'s request (field names as in the .proto or in lowerCamelCase).
pub fn request(method: &MethodDescriptor, json: &str) -> anyhow::Result<DynamicMessage> {
    let mut de = serde_json::Deserializer::from_str(json);
    let msg = DynamicMessage::deserialize(method.input(), &mut de)
        .and_then(|m| de.end().map(|()| m))
        .with_context(|| format!("the request is not a valid {} as JSON", method.input().full_name()))?;
    Ok(msg)
}

/// The answer as JSON, every field shown (defaults too), with the .proto's field names.
pub fn to_json(msg: &DynamicMessage) -> serde_json::Value {
    let options = SerializeOptions::new().skip_default_fields(false).use_proto_field_name(true);
    msg.serialize_with_options(serde_json::value::Serializer, &options).expect("a decoded message serializes to JSON")
}

/// `json` (with the .proto's field names, as [`to_json`] writes them) with the value of every
/// secret field shown as `<redacted>`, for showing a request on the screen: the fields are the
/// wire crate's one list ([`csi_proxy_client::wire::SECRET_FIELDS`]), as in the daemon's logs.
pub fn redacted(json: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match json {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(name, value)| {
                    if csi_proxy_client::wire::is_secret_field(&name) {
                        (name, Value::String("<redacted>".into()))
                    } else {
                        (name, redacted(value))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(redacted).collect()),
        other => other,
    }
}

/// Makes the call on `channel` and returns the answer.
pub async fn call(channel: Channel, method: &MethodDescriptor, req: DynamicMessage) -> Result<DynamicMessage, Status> {
    Ok(call_with(channel, method, tonic::Request::new(req)).await?.into_inner())
}

/// The same with the request's metadata as given, and the answer's kept.
pub async fn call_with(
    channel: Channel,
    method: &MethodDescriptor,
    req: tonic::Request<DynamicMessage>,
) -> Result<tonic::Response<DynamicMessage>, Status> {
    let path = format!("/{}/{}", method.parent_service().full_name(), method.name());
    let path = tonic::codegen::http::uri::PathAndQuery::try_from(path).map_err(|e| Status::internal(e.to_string()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|e| Status::unavailable(format!("connection not ready: {e}")))?;
    let codec = DynamicCodec(method.output());
    grpc.unary(req, path, codec).await
}

/// Whether an answer's headers say the daemon understands dry runs: its
/// `csi-proxy-features` lists `dry-run`. A daemon that does not (upstream's, or this one before
/// dry runs) ignores the request metadata and would do the work.
pub fn understands_dry_run(headers: &tonic::metadata::MetadataMap) -> bool {
    use csi_proxy_client::wire::FEATURES_HEADER;
    headers
        .get_all(FEATURES_HEADER)
        .iter()
        .any(|v| v.to_str().is_ok_and(|t| t.split(',').any(|f| f.trim() == "dry-run")))
}

/// Encodes dynamic requests, decodes answers as `.0`.
struct DynamicCodec(MessageDescriptor);

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicCodec;
    type Decoder = DynamicCodec;

    fn encoder(&mut self) -> Self::Encoder {
        DynamicCodec(self.0.clone())
    }

    fn decoder(&mut self) -> Self::Decoder {
        DynamicCodec(self.0.clone())
    }
}

impl Encoder for DynamicCodec {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst).map_err(|e| Status::internal(format!("encoding the request: {e}")))
    }
}

impl Decoder for DynamicCodec {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        DynamicMessage::decode(self.0.clone(), src)
            .map(Some)
            .map_err(|e| Status::internal(format!("decoding the answer as {}: {e}", self.0.full_name())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_daemon_listing_dry_run_gets_one() {
        let with = |values: &[&str]| {
            let mut m = tonic::metadata::MetadataMap::new();
            for v in values {
                m.append(csi_proxy_client::wire::FEATURES_HEADER, v.parse().unwrap());
            }
            understands_dry_run(&m)
        };
        assert!(with(&["dry-run"]) && with(&["x, dry-run"]) && with(&["x", "dry-run,y"]));
        assert!(!with(&[]), "upstream's answers have no such header");
        assert!(!with(&["dry-runs"]) && !with(&["x"]) && !with(&[""]));
        assert!(with(&[csi_proxy_client::wire::FEATURES]), "this daemon's own value");
    }

    #[test]
    fn every_api_is_described_and_methods_are_classified() {
        let pool = pool();
        for api in csi_proxy_client::APIS {
            assert!(pool.get_service_by_name(&api.service_name()).is_some(), "{}", api.service_name());
        }
        let all: usize = csi_proxy_client::APIS.iter().map(|a| methods(&pool, a).len()).sum();
        assert_eq!(all, 139, "upstream's 139 methods");
        for m in ["ListDiskIDs", "GetDiskStats", "IsMountPoint", "PathExists"] {
            assert!(is_read_only(m), "{m}");
        }
        for m in [
            "Mkdir",
            "Rmdir",
            "FormatVolume",
            "PartitionDisk",
            "SetMutualChapSecret",
            "StopService",
            "Rescan",
            "DiscoverTargetPortal",
        ] {
            assert!(!is_read_only(m), "{m}");
        }
    }

    /// Every string field of every request, set to a marker; the secret ones (every name with
    /// `password` or `secret` in it, and the CHAP user name) must not show.
    #[test]
    fn the_shown_request_withholds_every_secret_of_every_api() {
        let pool = pool();
        let mut secrets = 0;
        for api in csi_proxy_client::APIS {
            for m in methods(&pool, api) {
                let mut req = DynamicMessage::new(m.input());
                let mut plain = false;
                for f in m.input().fields() {
                    if f.kind() == prost_reflect::Kind::String && !f.is_list() && !f.is_map() {
                        let name = f.name().to_ascii_lowercase();
                        let secret = name.contains("password") || name.contains("secret") || name == "chap_username";
                        let marker = if secret {
                            secrets += 1;
                            "TOP-SECRET-VALUE"
                        } else {
                            plain = true;
                            "plain-value"
                        };
                        req.set_field(&f, prost_reflect::Value::String(marker.into()));
                    }
                }
                let shown = redacted(to_json(&req)).to_string();
                assert!(!shown.contains("TOP-SECRET-VALUE"), "{}/{}: {shown}", api.service_name(), m.name());
                // The rest of the request is still shown.
                assert_eq!(shown.contains("plain-value"), plain, "{}/{}: {shown}", api.service_name(), m.name());
            }
        }
        // SMB passwords (4 versions), ConnectTarget's CHAP secret and user name (2 versions each),
        // SetMutualChapSecret (v1alpha2).
        assert_eq!(secrets, 9, "the secret fields of the wire contract");
    }

    #[test]
    fn json_requests_parse_with_either_field_spelling_and_bad_ones_are_named() {
        let pool = pool();
        let api = csi_proxy_client::find_api("disk", "v1").unwrap();
        let m = method(&pool, &api, "GetDiskStats").unwrap();
        for json in [r#"{"disk_number": 7}"#, r#"{"diskNumber": 7}"#] {
            let msg = request(&m, json).unwrap();
            assert_eq!(to_json(&msg), serde_json::json!({"disk_number": 7}));
        }
        let e = format!("{:#}", request(&m, r#"{"disk": 7}"#).unwrap_err());
        assert!(e.contains("v1.GetDiskStatsRequest") && e.contains("disk"), "{e}");
        let e = method(&pool, &api, "Nope").unwrap_err().to_string();
        assert!(e.contains("ListDiskIDs"), "{e}");
    }
}
