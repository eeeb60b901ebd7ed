//! The wire contract: messages and services generated from `proto/`, plus the table of the
//! 23 (group, version) APIs that the daemon serves, each on its own pipe or socket.
//!
//! Upstream names its proto packages after the version only, so every group of one version lives
//! in the same Rust module (`v1::disk_server`, `v1::volume_server`, ...). Message names never
//! collide inside a package.

#![allow(clippy::all, missing_docs)]

macro_rules! packages {
    ($($pkg:ident),* $(,)?) => {
        $(
            pub mod $pkg {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($pkg), ".rs"));
            }
        )*
    };
}

pub mod caller;
pub use caller::{Caller, Isolation, PodContainer, Workload};

packages!(v1alpha1, v1alpha2, v1beta1, v1beta2, v1beta3, v1, v2alpha1);

/// Encoded `FileDescriptorSet` of every compiled .proto file.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));

/// The API groups, as they appear in pipe and socket names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    Disk,
    Filesystem,
    Volume,
    Smb,
    Iscsi,
    System,
}

impl Group {
    pub const ALL: [Group; 6] =
        [Group::Disk, Group::Filesystem, Group::Volume, Group::Smb, Group::Iscsi, Group::System];

    pub fn name(self) -> &'static str {
        match self {
            Group::Disk => "disk",
            Group::Filesystem => "filesystem",
            Group::Volume => "volume",
            Group::Smb => "smb",
            Group::Iscsi => "iscsi",
            Group::System => "system",
        }
    }

    /// The gRPC service name inside each version's package.
    pub fn service(self) -> &'static str {
        match self {
            Group::Disk => "Disk",
            Group::Filesystem => "Filesystem",
            Group::Volume => "Volume",
            Group::Smb => "Smb",
            Group::Iscsi => "Iscsi",
            Group::System => "System",
        }
    }
}

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One served API: a version of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Api {
    pub group: Group,
    pub version: &'static str,
}

impl Api {
    /// `csi-proxy-<group>-<version>`: the pipe name on Windows and the socket stem on Linux.
    pub fn endpoint_name(&self) -> String {
        format!("csi-proxy-{}-{}", self.group.name(), self.version)
    }

    /// `\\.\pipe\csi-proxy-<group>-<version>`
    pub fn pipe_path(&self) -> String {
        format!(r"\\.\pipe\{}", self.endpoint_name())
    }

    /// `<dir>/csi-proxy-<group>-<version>.sock`: where the daemon listens and clients connect on
    /// unix systems.
    pub fn socket_path(&self, dir: &std::path::Path) -> std::path::PathBuf {
        dir.join(format!("{}.sock", self.endpoint_name()))
    }

    /// `<version>.<Service>`, the fully qualified gRPC service name.
    pub fn service_name(&self) -> String {
        format!("{}.{}", self.version, self.group.service())
    }
}

macro_rules! apis {
    ($($group:ident: [$($v:literal),*]),* $(,)?) => {
        /// Every API upstream serves; it serves all of them at once, each on its own pipe.
        pub const APIS: &[Api] = &[$($(Api { group: Group::$group, version: $v },)*)*];
    };
}

apis! {
    Disk: ["v1alpha1", "v1beta1", "v1beta2", "v1beta3", "v1"],
    Filesystem: ["v1alpha1", "v1beta1", "v1beta2", "v1", "v2alpha1"],
    Volume: ["v1alpha1", "v1beta1", "v1beta2", "v1beta3", "v1", "v2alpha1"],
    Smb: ["v1alpha1", "v1beta1", "v1beta2", "v1"],
    Iscsi: ["v1alpha1", "v1alpha2"],
    System: ["v1alpha1"],
}

/// Whether `method` (a wire method name of any version) only reads: the listings, queries and
/// statistics. Every other method may change the host: the daemon audits it, the CLI asks before
/// calling it. Naming the read-only ones (rather than the others) makes a method added later
/// count as changing.
pub fn is_read_only(method: &str) -> bool {
    const PREFIXES: &[&str] = &["Get", "List", "Is"];
    const OTHERS: &[&str] = &["PathExists", "DiskStats", "VolumeStats"];
    PREFIXES.iter().any(|p| method.starts_with(p)) || OTHERS.contains(&method)
}

/// Request metadata that asks a mutating call for a dry run (`true`): the daemon answers what it
/// would do and does nothing (the server's `dry_run` module). Only this daemon knows it.
pub const DRY_RUN_METADATA: &str = "csi-proxy-dry-run";

/// The response header of a dry run's answer holding its plan (percent-encoded like
/// `grpc-message`); the answer also carries [`DRY_RUN_METADATA`]` = true`.
pub const PLAN_METADATA: &str = "csi-proxy-plan";

/// The header on every answer of this daemon listing what it understands beyond upstream's
/// contract, comma-separated ([`FEATURES`]): a client checks it before it sends a dry run, which
/// a daemon without it (upstream's) would run for real.
pub const FEATURES_HEADER: &str = "csi-proxy-features";

