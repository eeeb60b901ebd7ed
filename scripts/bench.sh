#!/usr/bin/env bash
# Benchmarks (not tests); figures are printed, never asserted.
# 1. Unary round trips (crates/stack-tests/benches/rtt.rs): p50/p99/max and calls/s of one cheap
#    RPC through the whole stack, for 1 client, 16 callers on one connection and 16 connections,
#    with the server process's CPU time per call, threads and peak memory;
#   - over a unix socket (this machine), always;
#   - over a named pipe under Wine, when ../shared/tools/windows-cross exists (skip: NO_WINE=1);
#   then the server's syscalls per call, counted by `strace -f -c` on the server process alone
#   (less the syscalls of a run without calls: start-up and stop), per scenario, on both
#   (skip: NO_STRACE=1, or no strace). strace slows the server: these runs make fewer calls
#   (RTT_STRACE_CALLS, default 5000) and their timings are not shown.
# 2. The Windows disk and volume groups' read-only calls under Wine (crates/stack-tests/benches/
#    win_block.rs), through the pipe and as bare host calls (skip: NO_WINE=1).
# 3. The Linux disk and volume groups (crates/stack-tests/benches/block.rs): per-RPC latency with
#    eight loop disks partitioned, formatted and mounted (needs root; skipped otherwise).
# 4. Optional, with UPSTREAM_EXE=<an upstream csi-proxy.exe you built yourself>: our release
#    daemon and that one side by side under Wine, in alternating rounds (UPSTREAM_ROUNDS, default
#    2), one after the other on the same pipes, driven by the same client (the rtt bench with
#    RTT_PATH_EXISTS: v1 Filesystem/PathExists on an existing folder under C:\var\lib\kubelet),
#    with each daemon's CPU time per call and its threads afterwards, and, since on 2 cores the
#    whole machine is the limit, the CPU per call of the wineserver (it serves every process), of
#    the client (its own start-up included, about 0.1 s) and of the machine (/proc/stat), and how
#    busy the machine was; all but the client's CPU time are counted in 10 ms ticks.
#    A client run that takes over UPSTREAM_TIMEOUT seconds (default 120) is killed and shown as
#    HUNG; one that fails is shown as FAILED with why. Nothing is downloaded: build
#    upstream's daemon yourself (its repository vendors its modules: GOOS=windows go build
#    -mod=vendor ./cmd/csi-proxy).
#    Before measuring, each daemon gets one throwaway call (killed after 10 s). Upstream needs it
#    under Wine: go-winio reserves the pipe name with a first instance opened without read or
#    write access, which Windows keeps closed to clients; Wine does not, so the first client to
#    open the pipe lands on that instance, which nobody serves, and waits forever.
# 5. Optional, with WINE_REQUESTS=1: the wineserver requests our release daemon makes per call,
#    by request type and by thread (16 callers on one connection, PathExists, 2,000 calls), from a
#    wineserver started with -d1, and those the other processes (the client, mostly) make. Under
#    Wine each request is a round trip to the wineserver, the main cost of a call there. With
#    UPSTREAM_EXE set too, the same count is made for that daemon.
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

# The benchmark executable cargo builds: `bench_exe [cargo runner...]`.
bench_exe() {
  "$@" cargo bench -q -p csi-proxy-stack-tests --bench rtt --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}

# Syscalls of one server process (`CMD --bench --serve`), under strace, while the clients run
# scenario $2 against it (none if empty); prints the total. `server_syscalls FILE SCENARIO CMD...`
server_syscalls() {
  local file=$1 scenario=$2 api echo
  shift 2
  coproc SRV { exec strace -f -c -o "$file.strace" "$@" --bench --serve 2>/dev/null; }
  local pid=$SRV_PID
  read -r api <&"${SRV[0]}"
  read -r echo <&"${SRV[0]}"
  if [[ -n $scenario ]]; then
    RTT_ONLY=$scenario RTT_CALLS=${RTT_STRACE_CALLS:-5000} RTT_WARMUP=500 "$@" --bench --connect "$api" >"$file.client"
  fi
  eval "exec ${SRV[1]}>&-"
  wait "$pid"
  awk '$NF == "total" { print $4 }' "$file.strace"
}

