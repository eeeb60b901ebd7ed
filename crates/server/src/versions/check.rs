//! Build-time checks that the service lists of this module agree with the wire contract:
//!
//! - the service table (in `mod.rs`) against `csi_proxy_wire::APIS`: same APIs, same order;
//! - each version's RPC list against the service its .proto declares, read from
//!   `csi_proxy_wire::FILE_DESCRIPTOR_SET`: same RPC names, same order;
//! - each RPC's op column against the request's `IntoOp` impl.
//!
//! Rust already refuses a service impl that misses or invents a trait method; these checks cover
//! what it cannot see: the API table, and the RPC names the lists pass on to logs and metrics.
//! All of it runs in `const` evaluation, so a mismatch is a build error carrying the message
//! built here.

use crate::call::IntoOp;
use csi_proxy_wire::{Api, Group, APIS, FILE_DESCRIPTOR_SET};

/// Compiles only if request `R` converts into op `O`.
pub(crate) const fn converts_into<R: IntoOp<Op = O>, O>() {}

/// Fails the build unless `served` holds exactly the APIs of `APIS`, in the same order.
pub(crate) const fn table_matches_apis(served: &[Api]) {
    let mut i = 0;
    while i < served.len() || i < APIS.len() {
        if i < served.len() && i < APIS.len() && same_api(&served[i], &APIS[i]) {
            i += 1;
            continue;
        }
        // First difference: name what one side lacks, else say that the order differs.
        let lacking = i < APIS.len() && !has_api(served, &APIS[i]);
        let extra = i < served.len() && !has_api(APIS, &served[i]);
        if lacking && extra {
            fail(msg("the service table has ").api(&served[i]).s(" where csi_proxy_wire::APIS has ").api(&APIS[i]));
        }
        if lacking {
            fail(msg("csi_proxy_wire::APIS has ").api(&APIS[i]).s(", which the service table lacks"));
        }
        if extra {
            fail(msg("the service table serves ").api(&served[i]).s(", which csi_proxy_wire::APIS lacks"));
        }
        if i < served.len() && i < APIS.len() {
            fail(
                msg("the service table must follow the order of csi_proxy_wire::APIS: row ")
                    .num(i)
                    .s(" is ")
                    .api(&served[i])
                    .s(", APIS has ")
                    .api(&APIS[i]),
            );
        }
        fail(msg("the service table and csi_proxy_wire::APIS differ in length (an API is listed twice)"));
    }
}

/// Fails the build unless `rpcs` are the methods of the proto service `service` (as
/// "v1beta2.Volume"), in declaration order.
pub(crate) const fn rpcs_match_proto(service: &str, rpcs: &[&str]) {
    let Some(svc) = find_service(service) else {
        fail(msg("no proto service ").s(service).s(" in csi_proxy_wire::FILE_DESCRIPTOR_SET"));
    };
    let mut declared: [&str; MAX_METHODS] = [""; MAX_METHODS];
    let mut count = 0;
    let mut fields = svc;
    while let Some((number, payload, rest)) = next_field(fields) {
        fields = rest;
        if number == SERVICE_METHOD {
            if count == MAX_METHODS {
                fail(msg(service).s(" declares more RPCs than check.rs can hold: raise MAX_METHODS"));
            }
            declared[count] = utf8(string_field(payload, METHOD_NAME));
            count += 1;
        }
    }
    let (declared, _) = declared.split_at(count);

    let mut i = 0;
    while i < declared.len() || i < rpcs.len() {
        if i < declared.len() && i < rpcs.len() && eq(declared[i], rpcs[i]) {
            i += 1;
            continue;
        }
        let lacking = i < declared.len() && !has_str(rpcs, declared[i]);
        let extra = i < rpcs.len() && !has_str(declared, rpcs[i]);
        if lacking && extra {
            fail(msg(service).s(": the list has RPC ").s(rpcs[i]).s(" where the proto declares ").s(declared[i]));
        }
        if lacking {
            fail(msg(service).s(": the proto declares RPC ").s(declared[i]).s(", which the list lacks"));
        }
        if extra {
            fail(msg(service).s(": the list has RPC ").s(rpcs[i]).s(", which the proto does not declare"));
        }
        if i < declared.len() && i < rpcs.len() {
            fail(
                msg(service)
                    .s(": the list must follow the proto's order: entry ")
                    .num(i)
                    .s(" is ")
                    .s(rpcs[i])
                    .s(", the proto has ")
                    .s(declared[i]),
            );
        }
        fail(msg(service).s(": an RPC is listed twice"));
    }
}