/// [`FEATURES_HEADER`]'s value.
pub const FEATURES: &str = "dry-run";

/// The header on every answer of a connection whose caller the daemon named: who the daemon
/// takes the caller to be, as [`Workload`]'s text (`host`, `pod=ns/name container=c image="i"`,
/// `unknown (why)`), percent-encoded like `grpc-message`. It tells a caller only about itself:
/// what the audit trail and the authorization policy see (`csi-proxyctl whoami` prints it).
pub const CALLER_HEADER: &str = "csi-proxy-caller";

/// The request fields (by their .proto names) whose values never reach logs, audit records or
/// the screen: SMB passwords, CHAP secrets, and the CHAP user name, half of the credential. The
/// one list every place that shows a request redacts by (the daemon's call log and audit
/// records); a test checks that every field named like a password or secret is on it.
pub const SECRET_FIELDS: &[&str] = &["password", "chap_secret", "MutualChapSecret", "chap_username"];

/// Whether a request field (its .proto name) is on [`SECRET_FIELDS`].
pub fn is_secret_field(name: &str) -> bool {
    SECRET_FIELDS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_three_distinct_endpoints() {
        let names: std::collections::BTreeSet<_> = APIS.iter().map(Api::endpoint_name).collect();
        assert_eq!(names.len(), 23);
        assert!(names.contains("csi-proxy-volume-v2alpha1"));
        assert_eq!(APIS[0].pipe_path(), r"\\.\pipe\csi-proxy-disk-v1alpha1".to_string());
    }

    /// Every method name the 23 APIs serve, each classified on purpose.
    #[test]
    fn every_method_is_classified_on_purpose() {
        let read_only = [
            "DiskStats",
            "GetAttachState",
            "GetBIOSSerialNumber",
            "GetClosestVolumeIDFromTargetPath",
            "GetDiskNumberByName",
            "GetDiskNumberFromVolumeID",
            "GetDiskState",
            "GetDiskStats",
            "GetService",
            "GetTargetDisks",
            "GetVolumeDiskNumber",
            "GetVolumeIDFromMount",
            "GetVolumeIDFromTargetPath",
            "GetVolumeStats",
            "IsMountPoint",
            "IsSymlink",
            "IsVolumeFormatted",
            "ListDiskIDs",
            "ListDiskLocations",
            "ListTargetPortals",
            "ListVolumesOnDisk",
            "PathExists",
            "VolumeStats",
        ];
        let changing = [
            "AddTargetPortal",
            "ConnectTarget",
            "CreateSymlink",
            "DisconnectTarget",
            // Discovery writes the initiator's records of the portal's targets.
            "DiscoverTargetPortal",
            "DismountVolume",
            "FormatVolume",
            "LinkPath",
            "Mkdir",
            "MountVolume",
            "NewSmbGlobalMapping",
            "PartitionDisk",
            "RemoveSmbGlobalMapping",
            "RemoveTargetPortal",
            "Rescan",
            "ResizeVolume",
            "Rmdir",
            "RmdirContents",
            "SetAttachState",
            "SetDiskState",
            "SetMutualChapSecret",
            "StartService",
            "StopService",
            "UnmountVolume",
            "WriteVolumeCache",
        ];
        for m in read_only {
            assert!(is_read_only(m), "{m}");
        }
        for m in changing {
            assert!(!is_read_only(m), "{m}");
        }
        // Both lists together are every method of every API, from the descriptors themselves.
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
        let mut served: Vec<String> =
            set.file.iter().flat_map(|f| &f.service).flat_map(|s| &s.method).filter_map(|m| m.name.clone()).collect();
        served.sort_unstable();
        served.dedup();
        let mut listed: Vec<&str> = read_only.iter().chain(changing.iter()).copied().collect();
        listed.sort_unstable();
        assert_eq!(served, listed);
    }

    /// Every field of every message named like a credential is on the secret list, so a field
    /// added to a .proto later cannot slip past the redaction unnoticed.
    #[test]
    fn every_credential_field_is_secret() {
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).unwrap();
        let mut found = Vec::new();
        for file in &set.file {
            for message in &file.message_type {
                for field in &message.field {
                    let name = field.name();
                    let lower = name.to_ascii_lowercase();
                    if lower.contains("password") || lower.contains("secret") || lower.contains("username") {
                        found.push((message.name().to_string(), name.to_string()));
                    }
                }
            }
        }
        assert!(found.len() >= 10, "{found:?}");
        for (message, field) in &found {
            // SMB's user name is not a secret (the share's owner is shown to the operator);
            // CHAP's is (see SECRET_FIELDS).
            if field == "username" {
                continue;
            }
            assert!(is_secret_field(field), "{message}.{field} is not on SECRET_FIELDS");
        }
    }
}
