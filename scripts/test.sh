#!/usr/bin/env bash
# Runs the whole test suite:
#   0. the gates: rustfmt's layout (cargo fmt --check) and clippy with the workspace lints, every
#      warning an error (Linux target; the Windows toolchain has no clippy);
#   1. every Rust test of the workspace on Linux (some need root: sockets in /run, loop devices);
#   2. the block backend's SCSI identity tests inside ../shared/tools/storage-vm (a throwaway VM
#      with scsi_debug disks), unless SKIP_STORAGE_VM=1;
#   3. the workspace built for Windows and its tests run under Wine (../shared/tools/windows-cross),
#      unless SKIP_WINDOWS=1;
#   4. every fuzz target (fuzz/) for FUZZ_SECONDS each (default 10: about 3-4 minutes with the
#      build), unless SKIP_FUZZ=1;
#   5. deploy/ validated (Kubernetes schemas, systemd-analyze), the release packages built and
#      smoke-tested (scripts/release.sh: two release builds, about 10 minutes on 2 cores), unless
#      SKIP_RELEASE=1;
#   6. real grpcio clients against the real Linux daemon binary (tests/grpcio).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if ! python3 -c 'import grpc, grpc_tools, pytest, kubernetes_validate' 2>/dev/null; then
  echo "== installing Python test dependencies"
  python3 -m pip install -q --disable-pip-version-check grpcio==1.85.1 grpcio-tools==1.85.1 pytest \
    kubernetes-validate==1.37.0
fi

scripts/deps.sh test
echo "== Linux: build"
cargo build --workspace --all-targets
echo "== gates: cargo fmt --check, cargo clippy -D warnings"
cargo fmt --all --check
rustfmt --edition 2021 --check fuzz/fuzz_targets/*.rs
cargo clippy --workspace --all-targets -- -D warnings
echo "== Linux: cargo test"
cargo test --workspace --no-fail-fast

if [ "${SKIP_STORAGE_VM:-0}" != 1 ]; then
  echo "== Linux: the storage VM (SCSI identity, volumes on Debian's kernel, SMB, iSCSI)"
  scripts/storage-vm-tests.sh
fi

if [ "${SKIP_WINDOWS:-0}" != 1 ]; then
  wc=../shared/tools/windows-cross
  [ -x "$wc" ] || { echo "missing $wc (set SKIP_WINDOWS=1 to skip the Windows part)" >&2; exit 1; }
  # A separate target dir: the Windows toolchain is another rustc, and sharing one would make
  # each side rebuild the other's host artifacts.
  export CARGO_TARGET_DIR=$PWD/target/win
  echo "== Windows: build (x86_64-pc-windows-gnu)"
  "$wc" cargo build --workspace --all-targets
  echo "== Windows: cargo test under Wine"
  "$wc" cargo test --workspace --no-fail-fast
fi

if [ "${SKIP_FUZZ:-0}" != 1 ]; then
  echo "== Linux: fuzz targets, ${FUZZ_SECONDS:-10} s each"
  scripts/fuzz.sh "${FUZZ_SECONDS:-10}"
fi

echo "== deploy/: manifests and the systemd unit"
CSI_PROXY_BIN=$ROOT/target/debug/csi-proxy scripts/release.sh check

if [ "${SKIP_RELEASE:-0}" != 1 ]; then
  # The packaging itself is under test here, in whatever tree this is: a work tree with changes
  # gives packages named -dirty instead of a refusal. (Without the Windows part, SKIP_WINDOWS=1
  # makes the Linux package only.)
  release_start=$SECONDS
  echo "== release: packages built and smoke-tested"
  ALLOW_DIRTY=1 scripts/release.sh "$ROOT/target/dist"
  scripts/release.sh smoke "$ROOT/target/dist"
  echo "== release: $((SECONDS - release_start)) s"
fi

# Last, so that the run closes on its summary line.
echo "== Linux: grpcio clients against the daemon"
CSI_PROXY_BIN=$ROOT/target/debug/csi-proxy python3 -m pytest -q tests/grpcio

