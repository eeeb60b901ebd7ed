#!/usr/bin/env bash
# Installs the Debian packages the build (and, with `test`, the test suite) needs, if missing.
#   scripts/deps.sh          build: libblkid's headers, clang (the libblkid bindings are made by
#                            bindgen) and pkg-config
#   scripts/deps.sh images   the container images' tools (scripts/images.sh): mmdebstrap, umoci,
#                            skopeo, and hivex's tools to check the Windows image's hives
#   scripts/deps.sh test     all of the above, the mkfs and grow tools of every -linux-fs-type, lvm2
#                            (the interlock tests make LVM volumes),
#                            zip/unzip for the release packages (scripts/release.sh), and
#                            containerd (with ctr and its CRI plugin), runc and busybox-static:
#                            crates/daemon/tests/containerd_e2e.rs starts a containerd of its own
#                            and runs pods from images it builds (umoci, busybox)
set -euo pipefail
pkgs=()
images=(mmdebstrap umoci skopeo libhivex-bin)
case "${1:-}" in
  "") pkgs=(libblkid-dev libclang-dev pkg-config) ;;
  images) pkgs=("${images[@]}") ;;
  test) pkgs=(libblkid-dev libclang-dev pkg-config xfsprogs btrfs-progs ntfs-3g lvm2 zip unzip
    containerd runc busybox-static "${images[@]}") ;;
  *) echo "usage: scripts/deps.sh [images|test]" >&2; exit 2 ;;
esac
need=()
for p in "${pkgs[@]}"; do
  # Installed, not merely known: a removed package keeps its conffiles and a dpkg -s entry.
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || need+=("$p")
done
[ ${#need[@]} = 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
  exit 1
fi
echo "== installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