const fn same_api(a: &Api, b: &Api) -> bool {
    a.group as u8 == b.group as u8 && eq(a.version, b.version)
}

const fn has_api(list: &[Api], api: &Api) -> bool {
    let mut i = 0;
    while i < list.len() {
        if same_api(&list[i], api) {
            return true;
        }
        i += 1;
    }
    false
}

const fn has_str(list: &[&str], s: &str) -> bool {
    let mut i = 0;
    while i < list.len() {
        if eq(list[i], s) {
            return true;
        }
        i += 1;
    }
    false
}

/// `==` on strings, which is not yet callable in `const fn`.
const fn eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `Group::name`, which is not a `const fn`.
const fn group_name(g: Group) -> &'static str {
    match g {
        Group::Disk => "disk",
        Group::Filesystem => "filesystem",
        Group::Volume => "volume",
        Group::Smb => "smb",
        Group::Iscsi => "iscsi",
        Group::System => "system",
    }
}

// Just enough of protobuf's encoding to find services and their method names in the encoded
// FileDescriptorSet (descriptor.proto field numbers).
const SET_FILE: u64 = 1;
const FILE_PACKAGE: u64 = 2;
const FILE_SERVICE: u64 = 6;
const SERVICE_NAME: u64 = 1;
const SERVICE_METHOD: u64 = 2;
const METHOD_NAME: u64 = 1;
const MAX_METHODS: usize = 32;

/// The encoded ServiceDescriptorProto whose package and name form `full_name`.
const fn find_service(full_name: &str) -> Option<&'static [u8]> {
    let full = full_name.as_bytes();
    let mut files: &'static [u8] = FILE_DESCRIPTOR_SET;
    while let Some((number, file, rest)) = next_field(files) {
        files = rest;
        if number != SET_FILE {
            continue;
        }
        let package = string_field(file, FILE_PACKAGE);
        // full_name = package "." service
        if full.len() <= package.len() || full[package.len()] != b'.' {
            continue;
        }
        let (prefix, name) = full.split_at(package.len());
        if !eq(utf8(prefix), utf8(package)) {
            continue;
        }
        let (_, name) = name.split_at(1);
        let mut fields = file;
        while let Some((number, svc, rest)) = next_field(fields) {
            fields = rest;
            if number == FILE_SERVICE && eq(utf8(string_field(svc, SERVICE_NAME)), utf8(name)) {
                return Some(svc);
            }
        }
    }
    None
}

/// The first length-delimited field `number` of `message`, empty if absent.
const fn string_field(message: &[u8], number: u64) -> &[u8] {
    let mut fields = message;
    while let Some((n, payload, rest)) = next_field(fields) {
        if n == number {
            return payload;
        }
        fields = rest;
    }
    &[]
}

/// The next field of an encoded message: (field number, payload if length-delimited, the rest).
const fn next_field(b: &[u8]) -> Option<(u64, &[u8], &[u8])> {
    if b.is_empty() {
        return None;
    }
    let (key, b) = varint(b);
    let (payload, rest): (&[u8], &[u8]) = match key & 7 {
        0 => (&[], varint(b).1),
        1 => (&[], b.split_at(8).1),
        2 => {
            let (len, b) = varint(b);
            b.split_at(len as usize)
        }
        5 => (&[], b.split_at(4).1),
        _ => fail(msg("FILE_DESCRIPTOR_SET holds an unexpected protobuf wire type")),
    };
    Some((key >> 3, payload, rest))
}

const fn varint(mut b: &[u8]) -> (u64, &[u8]) {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let [byte, rest @ ..] = b else {
            fail(msg("FILE_DESCRIPTOR_SET ends inside a varint"));
        };
        b = rest;
        value |= ((*byte & 0x7f) as u64) << shift;
        if *byte & 0x80 == 0 {
            return (value, b);
        }
        shift += 7;
    }
}

const fn utf8(b: &[u8]) -> &str {
    match core::str::from_utf8(b) {
        Ok(s) => s,
        Err(_) => fail(msg("FILE_DESCRIPTOR_SET holds a name that is not UTF-8")),
    }
}

