#!/usr/bin/env bash
# Container images as OCI archives (an OCI image layout in a tar: `skopeo copy oci-archive:FILE
# docker://REGISTRY/csi-proxy:TAG` pushes one), built without a Docker daemon. scripts/release.sh
# calls this; run it by hand only to rebuild an image from binaries at hand.
#   scripts/images.sh linux   OUT.tar VERSION STAMP DIR   DIR holds csi-proxy and csi-proxyctl
#   scripts/images.sh windows OUT.tar VERSION STAMP DIR   DIR holds csi-proxy.exe, csi-proxyctl.exe
#   scripts/images.sh smoke   LINUX.tar WINDOWS.tar        check both with skopeo, run the Linux one
# STAMP (seconds since 1970) dates every file, layer and config: the same binaries, stamp and
# Debian archive give the same image.
#
# The tools, all Debian's (scripts/deps.sh images installs them), each doing one job:
#   mmdebstrap  the Linux image's base: a Debian root filesystem with the tools the daemon runs,
#               written as a tar, reproducible under SOURCE_DATE_EPOCH; no container runtime
#   umoci       the OCI image layout: layers, config, manifest (the OCI project's own tool)
#   skopeo      the smoke test's independent reader: manifest, config and digests as a registry
#               client sees them
#
# Linux image (os linux/amd64): Debian 12 (bookworm) with e2fsprogs, xfsprogs, btrfs-progs and
# ntfs-3g (mkfs and grow tools of every -linux-fs-type), open-iscsi (iscsiadm; the daemon talks to
# the host's iscsid, see deploy/linux/csi-proxy-daemonset.yaml) and the daemon's libraries (glibc,
# libblkid); /usr/local/bin/csi-proxy and csi-proxyctl on top, csi-proxy the entrypoint. SMB needs
# no tool: the daemon mounts cifs through the kernel itself.
#
# Windows image (os windows/amd64), for HostProcess containers only: one base layer holding
# csi-proxy.exe and csi-proxyctl.exe at the image's root and five empty registry hives. Windows
# layers keep the root filesystem under Files/; importing a base layer (containerd's Windows
# snapshotter, ProcessBaseLayer) requires Files/Windows/System32/config/{DEFAULT,SAM,SECURITY,
# SOFTWARE,SYSTEM}, which must be loadable hives since Windows Server 2025 (scripts/regf.py writes
# empty ones). A HostProcess container runs on the host, so it needs no Windows base image: none is
# pulled here and the image works on every Windows Server version containerd >= 1.7 runs on.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
die() { echo "images: $*" >&2; exit 1; }

# Debian release and archives of the Linux image: the security archive keeps its tools patched.
SUITE=bookworm
MIRRORS=(
  "deb http://deb.debian.org/debian $SUITE main"
  "deb http://deb.debian.org/debian $SUITE-updates main"
  "deb http://deb.debian.org/debian-security $SUITE-security main"
)
LINUX_PACKAGES=e2fsprogs,xfsprogs,btrfs-progs,ntfs-3g,open-iscsi
HIVES=(DEFAULT SAM SECURITY SOFTWARE SYSTEM)
TAG=image

need() {
  local t
  for t in "$@"; do command -v "$t" >/dev/null || die "missing $t (scripts/deps.sh images installs it)"; done
}

# tar_dir DIR STAMP OUT [ENTRY]: a tar of ENTRY in DIR (default ".", its contents named ./…),
# entries sorted, owned by root, dated STAMP. An OCI layout so archived is the form skopeo's
# oci-archive reads.
tar_dir() {
  local dir=$1 stamp=$2 out=$3 entry=${4:-.}
  tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$stamp" --format=pax \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -cf "$out" "$entry"
}

# new_layout DIR: an empty OCI layout with an empty image tagged $TAG.
new_layout() {
  umoci init --layout "$1"
  umoci new --image "$1:$TAG"
}

# add_layer LAYOUT STAMP TAR WHAT: TAR as the next layer, its history entry dated STAMP.
add_layer() {
  umoci raw add-layer --image "$1:$TAG" --history.created "$(rfc3339 "$2")" --history.created_by "$4" "$3"
}

