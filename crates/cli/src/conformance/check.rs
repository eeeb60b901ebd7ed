//! The one table of the checks `csi-proxyctl conformance` can run: each one's name, the OS it
//! applies to and what a pass proves. `conformance -list` prints it; the run reports its rows
//! under these names only.
//!
//! Drift is impossible both ways: [`Report::check`](super::Report) takes a [`Name`], which only
//! this module can make, and the `checks!` invocation below makes each name's constant and its
//! table entry together, so a check cannot be run without an entry; and a constant the run does
//! not use is dead code, which the crate's `-D warnings` build refuses, so an entry cannot stay
//! in the table once its check is gone.

use std::fmt;

/// A check's name, as the report shows it. Only this module makes one (each from the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Name(&'static str);

impl Name {
    pub fn as_str(self) -> &'static str {
        self.0
    }

    /// The check's entry in [`CHECKS`].
    pub fn info(self) -> &'static CheckInfo {
        CHECKS.iter().find(|c| c.name == self.0).expect("every Name is made from the table")
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Where a check can pass (elsewhere it reports a skipped row saying why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    #[allow(dead_code)] // no check is Linux-only today
    Linux,
    Windows,
    Both,
}

impl Os {
    pub fn as_str(self) -> &'static str {
        match self {
            Os::Linux => "linux",
            Os::Windows => "windows",
            Os::Both => "both",
        }
    }
}

/// One check: its name, where it applies, and one line on what a pass proves.
#[derive(Debug)]
pub struct CheckInfo {
    pub name: &'static str,
    pub os: Os,
    pub settles: &'static str,
}

/// Makes each check's [`Name`] constant and [`CHECKS`], in the run's order, from one list.
macro_rules! checks {
    ($($id:ident = $name:literal, $os:ident, $settles:literal;)*) => {
        $(pub const $id: Name = Name($name);)*
        /// Every check the conformance command can run, in the order a run reports them.
        pub const CHECKS: &[CheckInfo] = &[$(CheckInfo { name: $name, os: Os::$os, settles: $settles }),*];
    };
}

checks! {
    LEFTOVERS = "leftovers", Both,
        "what earlier runs killed outright left (named by their markers) is removed, and a run still running keeps all it made";
    FILESYSTEM = "filesystem", Both,
        "Mkdir, PathExists, IsSymlink and Rmdir work on directories under the kubelet path";
    FILESYSTEM_LINKS = "filesystem links", Both,
        "CreateSymlink makes a link IsSymlink reports as one, and Rmdir removes it";
    DISK = "disk", Both,
        "a new disk is in ListDiskIDs and ListDiskLocations, GetDiskStats has its size, and PartitionDisk partitions it";
    VOLUME = "volume", Both,
        "a new disk's volume is found, formatted, mounted, resolved from its target, grown after the disk grows, and unmounted";
    SYSTEM = "system", Both,
        "GetBIOSSerialNumber answers the serial, or NotFound as documented when the firmware has none";
    INTERLOCK_DRY_RUN = "interlock-dry-run", Both,
        "dry runs of PartitionDisk, FormatVolume and ResizeVolume on the node's own system disk are refused by the interlocks (nothing is changed; nothing is sent to a daemon without dry runs)";
    FLOW_AZUREDISK = "flow azuredisk", Both,
        "azuredisk's node RPCs (stage, publish, stats, expand, unpublish, unstage) succeed, leaving no staging folder and no driver warning";
    FLOW_GCE_PD = "flow gce-pd", Both,
        "GCE PD's node RPCs succeed, leaving no staging folder and no driver warning";
    FLOW_EBS = "flow ebs", Both,
        "AWS EBS's node RPCs succeed, staging and unstaging twice, leaving no staging folder and no driver warning";
    FLOW_VSPHERE = "flow vsphere", Both,
        "vSphere's NodeGetInfo and node RPCs succeed, leaving no staging folder and no driver warning";
    PARTITION_AFTER_ONLINE = "partition-right-after-online", Windows,
        "R4: PartitionDisk succeeds right after SetDiskState brings the disk online (the provider's cached disk may say offline)";
    FORMAT_EMPTY_LABEL = "format-with-empty-label", Windows,
        "R8: FormatVolume succeeds when the Storage provider gets an empty FileSystemLabel";
    STORAGE_PROVIDER = "storage-provider-accepts-calls", Windows,
        "R1: the Storage provider (MSFT_*) answers the daemon's calls at the COM security level it sets";
    PLAIN_PATHS = "mount-point-calls-take-plain-paths", Windows,
        "R3: SetVolumeMountPointW and GetVolumeNameForVolumeMountPointW work with the plain C:\\…\\ paths they get";
    BELOW_STAGED = "paths-below-a-staged-volume-are-inside-the-roots", Windows,
        "R7: paths below a staged volume are inside the roots, whichever DOS name Windows reports for its folder";
    LINK_NOT_MOUNT_POINT = "get-volume-name-of-a-link-says-not-a-mount-point", Windows,
        "R3: GetVolumeIDFromTargetPath of a link is NotFound (not a mount point), not Internal";
    RMDIR_SHARES = "rmdir-of-a-mounted-folder-shares-with-the-mount-manager", Windows,
        "R3: Rmdir(force) of a mounted folder succeeds while the mount manager reopens it";
    UNKNOWN_MOUNT_POINT = "mount-point-unknown-to-mount-manager-is-removed", Windows,
        "R2: Rmdir(force) removes a mount point whose disk the mount manager no longer knows";
    GONE_VOLUME_CODE = "delete-mount-point-of-a-gone-volume-code", Windows,
        "K5: DeleteVolumeMountPointW of a mount point whose volume is gone answers 0, 2 or 3 (the codes Rmdir handles), else names the code";
    ONLINE_CLEARS_READ_ONLY = "online-clears-read-only", Windows,
        "SetDiskState online clears a read-only disk's READ_ONLY attribute (IOCTL_DISK_SET_DISK_ATTRIBUTES)";
    RESIZE_BY_DISK_NUMBER = "resize-by-disk-number-from-the-table", Windows,
        "ResizeVolume(disk number, 0), as azuredisk sends it, grows the volume to the end in the disk's table (IOCTL_DISK_GET_DRIVE_LAYOUT_EX)";
    CALLER_IDENTITY = "caller-identity", Both,
        "the daemon names this tool's own connection host (its csi-proxy-caller header), and its audit records name this process's image and user (Windows: from the client's token, IsProcessInJob and the host compute service, which Wine does not have)";
    AUDIT_FILE_DACL = "audit-file-dacl", Windows,
        "the daemon's -audit-log file has a protected DACL giving SYSTEM and Administrators, and no one else, full access";
    PRESHUTDOWN = "preshutdown-configured", Windows,
        "the csiproxy service, running, accepts PRESHUTDOWN and has a preshutdown timeout over 20 s (its -preshutdown-wait plus the drain)";
    SMB = "smb", Both,
        "an SMB share maps to a link that reads and writes, a wrong password is refused leaving no link, and the mapping is removed";
    SMB_NAMED_ERRORS = "smb-errors-are-named", Both,
        "a share the server lacks is NotFound naming the code with a hint; a wrong password for a mapped share is refused with its code named (Windows: the real WNetAddConnection2W check, which Wine does not run)";
    ISCSI = "iscsi", Both,
        "a target is discovered at its portal, logged in to (with CHAP), its disk listed, then logged out of and its portal removed";
    CLEANUP = "cleanup", Both,
        "everything the run made (mounts, links, directories, disks, files, mappings, sessions, portals) is removed";
}

