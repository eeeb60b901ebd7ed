#!/usr/bin/env bash
# Builds csi-proxy, runs it with the Linux backend on a temporary socket directory, makes a few
# real calls against it with the demo client, and stops it.
#   scripts/run-daemon.sh            demo, then stop
#   scripts/run-daemon.sh --keep     demo, then keep serving until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
echo "== building csi-proxy and the demo client (cargo build; the first build takes a few minutes)..."
# Two target selections: with `--example` alone cargo builds only the example, not the daemon.
cargo build -q -p csi-proxy --bin csi-proxy -p csi-proxy-server --example demo_client
bin=${CARGO_TARGET_DIR:-target}/debug
[ -x "$bin/csi-proxy" ] && [ -x "$bin/examples/demo_client" ] \
  || { echo "run-daemon: the build left no $bin/csi-proxy or $bin/examples/demo_client" >&2; exit 1; }
dir=$(mktemp -d /tmp/csi-proxy-demo.XXXXXX)
mkdir "$dir/kubelet"
"$bin/csi-proxy" -socket-dir "$dir" -kubelet-path "$dir/kubelet" -v=2 -audit-log "$dir/audit.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ "$(ls "$dir"/*.sock 2>/dev/null | wc -l)" = 23 ] && break; sleep 0.1; done
echo "== 23 sockets in $dir:"; ls "$dir"/*.sock | xargs -n1 basename | column -c 120
echo "== demo calls (those marked \"(expected to be refused)\" show the daemon saying no):"
"$bin/examples/demo_client" "$dir" "$dir/kubelet"
echo "== the audit trail (-audit-log): a start and an end record per call that may change the host"
cat "$dir/audit.log"
if [ "${1:-}" = "--keep" ]; then echo "serving on $dir; Ctrl-C to stop"; wait $pid; fi