rfc3339() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }

# Common config: created, author, labels naming the version. The config change itself adds no
# history entry (it would carry the build's own time).
configure() {
  local layout=$1 version=$2 stamp=$3
  shift 3
  local created
  created=$(rfc3339 "$stamp")
  umoci config --image "$layout:$TAG" --no-history --created "$created" --author "csi-proxy release" \
    --config.label "org.opencontainers.image.title=csi-proxy" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0" \
    --manifest.annotation "org.opencontainers.image.version=$version" \
    --manifest.annotation "org.opencontainers.image.created=$created" \
    "$@"
  umoci gc --layout "$layout"
}

linux() {
  local out=$1 version=$2 stamp=$3 bins=$4
  need mmdebstrap umoci tar
  [ "$(id -u)" = 0 ] || die "the Linux image's base is made by mmdebstrap as root"
  local f
  for f in csi-proxy csi-proxyctl; do [ -x "$bins/$f" ] || die "no $bins/$f"; done
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  echo "== images: Linux base (mmdebstrap $SUITE: $LINUX_PACKAGES)"
  # No documentation but copyright files; the initiator name open-iscsi's install makes up is
  # removed: it is random (not reproducible) and the host's /etc/iscsi is mounted over it.
  SOURCE_DATE_EPOCH=$stamp mmdebstrap --quiet --variant=essential --include="$LINUX_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -f "$1/etc/iscsi/initiatorname.iscsi"' \
    "$SUITE" "$tmp/base.tar" "${MIRRORS[@]}"
  mkdir -p "$tmp/app/usr/local/bin" "$tmp/app/usr/share/doc/csi-proxy"
  install -m 0755 "$bins/csi-proxy" "$bins/csi-proxyctl" "$tmp/app/usr/local/bin/"
  install -m 0644 LICENSE "$tmp/app/usr/share/doc/csi-proxy/"
  tar_dir "$tmp/app" "$stamp" "$tmp/app.tar"
  new_layout "$tmp/oci"
  add_layer "$tmp/oci" "$stamp" "$tmp/base.tar" "mmdebstrap --variant=essential $SUITE: $LINUX_PACKAGES"
  add_layer "$tmp/oci" "$stamp" "$tmp/app.tar" "csi-proxy $version: /usr/local/bin/csi-proxy, csi-proxyctl"
  configure "$tmp/oci" "$version" "$stamp" --os linux --architecture amd64 \
    --config.entrypoint /usr/local/bin/csi-proxy \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  tar_dir "$tmp/oci" "$stamp" "$out"
  echo "== images: $out"
}

windows() {
  local out=$1 version=$2 stamp=$3 bins=$4
  need umoci tar python3
  local f
  for f in csi-proxy.exe csi-proxyctl.exe; do [ -f "$bins/$f" ] || die "no $bins/$f"; done
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local files=$tmp/layer/Files config=$tmp/layer/Files/Windows/System32/config
  mkdir -p "$config"
  install -m 0755 "$bins/csi-proxy.exe" "$bins/csi-proxyctl.exe" "$files/"
  install -m 0644 LICENSE "$files/"
  # FILETIME of STAMP: 100 ns ticks since 1601.
  local filetime=$(((stamp + 11644473600) * 10000000)) h
  for h in "${HIVES[@]}"; do python3 scripts/regf.py "$config/$h" "$h" "$filetime"; done
  # The layer's top entries are Files/ itself (no ./ prefix): Windows' importer reads paths as given.
  tar_dir "$tmp/layer" "$stamp" "$tmp/layer.tar" Files
  new_layout "$tmp/oci"
  add_layer "$tmp/oci" "$stamp" "$tmp/layer.tar" "csi-proxy $version: csi-proxy.exe, csi-proxyctl.exe, empty hives"
  # The DaemonSet names the exe by its full path; the entrypoint is for a plain `crictl run`. No
  # os.version: containerd's Windows platform matcher accepts an image without one on any Windows
  # build (a HostProcess container shares the host's), where one with a version must match.
  configure "$tmp/oci" "$version" "$stamp" --os windows --architecture amd64 \
    --config.entrypoint csi-proxy.exe
  tar_dir "$tmp/oci" "$stamp" "$out"
  echo "== images: $out"
}