/// A failure message assembled during const evaluation, where `format!` is unavailable.
struct Msg {
    buf: [u8; 256],
    len: usize,
}

const fn msg(s: &str) -> Msg {
    Msg { buf: [0; 256], len: 0 }.s(s)
}

impl Msg {
    const fn s(mut self, s: &str) -> Msg {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() && self.len < self.buf.len() {
            self.buf[self.len] = b[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    const fn num(mut self, n: usize) -> Msg {
        let mut digits = [0u8; 20];
        let (mut n, mut k) = (n, 0);
        loop {
            digits[k] = b'0' + (n % 10) as u8;
            k += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        while k > 0 && self.len < self.buf.len() {
            k -= 1;
            self.buf[self.len] = digits[k];
            self.len += 1;
        }
        self
    }

    const fn api(self, api: &Api) -> Msg {
        self.s(group_name(api.group)).s(" ").s(api.version)
    }
}

/// Stops const evaluation, and so the build, with `m` as the error.
const fn fail(m: Msg) -> ! {
    let (bytes, _) = m.buf.split_at(m.len);
    match core::str::from_utf8(bytes) {
        Ok(s) => panic!("{}", s),
        Err(_) => panic!("versions::check failed (message cut inside a character)"),
    }
}

// The checks also run as ordinary functions, which lets the tests show each one failing.
#[cfg(test)]
mod tests {
    use super::*;

    const VOLUME_V1BETA2: [&str; 10] = [
        "ListVolumesOnDisk",
        "MountVolume",
        "DismountVolume",
        "IsVolumeFormatted",
        "FormatVolume",
        "ResizeVolume",
        "VolumeStats",
        "GetVolumeDiskNumber",
        "GetVolumeIDFromMount",
        "WriteVolumeCache",
    ];

    #[test]
    fn matching_lists_pass() {
        table_matches_apis(APIS);
        rpcs_match_proto("v1beta2.Volume", &VOLUME_V1BETA2);
    }

    #[test]
    #[should_panic(expected = "v1beta2.Volume: the proto declares RPC WriteVolumeCache, which the list lacks")]
    fn a_missing_rpc_fails() {
        rpcs_match_proto("v1beta2.Volume", VOLUME_V1BETA2.split_at(9).0);
    }

    #[test]
    #[should_panic(expected = "v1beta2.Volume: the list has RPC Dismount where the proto declares DismountVolume")]
    fn a_misspelt_rpc_fails() {
        let mut rpcs = VOLUME_V1BETA2;
        rpcs[2] = "Dismount";
        rpcs_match_proto("v1beta2.Volume", &rpcs);
    }

    #[test]
    #[should_panic(expected = "the list must follow the proto's order: entry 0 is MountVolume")]
    fn a_reordered_list_fails() {
        let mut rpcs = VOLUME_V1BETA2;
        rpcs.swap(0, 1);
        rpcs_match_proto("v1beta2.Volume", &rpcs);
    }

    #[test]
    #[should_panic(expected = "no proto service v1beta2.Iscsi")]
    fn an_unknown_service_fails() {
        rpcs_match_proto("v1beta2.Iscsi", &[]);
    }

    #[test]
    #[should_panic(expected = "csi_proxy_wire::APIS has volume v1beta2, which the service table lacks")]
    fn a_missing_api_fails() {
        let served: Vec<Api> =
            APIS.iter().copied().filter(|a| !(a.group == Group::Volume && a.version == "v1beta2")).collect();
        table_matches_apis(&served);
    }

    #[test]
    #[should_panic(expected = "the service table serves disk v9, which csi_proxy_wire::APIS lacks")]
    fn an_extra_api_fails() {
        let mut served = APIS.to_vec();
        served.push(Api { group: Group::Disk, version: "v9" });
        table_matches_apis(&served);
    }

    #[test]
    #[should_panic(expected = "row 0 is disk v1beta1, APIS has disk v1alpha1")]
    fn a_reordered_table_fails() {
        let mut served = APIS.to_vec();
        served.swap(0, 1);
        table_matches_apis(&served);
    }

    #[test]
    fn messages_hold_numbers_and_apis() {
        let m = msg("row ").num(0).s(" / ").num(120).s(" ").api(&APIS[0]);
        assert_eq!(m.buf.split_at(m.len).0, b"row 0 / 120 disk v1alpha1");
    }
}