/// `conformance -list`: the table, as an aligned table or (`-json`) an array of
/// `{"name", "os", "settles"}`. Runs nothing and contacts no daemon.
pub fn list(json: bool) -> String {
    if json {
        let all: Vec<_> = CHECKS
            .iter()
            .map(|c| serde_json::json!({"name": c.name, "os": c.os.as_str(), "settles": c.settles}))
            .collect();
        return format!("{}\n", crate::term::json_pretty(&serde_json::Value::Array(all)));
    }
    let rows: Vec<Vec<String>> =
        CHECKS.iter().map(|c| vec![c.name.to_owned(), c.os.as_str().to_owned(), c.settles.to_owned()]).collect();
    crate::table::render(&["CHECK", "OS", "SETTLES"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_table_has_each_name_once_with_an_os_and_what_it_settles() {
        let mut seen = BTreeSet::new();
        for c in CHECKS {
            assert!(!c.name.trim().is_empty(), "{c:?}");
            assert!(seen.insert(c.name), "{} is in the table twice", c.name);
            assert!(["linux", "windows", "both"].contains(&c.os.as_str()), "{c:?}");
            assert!(!c.settles.trim().is_empty(), "{} settles nothing", c.name);
            assert!(!c.settles.contains('\n'), "{}: one line", c.name);
        }
        assert!(CHECKS.len() >= 24, "{}", CHECKS.len());
        assert_eq!(FILESYSTEM.info().os, Os::Both);
        assert_eq!(AUDIT_FILE_DACL.info().os, Os::Windows);
    }

    #[test]
    fn the_list_is_the_table_as_text_and_json() {
        let text = list(false);
        assert_eq!(text.lines().count(), CHECKS.len() + 1, "{text}");
        assert!(text.starts_with("CHECK"), "{text}");
        assert!(text.lines().any(|l| l.starts_with("online-clears-read-only") && l.contains("windows")), "{text}");
        let doc: serde_json::Value = serde_json::from_str(&list(true)).unwrap();
        let doc = doc.as_array().unwrap();
        assert_eq!(doc.len(), CHECKS.len());
        assert_eq!(doc[0], serde_json::json!({"name": "leftovers", "os": "both", "settles": LEFTOVERS.info().settles}));
    }
}