# skopeo's view of ARCHIVE: "<config json>" on stdout; the manifest and blobs copied into DIR
# (skopeo checks every digest on the way).
inspect() {
  local archive=$1 dir=$2
  skopeo inspect --raw "oci-archive:$archive" >"$dir/manifest.json" || die "skopeo cannot read $archive"
  skopeo inspect --config "oci-archive:$archive" >"$dir/config.json" || die "skopeo: no config in $archive"
  skopeo copy -q "oci-archive:$archive" "dir:$dir/blobs" || die "skopeo copy of $archive failed (digests?)"
}

# check_config CONFIG OS ENTRYPOINT VERSION: fields a runtime reads.
check_config() {
  python3 - "$@" <<'EOF' || die "image config of $2: see above"
import json, sys
path, want_os, entry, version = sys.argv[1:]
c = json.load(open(path))
problems = []
if c.get("os") != want_os: problems.append(f"os {c.get('os')!r}, expected {want_os!r}")
if c.get("architecture") != "amd64": problems.append(f"architecture {c.get('architecture')!r}, expected 'amd64'")
got = (c.get("config") or {}).get("Entrypoint")
if got != [entry]: problems.append(f"entrypoint {got!r}, expected {[entry]!r}")
label = ((c.get("config") or {}).get("Labels") or {}).get("org.opencontainers.image.version")
if label != version: problems.append(f"version label {label!r}, expected {version!r}")
# containerd's Windows platform matcher takes an image with no os.version on any Windows version
# (HostProcess images have none); one with a version would be held to the host's build.
if want_os == "windows" and c.get("os.version"): problems.append(f"os.version {c['os.version']!r}: no version expected")
diff_ids = (c.get("rootfs") or {}).get("diff_ids") or []
if not diff_ids: problems.append("no layers")
for p in problems: print(f"images smoke: {want_os}: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
}

# The layer blobs of a `dir:` copy, in the manifest's order.
layers() {
  python3 -c '
import json, sys
for layer in json.load(open(sys.argv[1] + "/manifest.json"))["layers"]:
    print(sys.argv[1] + "/" + layer["digest"].split(":", 1)[1])
' "$1"
}

smoke() {
  local linux_tar=$1 windows_tar=${2:-}
  need skopeo python3 tar
  [ "$(id -u)" = 0 ] || die "the smoke test runs the Linux image's daemon in a chroot (root)"
  local tmp
  tmp=$(mktemp -d)
  # The daemon must be gone before its root is removed.
  local pid=""
  trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' RETURN

  local version
  version=$(basename "$linux_tar" | sed -E 's/^csi-proxy-(.*)-linux-amd64\.oci\.tar$/\1/')
  mkdir -p "$tmp/linux" "$tmp/root"
  inspect "$linux_tar" "$tmp/linux"
  check_config "$tmp/linux/config.json" linux /usr/local/bin/csi-proxy "$version"
  local blob
  for blob in $(layers "$tmp/linux/blobs"); do tar -C "$tmp/root" -xzf "$blob"; done
  # Resolved inside the image's root: its links are absolute.
  local tool
  for tool in csi-proxy csi-proxyctl mkfs.ext4 resize2fs e2fsck mkfs.xfs xfs_growfs mkfs.btrfs btrfs \
    mkfs.ntfs ntfsresize iscsiadm blkid mount; do
    chroot "$tmp/root" /usr/bin/which "$tool" >/dev/null || die "the Linux image has no $tool on its PATH"
  done
  echo "images smoke: Linux image: $(layers "$tmp/linux/blobs" | wc -l) layers, entrypoint /usr/local/bin/csi-proxy, the tools of every group"

  # The image's own daemon, in its own root (its glibc and libblkid, not this machine's), answers a
  # real PathExists through the image's csi-proxyctl.
  mkdir -p "$tmp/root/proc" "$tmp/root/var/lib/kubelet"
  mount -t proc proc "$tmp/root/proc"
  chroot "$tmp/root" /usr/local/bin/csi-proxy -version | grep -q "^csi-proxy ${version%-dirty} " \
    || { umount "$tmp/root/proc"; die "the image's csi-proxy is not version $version"; }
  chroot "$tmp/root" /usr/local/bin/csi-proxy -socket-dir /run/sock -kubelet-path /var/lib/kubelet \
    -metrics-bind-address 127.0.0.1:0 2>"$tmp/daemon.log" &
  pid=$!
  local i answer=""
  for i in $(seq 100); do [ -S "$tmp/root/run/sock/csi-proxy-filesystem-v1.sock" ] && break; sleep 0.1; done
  answer=$(chroot "$tmp/root" /usr/local/bin/csi-proxyctl -socket-dir /run/sock call filesystem/v1 PathExists \
    '{"path": "/var/lib/kubelet"}' 2>&1) || true
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  pid=""
  umount "$tmp/root/proc"
  grep -q '"exists": true' <<<"$answer" || { cat "$tmp/daemon.log" >&2; die "the Linux image's daemon answered: $answer"; }
  [ "$rc" = 0 ] || { cat "$tmp/daemon.log" >&2; die "the Linux image's daemon exited with $rc on SIGTERM"; }
  echo "images smoke: Linux image's daemon in its own root: PathExists(/var/lib/kubelet) = true, clean stop"

  [ -n "$windows_tar" ] || return 0
  mkdir -p "$tmp/windows"
  inspect "$windows_tar" "$tmp/windows"
  check_config "$tmp/windows/config.json" windows csi-proxy.exe "$version"
  local wl
  wl=$(layers "$tmp/windows/blobs")
  [ "$(wc -l <<<"$wl")" = 1 ] || die "the Windows image has $(wc -l <<<"$wl") layers, expected one base layer"
  local listing
  listing=$(tar -tzf "$wl" | sort)
  for f in Files/csi-proxy.exe Files/csi-proxyctl.exe "${HIVES[@]/#/Files/Windows/System32/config/}"; do
    grep -qx "$f" <<<"$listing" || die "the Windows image's layer lacks $f"
  done
  # Every entry under Files/ (Windows' importer takes nothing else but Hives/ and UtilityVM/).
  if grep -v '^Files\(/\|$\)' <<<"$listing" | grep -q .; then
    die "the Windows image's layer has entries outside Files/: $(grep -v '^Files\(/\|$\)' <<<"$listing" | head -3)"
  fi
  mkdir -p "$tmp/wl"
  tar -C "$tmp/wl" -xzf "$wl"
  # The exe is a PE file for x86-64 (machine 0x8664) and each hive parses with hivex, a parser
  # independent of the one that wrote them.
  python3 - "$tmp/wl/Files/csi-proxy.exe" <<'EOF' || die "Files/csi-proxy.exe is not an x86-64 PE"
import struct, sys
b = open(sys.argv[1], "rb").read(4096)
pe = struct.unpack_from("<I", b, 0x3C)[0]
assert b[:2] == b"MZ" and b[pe:pe + 4] == b"PE\0\0", "no PE header"
assert struct.unpack_from("<H", b, pe + 4)[0] == 0x8664, "not x86-64"
EOF
  local h
  for h in "${HIVES[@]}"; do
    hivexml "$tmp/wl/Files/Windows/System32/config/$h" | grep -q "<node name=\"$h\" root=\"1\">" \
      || die "the Windows image's $h hive does not parse (hivexml)"
  done
  echo "images smoke: Windows image: one base layer, csi-proxy.exe (x86-64 PE) and csi-proxyctl.exe at the root, 5 hives that parse"
}

case "${1:-}" in
  linux) shift; linux "$@" ;;
  windows) shift; windows "$@" ;;
  smoke) shift; smoke "$@" ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
