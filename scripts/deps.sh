#!/usr/bin/env bash
# Installs the Debian packages the build (and, with `test`, the test suite) needs, if missing.
#   scripts/deps.sh          build: libblkid's headers, clang (the libblkid bindings are made by
#                            bindgen) and pkg-config
#   scripts/deps.sh test     also the mkfs and grow tools of every -linux-fs-type, and zip/unzip
#                            for the release packages (scripts/release.sh)
set -euo pipefail
pkgs=(libblkid-dev libclang-dev pkg-config)
[ "${1:-}" = test ] && pkgs+=(xfsprogs btrfs-progs ntfs-3g zip unzip)
need=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
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
