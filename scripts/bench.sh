#!/usr/bin/env bash
# Benchmarks (not tests); figures are printed, never asserted.
# 1. Unary round trips (crates/stack-tests/benches/rtt.rs): p50/p99/max and calls/s of one cheap
#    RPC through the whole stack, for 1 client, 16 callers on one connection and 16 connections.
#   - over a unix socket (this machine), always;
#   - over a named pipe under Wine, when ../shared/tools/windows-cross exists (skip: NO_WINE=1).
# 2. The Windows disk and volume groups' read-only calls under Wine (crates/stack-tests/benches/
#    win_block.rs), through the pipe and as bare host calls (skip: NO_WINE=1).
# 3. The Linux disk and volume groups (crates/stack-tests/benches/block.rs): per-RPC latency with
#    eight loop disks partitioned, formatted and mounted (needs root; skipped otherwise).
# The tables are printed again together at the end.
#
#   scripts/bench.sh
#   RTT_CALLS=50000 scripts/bench.sh           more calls on Linux (default 20000 per scenario)
#   RTT_WINE_CALLS=20000 scripts/bench.sh      more calls under Wine (default 5000; Wine is slow)
# Other knobs (RTT_WARMUP, RTT_CALLERS, RTT_SERVER_THREADS, RTT_CLIENT_THREADS) are read by the
# benchmark itself and apply to both runs; see the top of crates/stack-tests/benches/rtt.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cross=$root/../shared/tools/windows-cross

out=$(mktemp -d /tmp/csi-proxy-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT

echo "== unix socket (Linux)" >&2
cargo bench -q -p csi-proxy-stack-tests --bench rtt | tee "$out/linux"

if [[ -x $cross && -z ${NO_WINE:-} ]]; then
  echo "== named pipe (Wine)" >&2
  RTT_CALLS=${RTT_WINE_CALLS:-5000} RTT_WARMUP=${RTT_WINE_WARMUP:-500} CARGO_TARGET_DIR=$root/target/win \
    "$cross" cargo bench -q -p csi-proxy-stack-tests --bench rtt | tee "$out/wine"
else
  if [[ -n ${NO_WINE:-} ]]; then why="NO_WINE is set"; else why="no $cross"; fi
  echo "== named pipe (Wine): skipped ($why)" >&2
fi

if [[ -x $cross && -z ${NO_WINE:-} ]]; then
  echo "== disk and volume groups, Win32 under Wine" >&2
  CARGO_TARGET_DIR=$root/target/win "$cross" cargo bench -q -p csi-proxy-stack-tests --bench win_block | tee "$out/win_block"
fi

echo "== disk and volume groups on loop disks (Linux, root)" >&2
cargo bench -q -p csi-proxy-stack-tests --bench block | tee "$out/block"

files=("$out"/linux)
[[ -f $out/wine ]] && files+=("$out"/wine)
echo
echo "== Summary"
grep -h '^rtt:' "${files[@]}"
grep -h -m1 '^transport' "${files[0]}"
grep -h -Ev '^(rtt:|transport)' "${files[@]}"
echo
[[ -f $out/win_block ]] && cat "$out/win_block"
cat "$out/block"