# `strace_rows LABEL CMD...`: one summary line per scenario.
strace_rows() {
  local label=$1 idle total calls scenario
  shift
  idle=$(server_syscalls "$out/idle" "" "$@")
  for scenario in sequential shared connections; do
    total=$(server_syscalls "$out/$scenario" "$scenario" "$@")
    calls=$(sed -n 's/^rtt: calls made //p' "$out/$scenario.client")
    awk -v t="$total" -v i="$idle" -v c="$calls" -v s="$scenario" -v l="$label" 'BEGIN {
      printf "rtt syscalls: %-18s %-12s server syscalls per call %6.1f  (%d in all, %d at start and stop, %d calls)\n",
        l, s, (t - i) / c, t, i, c }'
  done
}

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

# What the side-by-side and request-count runs call: v1 Filesystem/PathExists on this folder.
bench_dir='C:\var\lib\kubelet\bench'
fs_pipe='\\.\pipe\csi-proxy-filesystem-v1'

# `start_daemon LABEL EXE [SECONDS]`: starts the daemon EXE under Wine (log: $out/LABEL.log),
# gives it SECONDS (default 5) to bind its pipes and sets `daemon` to its pid; fails, showing the
# log, if it did not start.
start_daemon() {
  local label=$1 exe=$2 wait=${3:-5} p
  wine "$exe" >"$out/$label.log" 2>&1 &
  disown "$!"  # killed by the caller; no job-control notice
  sleep "$wait"
  # The daemon: the process of that name with the most threads (wine's launcher has fewer).
  daemon=
  for p in $(pgrep -f "${exe##*/}"); do
    if [[ -z $daemon ]] || (($(ls /proc/$p/task | wc -l) > $(ls /proc/$daemon/task | wc -l))); then daemon=$p; fi
  done
  if [[ -z $daemon ]]; then
    echo "$label did not start; its log:" >&2
    cat "$out/$label.log" >&2
    return 1
  fi
}

# `first_call CLIENT`: one throwaway call, killed (exit 124) after 10 s; see section 4 in the header.
first_call() {
  timeout 10 env RTT_ONLY=sequential RTT_CALLS=1 RTT_WARMUP=0 RTT_PATH_EXISTS="$bench_dir" \
    wine "$1" --bench --connect "$fs_pipe" >/dev/null 2>&1
}

# `ticks PID`: the process's user + system CPU, in clock ticks.
ticks() { if [[ -n $1 && -r /proc/$1/stat ]]; then awk '{ print $14 + $15 }' "/proc/$1/stat"; else echo 0; fi; }
# `machine_ticks`: "BUSY ALL", the whole machine's busy and total CPU ticks (iowait counts as idle).
machine_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }

# `side_by_side LABEL EXE CLIENT`: one round of the rtt client CLIENT's three scenarios against
# the daemon EXE.
side_by_side() {
  local label=$1 exe=$2 client=$3 pid ws scenario row rc made why c0 c1 w0 w1 m0 m1
  start_daemon "$label" "$exe" || return 0
  pid=$daemon
  ws=$(pgrep -o wineserver) || ws=
  rc=0
  first_call "$client" || rc=$?
  if ((rc == 124)); then
    echo "side by side: $label: the first connection to its pipe was not served (expected of go-winio under Wine; see the header)"
  fi
  for scenario in sequential shared connections; do
    c0=$(ticks "$pid") w0=$(ticks "$ws") m0=$(machine_ticks)
    rc=0
    # `time` adds a last line "client U S": the client's CPU seconds (it and what it waited for).
    row=$( (TIMEFORMAT='client %U %S'
      time timeout "${UPSTREAM_TIMEOUT:-120}" env RTT_ONLY=$scenario RTT_CALLS="${RTT_WINE_CALLS:-5000}" \
        RTT_WARMUP="${RTT_WINE_WARMUP:-500}" RTT_PATH_EXISTS="$bench_dir" \
        wine "$client" --bench --connect "$fs_pipe") 2>&1) || rc=$?
    c1=$(ticks "$pid") w1=$(ticks "$ws") m1=$(machine_ticks)
    made=$(sed -n 's/^rtt: calls made //p' <<<"$row")
    if ((rc == 124)); then
      printf "side by side: %-9s %-12s HUNG: the client was killed after %s s\n" "$label" "$scenario" "${UPSTREAM_TIMEOUT:-120}"
    elif ((rc != 0)) || [[ -z $made ]]; then
      # A panic's message is on the line after "panicked at"; otherwise the last line says why.
      why=$(grep -m1 -A1 'panicked at' <<<"$row" | tr '\n' ' ') || why=$(grep -v '^client ' <<<"$row" | tail -n 1)
      printf "side by side: %-9s %-12s FAILED (exit %d): %s\n" "$label" "$scenario" "$rc" "${why:0:200}"
    else
      awk -v l="$label" -v s="$scenario" -v d=$((c1 - c0)) -v w=$((w1 - w0)) -v m="$made" \
        -v busy=$((${m1% *} - ${m0% *})) -v all=$((${m1#* } - ${m0#* })) -v t="$(ls "/proc/$pid/task" | wc -l)" '
        /^named pipe/ { row = sprintf("side by side: %-9s %-12s calls/s %6d  p50 %8.1f us  p99 %8.1f us  daemon CPU %5.0f us/call  daemon threads %d",
          l, s, $(NF-3), $(NF-6), $(NF-5), d * 10000 / m, t) }
        /^client / { client = ($2 + $3) * 1e6 / m }
        END { if (row != "") printf "%s\n%-27s CPU us/call: wineserver %5.0f  client %5.0f  machine %5.0f (%2.0f%% busy)\n",
          row, "", w * 10000 / m, client, busy * 10000 / m, 100 * busy / all }' <<<"$row"
    fi
  done
  kill -9 "$pid" 2>/dev/null || true
  sleep 2
}

# Sections 4 and 5 run our release daemon and the rtt client under Wine: both built once here.
if [[ (-n ${UPSTREAM_EXE:-} || -n ${WINE_REQUESTS:-}) && -x $cross && -z ${NO_WINE:-} ]]; then
  CARGO_TARGET_DIR=$root/target/win "$cross" cargo build -q --release -p csi-proxy --bin csi-proxy
  ours=$root/target/win/x86_64-pc-windows-gnu/release/csi-proxy.exe
  client=$(CARGO_TARGET_DIR=$root/target/win bench_exe "$cross")
fi

if [[ -n ${UPSTREAM_EXE:-} && -x $cross && -z ${NO_WINE:-} ]]; then
  echo "== side by side with $UPSTREAM_EXE (Wine)" >&2
  (
    eval "$("$cross" env)"
    wineserver -p60 2>/dev/null || true
    mkdir -p "$WINEPREFIX/drive_c/var/lib/kubelet/bench"
    for round in $(seq 1 "${UPSTREAM_ROUNDS:-2}"); do
      side_by_side upstream "$UPSTREAM_EXE" "$client"
      side_by_side ours "$ours" "$client"
    done
  ) | tee "$out/side"
fi

# `wine_requests LABEL EXE CLIENT`: section 5. Runs a wineserver of its own with -d1 (one trace
# line per request, and one per reply), the daemon EXE, a throwaway call (see section 4), then
# CLIENT's shared-connection scenario; counts the request lines made during the calls, those of the
# daemon's threads (known by their unix thread ids) apart from the rest (the client's, mostly).
wine_requests() {
  local label=$1 exe=$2 client=$3 calls=2000 pid start end
  wineserver -k 2>/dev/null || true
  sleep 1
  wineserver -f -d1 2>"$out/trace" &
  disown "$!"
  sleep 1
  # A tracing wineserver is slower: the daemon gets a second more to start.
  if ! start_daemon requests "$exe" 6; then
    wineserver -k 2>/dev/null || true
    return 0
  fi
  pid=$daemon
  first_call "$client" || true
  ls "/proc/$pid/task" >"$out/tasks"
  start=$(wc -l <"$out/trace")
  RTT_ONLY=shared RTT_CALLS=$calls RTT_WARMUP=0 RTT_PATH_EXISTS="$bench_dir" \
    wine "$client" --bench --connect "$fs_pipe" >/dev/null 2>&1
  end=$(wc -l <"$out/trace")
  ls "/proc/$pid/task" >>"$out/tasks"
  kill -9 "$pid" 2>/dev/null || true
  wineserver -k 2>/dev/null || true
  python3 - "$out/trace" "$out/tasks" "$start" "$end" "$calls" "$label" <<'PY'
import re, sys
from collections import Counter, defaultdict
trace, tasks, label = sys.argv[1], sys.argv[2], sys.argv[6]
start, end, calls = (int(a) for a in sys.argv[3:6])
unix_tids = set(open(tasks).read().split())
lines = open(trace, errors="replace").read().splitlines()
ours = set()
for line in lines:
    m = re.match(r"^([0-9a-f]{4}): init_(?:first_)?thread\( (?:unix_pid=\d+, )?unix_tid=(\d+)", line)
    if m and m.group(2) in unix_tids:
        ours.add(m.group(1))
by_thread, others = defaultdict(Counter), Counter()
for line in lines[start:end]:
    m = re.match(r"^([0-9a-f]{4}): ([a-z_]+)\( ", line)  # requests only; replies read "name() = "
    if m:
        (by_thread[m.group(1)] if m.group(1) in ours else others)[m.group(2)] += 1
total = sum(by_thread.values(), Counter())
print(f"wineserver requests per call, {label} daemon, 16 callers on 1 connection, {calls} calls: {sum(total.values()) / calls:.2f}")
print("  by type:", ", ".join(f"{k} {v / calls:.2f}" for k, v in total.most_common(8)))
print(f"  other processes (the client, mostly): {sum(others.values()) / calls:.2f}:",
      ", ".join(f"{k} {v / calls:.2f}" for k, v in others.most_common(6)))
for tid, c in sorted(by_thread.items(), key=lambda kv: -sum(kv[1].values())):
    print(f"  thread {tid}: {sum(c.values()) / calls:.2f} ({', '.join(f'{k} {v / calls:.2f}' for k, v in c.most_common(4))})")
PY
}

if [[ -n ${WINE_REQUESTS:-} && -x $cross && -z ${NO_WINE:-} ]]; then
  echo "== wineserver requests per call (Wine)" >&2
  (
    eval "$("$cross" env)"
    mkdir -p "$WINEPREFIX/drive_c/var/lib/kubelet/bench"
    wine_requests ours "$ours" "$client"
    if [[ -n ${UPSTREAM_EXE:-} ]]; then
      wine_requests upstream "$UPSTREAM_EXE" "$client"
    fi
  ) | tee "$out/requests"
fi

if [[ -z ${NO_STRACE:-} ]] && command -v strace >/dev/null; then
  echo "== server syscalls per call (strace -f -c)" >&2
  strace_rows "unix socket" "$(bench_exe)" | tee "$out/strace"
  if [[ -x $cross && -z ${NO_WINE:-} ]]; then
    exe=$(CARGO_TARGET_DIR=$root/target/win bench_exe "$cross")
    (
      eval "$("$cross" env)"
      # A wineserver of its own process tree would be counted too: have one running already.
      wineserver -p10 2>/dev/null || true
      strace_rows "named pipe (Wine)" wine "$exe"
    ) | tee -a "$out/strace"
  fi
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
grep -h '^rtt:' "${files[@]}" | grep -v '^rtt: calls made'
[[ -f $out/strace ]] && cat "$out/strace"
[[ -f $out/side ]] && cat "$out/side"
[[ -f $out/requests ]] && cat "$out/requests"
grep -h -m1 '^transport' "${files[0]}"
grep -h -Ev '^(rtt:|transport)' "${files[@]}"
echo
[[ -f $out/win_block ]] && cat "$out/win_block"
cat "$out/block"
