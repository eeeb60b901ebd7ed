#!/usr/bin/env bash
# Regenerates the flag table in docs/flags.md from the daemon's own `csi-proxy -help` (the
# docs_facts test does the rendering, and fails in CI when the table and -help disagree).
#   scripts/flags-md.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CSI_PROXY_WRITE_DOCS=1 cargo test -q -p csi-proxy --test docs_facts flags_md_is_the_daemons_help -- --exact
git --no-pager diff --stat -- docs/flags.md
