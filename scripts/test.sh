#!/usr/bin/env bash
# Runs the whole test suite:
#   0. the gates: rustfmt's layout (cargo fmt --check) and clippy with the workspace lints, every
#      warning an error (Linux target here; the Windows target's clippy runs with stage 3);
#   1. every Rust test of the workspace on Linux (some need root: sockets in /run, loop devices, a
#      containerd of their own running pods: crates/daemon/tests/containerd_e2e.rs);
#   2. the block backend's SCSI identity tests inside ../shared/tools/storage-vm (a throwaway VM
#      with scsi_debug disks), unless SKIP_STORAGE_VM=1;
#   3. clippy -D warnings for the Windows target (most unsafe blocks are Windows-only), the
#      workspace built for Windows and its tests run under Wine (../shared/tools/windows-cross),
#      unless SKIP_WINDOWS=1;
#   4. every fuzz target (fuzz/) for FUZZ_SECONDS each (default 10: about 3-4 minutes with the
#      build), unless SKIP_FUZZ=1;
#   5. deploy/ validated (Kubernetes schemas, the DaemonSets against the daemon's flags,
#      systemd-analyze); the release packages and container images made from the binaries the
#      stages above built (no release build of its own: RELEASE_BINS) and smoke-tested
#      (scripts/release.sh), unless SKIP_RELEASE=1;
#   6. real grpcio clients against the real Linux daemon binary (tests/grpcio).
# The stages that use the Linux debug build (1, 2, the deploy check and 6) run first.
#
# LEAN_DISK=1 (set by .ci/run) is for machines short of disk: no incremental caches, no debug
# info, and each build tree removed once the stages that use it are done, so the run peaks at one
# build tree (about 3 GB) instead of all of them at once (about 12 GB). Each stage header prints
# the space left where the build trees are.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
run_start=$SECONDS

lean() { [ "${LEAN_DISK:-0}" = 1 ]; }
if lean; then
  # Incremental caches only pay off on a rebuild, and line tables only for a backtrace by hand.
  export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=false CARGO_PROFILE_DEV_STRIP=debuginfo
fi
# "== <stage>" with the time so far and the free space of the build trees' filesystem.
stage() {
  local free
  free=$(df -Pk "$ROOT" | awk 'NR == 2 { printf "%.1f GB free", $4 / 1048576 }')
  echo "== $* [$((SECONDS - run_start)) s, $free]"
}
# Removes a build tree whose stages are done, in lean mode only.
drop() {
  if lean; then
    echo "   (LEAN_DISK: removing $*)"
    rm -rf "$@"
  fi
}

if ! python3 -c 'import grpc, grpc_tools, pytest, kubernetes_validate' 2>/dev/null; then
  echo "== installing Python test dependencies"
  python3 -m pip install -q --disable-pip-version-check grpcio==1.85.1 grpcio-tools==1.85.1 pytest \
    kubernetes-validate==1.37.0
fi

scripts/deps.sh test
stage "Linux: build"
cargo build --workspace --all-targets
stage "gates: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all --check
rustfmt --edition 2021 --check fuzz/fuzz_targets/*.rs
cargo clippy --workspace --all-targets -- -D warnings
stage "Linux: cargo test"
cargo test --workspace --no-fail-fast

if [ "${SKIP_STORAGE_VM:-0}" != 1 ]; then
  stage "Linux: the storage VM (SCSI identity, volumes on Debian's kernel, SMB, iSCSI)"
  scripts/storage-vm-tests.sh
fi

stage "deploy/: manifests and the systemd unit"
CSI_PROXY_BIN=$ROOT/target/debug/csi-proxy scripts/release.sh check

stage "Linux: grpcio clients against the daemon"
CSI_PROXY_BIN=$ROOT/target/debug/csi-proxy python3 -m pytest -q tests/grpcio
# The binaries the release stage packages, kept before their build trees go.
bins=$ROOT/target/test-bins
rm -rf "$bins" && mkdir -p "$bins/linux" "$bins/windows"
cp target/debug/csi-proxy target/debug/csi-proxyctl "$bins/linux/"
drop "$ROOT/target/debug"

if [ "${SKIP_WINDOWS:-0}" != 1 ]; then
  wc=../shared/tools/windows-cross
  [ -x "$wc" ] || { echo "missing $wc (set SKIP_WINDOWS=1 to skip the Windows part)" >&2; exit 1; }
  # A separate target dir: the Windows toolchain is another rustc, and sharing one would make
  # each side rebuild the other's host artifacts.
  stage "Windows: cargo clippy -D warnings (x86_64-pc-windows-gnu)"
  CARGO_TARGET_DIR=$ROOT/target/win "$wc" clippy --workspace --all-targets -- -D warnings
  stage "Windows: build (x86_64-pc-windows-gnu)"
  CARGO_TARGET_DIR=$ROOT/target/win "$wc" cargo build --workspace --all-targets
  stage "Windows: cargo test under Wine"
  CARGO_TARGET_DIR=$ROOT/target/win "$wc" cargo test --workspace --no-fail-fast
  cp target/win/x86_64-pc-windows-gnu/debug/csi-proxy.exe target/win/x86_64-pc-windows-gnu/debug/csi-proxyctl.exe \
    "$bins/windows/"
  drop "$ROOT/target/win"
fi

if [ "${SKIP_FUZZ:-0}" != 1 ]; then
  stage "Linux: fuzz targets, ${FUZZ_SECONDS:-10} s each"
  scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
  drop "$ROOT/fuzz/target"
fi

if [ "${SKIP_RELEASE:-0}" != 1 ]; then
  # The packaging itself is under test here, in whatever tree this is: a work tree with changes
  # gives packages named -dirty instead of a refusal. (Without the Windows part, SKIP_WINDOWS=1
  # makes the Linux package only.)
  release_start=$SECONDS
  stage "release: packages built and smoke-tested"
  ALLOW_DIRTY=1 RELEASE_BINS=$bins scripts/release.sh "$ROOT/target/dist"
  scripts/release.sh smoke "$ROOT/target/dist"
  echo "   release: $((SECONDS - release_start)) s"
fi

stage "all stages passed"
