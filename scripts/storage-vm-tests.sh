#!/usr/bin/env bash
# Real SCSI identity tests of the Linux block backend, inside ../shared/tools/storage-vm (a
# throwaway VM booting Debian's kernel, where scsi_debug gives SCSI disks with
# host:channel:target:lun, VPD pages 0x80/0x83 and a writable device state; this machine's own
# kernel has no SCSI). The test binaries are built here, then run in the VM, which sees this
# machine's / read-only. Needs root. Runs `storage-vm setup` (idempotent: installs qemu and
# fetches the kernel the first time).
#
# Runs: crates/stack-tests/tests/scsi_vm.rs (ListDiskLocations, ListDiskIDs, the page83 -> disk
# number lookup, GetDiskStats, Set/GetDiskState against sysfs, sg_vpd and lsblk), the host
# library's VM-only unit test (a deleted SCSI disk is back when the SCSI rescan returns), and
# crates/stack-tests/tests/linux_volumes.rs again on Debian's kernel, which has what this machine's
# lacks (online ext4 growth with CAP_SYS_RESOURCE, the ntfs3 driver, partition-table parsers and
# udev), and crates/stack-tests/tests/linux_interlocks.rs with device-mapper (a dm table and an
# LVM logical volume over a partition refuse every call that would change the disk).
#
# Then, each in a VM of its own (they start their own peers through storage-vm-peers and run one
# test at a time): crates/stack-tests/tests/smb_vm.rs (SMB mappings through the kernel's cifs
# client against Samba on 127.0.0.1: map, write through the link, reuse, remove, wrong password,
# seal, the password checked after a restart) and crates/stack-tests/tests/iscsi_vm.rs (the iSCSI group on open-iscsi against tgtd:
# portals, discovery, CHAP and mutual CHAP logins, the target's disk through the disk and volume
# groups; secrets in no argv, log line or error text).
#
# Last, crates/cli/tests/conformance.rs: `csi-proxyctl conformance` against the real daemon binary
# on Debian's kernel (loop disks, udev), and that it leaves nothing behind; then
# crates/cli/tests/conformance_remote_vm.rs in a VM of its own: the same with -smb-share and
# -iscsi-portal against Samba and tgtd (CHAP), the smb and iscsi checks passing, no secret in the
# output, no mount, session or added portal left, a portal there before kept.
set -euo pipefail
cd "$(dirname "$0")/.."
VM=$(readlink -f ../shared/tools/storage-vm)
[ -x "$VM" ] || { echo "missing $VM" >&2; exit 1; }
start=$(date +%s)

"$VM" setup

# `storage-vm-tests.sh smb`: the SMB tests alone.
if [ "${1:-}" = smb ]; then
  smb_vm=$(cargo test -p csi-proxy-stack-tests --test smb_vm --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')
  [ -x "$smb_vm" ] || { echo "smb_vm test binary not found: $smb_vm" >&2; exit 1; }
  "$VM" run -- "$smb_vm" --test-threads=1
  exit
fi

echo "== storage VM: build the test binaries"
# The executables, from cargo's JSON messages: "<target name> <path>" per test binary.
bins=$({
  cargo test -p csi-proxy-host --lib --no-run --message-format=json
  cargo test -p csi-proxy-stack-tests --test scsi_vm --test linux_volumes --test linux_interlocks --test smb_vm \
    --test iscsi_vm \
    --no-run --message-format=json
  cargo test -p csi-proxyctl --test conformance --test conformance_remote_vm --no-run --message-format=json
} | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])')
scsi_vm=$(awk '$1 == "scsi_vm" {print $2}' <<<"$bins")
lib=$(awk '$1 == "csi_proxy_host" {print $2}' <<<"$bins")
volumes=$(awk '$1 == "linux_volumes" {print $2}' <<<"$bins")
interlocks=$(awk '$1 == "linux_interlocks" {print $2}' <<<"$bins")
smb_vm=$(awk '$1 == "smb_vm" {print $2}' <<<"$bins")
iscsi_vm=$(awk '$1 == "iscsi_vm" {print $2}' <<<"$bins")
conformance=$(awk '$1 == "conformance" {print $2}' <<<"$bins")
conformance_remote=$(awk '$1 == "conformance_remote_vm" {print $2}' <<<"$bins")
# The conformance test runs the daemon and csi-proxyctl binaries beside its own target dir.
cargo build -q -p csi-proxy -p csi-proxyctl
for b in "$scsi_vm" "$lib" "$volumes" "$interlocks" "$smb_vm" "$iscsi_vm" "$conformance" "$conformance_remote"; do
  [ -x "$b" ] || { echo "test binaries not found in: $bins" >&2; exit 1; }
done

echo "== storage VM: scsi_debug (2 hosts x 2 targets x 2 LUNs), run the tests"
# shellcheck disable=SC2016 # expanded in the VM
"$VM" run -- sh -c '
  set -e
  eval "$(storage-vm-peers scsi-debug add_host=2 num_tgts=2 max_luns=2 dev_size_mb=16)"
  export SCSI_DEBUG_DEVS
  echo "scsi_debug disks: $SCSI_DEBUG_DEVS"
  "$1" --test-threads=2
  "$2" --exact linux::block::disks::tests::vm_rescan_brings_back_a_deleted_scsi_disk
  modprobe -a loop ext4 xfs btrfs ntfs3 fuse dm_mod
  "$3" --test-threads=2
  "$4" --test-threads=1
' sh "$scsi_vm" "$lib" "$volumes" "$interlocks"
echo "== storage VM: Samba on 127.0.0.1, SMB mappings through the kernel's cifs client"
"$VM" run -- "$smb_vm" --test-threads=1
echo "== storage VM: iSCSI (tgtd target, open-iscsi initiator)"
"$VM" run -- "$iscsi_vm" --test-threads=1
echo "== storage VM: csi-proxyctl conformance against the daemon on Debian's kernel"
# shellcheck disable=SC2016 # expanded in the VM
"$VM" run -- sh -c 'modprobe -a loop xfs; "$1" --test-threads=1' sh "$conformance"
echo "== storage VM: csi-proxyctl conformance with a test share (Samba) and target (tgtd)"
# shellcheck disable=SC2016 # expanded in the VM
"$VM" run -- sh -c 'modprobe -a loop xfs; "$1" --test-threads=1' sh "$conformance_remote"
echo "== storage VM: passed in $(($(date +%s) - start)) s"
