#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for a bounded time: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  libFuzzer's -max_total_time for each target (default 15)
#   TARGET...           only these targets (default: all that `cargo fuzz list` shows)
# Installs cargo-fuzz if missing, builds all targets once, seeds their corpora (fuzz/seeds.py),
# runs each in turn and prints one line per target: executions, coverage, and whether it failed.
# Exits non-zero if any target found a crash, naming the reproducer (fuzz/artifacts/<target>/…).
#
# Stable Rust: `--sanitizer none` (-s none). cargo-fuzz's instrumentation flags (SanitizerCoverage
# through -Cpasses/-Cllvm-args, --cfg fuzzing) are all stable; only AddressSanitizer needs nightly,
# and the targets are safe Rust whose bugs are panics, which libFuzzer catches without it.
# Debug assertions and overflow checks are on (fuzz/Cargo.toml's release profile).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CARGO_FUZZ_VERSION=0.13.2
SECONDS_PER_TARGET=${1:-15}
shift || true

if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$CARGO_FUZZ_VERSION" ]; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

cd fuzz
# Its own target dir (fuzz/target): instrumented builds share nothing with the others, and
# a caller may export CARGO_TARGET_DIR for its own builds.
unset CARGO_TARGET_DIR
echo "== fuzz: build (release, debug assertions, no sanitizer)"
start=$(date +%s)
cargo fuzz build -s none
echo "   built in $(( $(date +%s) - start )) s"
python3 seeds.py

targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=0
echo "== fuzz: ${#targets[@]} targets, ${SECONDS_PER_TARGET} s each"
for t in "${targets[@]}"; do
  log=$logs/$t.log
  # -rss_limit_mb: the biggest input a target builds is a few MiB; anything near this is a bug.
  if cargo fuzz run -s none "$t" -- -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 \
      -rss_limit_mb=2048 -timeout=10 >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    failed=1
  fi
  # `|| true`: a target that fails while loading its corpus prints no statistics.
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  corpus=$(find "corpus/$t" -type f 2>/dev/null | wc -l || true)
  printf '%-22s %-6s execs %10s  cov %5s  corpus %5s\n' "$t" "$result" "${execs:-?}" "${cov:-?}" "$corpus"
  if [ "$result" = FAILED ]; then
    # The panic message and libFuzzer's reproducer path.
    grep -E -A1 "panicked at" "$log" | head -4 | sed 's/^/    /' || true
    grep -E "ERROR: libFuzzer|Test unit written to" "$log" | sed 's/^/    /' || true
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    if [ -n "$artifact" ]; then
      echo "    reproduce: (cd $ROOT/fuzz && cargo fuzz run -s none $t $artifact)"
    fi
  fi
done
exit $failed
