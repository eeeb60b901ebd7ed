#!/usr/bin/env bash
# Release artifacts, built from a clean checkout:
#   scripts/release.sh [OUT]         build the binaries for both systems (release profile) and
#                                    package them into OUT (default dist/):
#       csi-proxy-<version>-windows-amd64.zip    csi-proxy.exe and csi-proxyctl.exe (cross-built),
#                                                README.md, SECURITY.md, LICENSE, docs/, deploy/
#       csi-proxy-<version>-linux-amd64.tar.gz   csi-proxy, csi-proxyctl, README.md, SECURITY.md, LICENSE, docs/, deploy/
#       csi-proxy-<version>-linux-amd64.oci.tar  the Linux container image (OCI archive: Debian 12
#                                                with the tools of every group, the binaries)
#       csi-proxy-<version>-windows-amd64.oci.tar
#                                                the Windows HostProcess container image (OCI
#                                                archive: the exes at its root, no base image)
#       SHA256SUMS                               sha256sum's lines for all of them
#                                    The images are made by scripts/images.sh (as root: mmdebstrap);
#                                    SKIP_IMAGES=1 makes the archives only.
#   scripts/release.sh check         validate deploy/: every manifest against the Kubernetes schemas
#                                    (PyPI's kubernetes-validate, offline: it ships them), strict,
#                                    for the oldest and newest Kubernetes it knows of ours; the
#                                    systemd unit with `systemd-analyze verify` where there is one;
#                                    the DaemonSets against the daemon's flags (tests/deploy)
#   scripts/release.sh smoke [OUT]   unpack the packages of OUT into a temp dir and try them: the
#                                    Windows exes print their versions under Wine; the Linux binary
#                                    starts on a temp socket dir, answers one real gRPC call
#                                    (Python grpcio) and csi-proxyctl's discovery and a call, and
#                                    stops cleanly. Then the images, read with skopeo (manifest,
#                                    config, os/arch, entrypoint, digests, layer contents); the
#                                    Linux image's own daemon runs in its unpacked root and
#                                    answers PathExists (scripts/images.sh smoke).
#
# <version> is what the built daemon reports (`csi-proxy -version`), so the names cannot disagree
# with the binaries. A work tree with changes (tracked or untracked, ignored files aside) is
# refused: its binaries would name a commit they were not built from. ALLOW_DIRTY=1 builds anyway
# and marks the names `-dirty`. SKIP_WINDOWS=1 makes only the Linux package. RELEASE_BINS=DIR
# packages DIR/linux/{csi-proxy,csi-proxyctl} and DIR/windows/{csi-proxy,csi-proxyctl}.exe instead
# of building: the test suite uses it to test the packaging with the binaries it already built.
#
# The packages are reproducible for a given commit and toolchain: entries sorted, owned by root,
# dated at the commit's time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WC=$ROOT/../shared/tools/windows-cross
# What goes into both packages besides the binaries.
EXTRA=(README.md SECURITY.md LICENSE docs deploy)

die() { echo "release: $*" >&2; exit 1; }

# Version of the binary `$@` runs: the second word of `csi-proxy <version> (commit ...)`.
version_of() {
  local line
  line=$("$@" -version) || die "$* -version failed"
  [[ $line =~ ^csi-proxy\ ([0-9A-Za-z.+-]+)\ \(commit\ ([0-9a-f]{12}|unknown)(,\ dirty)?\)$ ]] \
    || die "unexpected -version output: $line"
  printf '%s\n' "${BASH_REMATCH[1]}"
}

build() {
  local out=${1:-dist}
  for f in "${EXTRA[@]}"; do [ -e "$f" ] || die "missing $f"; done
  for t in zip sha256sum gzip; do
    command -v "$t" >/dev/null || die "missing $t (scripts/deps.sh test installs it)"
  done
  local dirty
  dirty=$(git status --porcelain 2>/dev/null) || die "not a git checkout"
  if [ -n "$dirty" ]; then
    [ "${ALLOW_DIRTY:-0}" = 1 ] || die "the work tree has changes (commit them, or ALLOW_DIRTY=1):
$dirty"
    echo "release: building from a work tree with changes (ALLOW_DIRTY=1)" >&2
  fi
  local t0=$SECONDS
  local linux_bin=$ROOT/target/release/csi-proxy win_bin=""
  local linux_ctl=$ROOT/target/release/csi-proxyctl win_ctl=""
  if [ -n "${RELEASE_BINS:-}" ]; then
    # The test suite's own builds, packaged to test the packaging (scripts/test.sh): no second
    # build of each system, but not release builds either.
    echo "== release: packaging the binaries in $RELEASE_BINS (RELEASE_BINS: a packaging test, not a release)"
    linux_bin=$RELEASE_BINS/linux/csi-proxy linux_ctl=$RELEASE_BINS/linux/csi-proxyctl
    if [ "${SKIP_WINDOWS:-0}" != 1 ]; then
      win_bin=$RELEASE_BINS/windows/csi-proxy.exe win_ctl=$RELEASE_BINS/windows/csi-proxyctl.exe
    fi
    local f
    for f in "$linux_bin" "$linux_ctl" $win_bin $win_ctl; do [ -f "$f" ] || die "RELEASE_BINS: no $f"; done
  else
    echo "== release: Linux build"
    CARGO_TARGET_DIR=$ROOT/target cargo build --locked --release -p csi-proxy -p csi-proxyctl
    if [ "${SKIP_WINDOWS:-0}" != 1 ]; then
      [ -x "$WC" ] || die "missing $WC (SKIP_WINDOWS=1 makes the Linux package only)"
      echo "== release: Windows build (x86_64-pc-windows-gnu)"
      CARGO_TARGET_DIR=$ROOT/target/win "$WC" cargo build --locked --release -p csi-proxy -p csi-proxyctl
      win_bin=$ROOT/target/win/x86_64-pc-windows-gnu/release/csi-proxy.exe
      win_ctl=$ROOT/target/win/x86_64-pc-windows-gnu/release/csi-proxyctl.exe
    fi
    echo "release: builds took $((SECONDS - t0)) s"
  fi

  local version
  version=$(version_of "$linux_bin")
  [ -n "$dirty" ] && version+=-dirty
  local stamp
  stamp=$(git log -1 --format=%ct)
  rm -rf "$out" && mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN

  # stage NAME BINARY...: a directory NAME holding the binaries and the extras, dated at the commit.
  stage() {
    local dir=$stage/$1
    shift
    mkdir -p "$dir"
    install -m 0755 "$@" "$dir/"
    cp -R "${EXTRA[@]}" "$dir/"
    chmod -R u=rwX,go=rX "$dir"
    find "$dir" -exec touch -h -d "@$stamp" {} +
  }

  local name=csi-proxy-$version-linux-amd64
  stage "$name" "$linux_bin" "$linux_ctl"
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$stamp" \
    -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
  if [ -n "$win_bin" ]; then
    name=csi-proxy-$version-windows-amd64
    stage "$name" "$win_bin" "$win_ctl"
    # -X: no extra attributes (uid, atime), so the archive depends on content and dates only.
    (cd "$stage" && find "$name" -print | LC_ALL=C sort | zip -q -X -9 "$out/$name.zip" -@)
  fi
  if [ "${SKIP_IMAGES:-0}" != 1 ]; then
    local t_img=$SECONDS bins=$stage/bins
    mkdir -p "$bins/linux" "$bins/windows"
    install -m 0755 "$linux_bin" "$linux_ctl" "$bins/linux/"
    scripts/images.sh linux "$out/csi-proxy-$version-linux-amd64.oci.tar" "$version" "$stamp" "$bins/linux"
    if [ -n "$win_bin" ]; then
      install -m 0755 "$win_bin" "$win_ctl" "$bins/windows/"
      scripts/images.sh windows "$out/csi-proxy-$version-windows-amd64.oci.tar" "$version" "$stamp" "$bins/windows"
    fi
    echo "release: images took $((SECONDS - t_img)) s"
  fi
  (cd "$out" && sha256sum -- csi-proxy-* >SHA256SUMS)
  echo "== release: $out ($((SECONDS - t0)) s in all)"
  (cd "$out" && ls -l && cat SHA256SUMS)
}

smoke() {
  local out=${1:-dist}
  [ -f "$out/SHA256SUMS" ] || die "no $out/SHA256SUMS: run scripts/release.sh first"
  out=$(cd "$out" && pwd)
  (cd "$out" && sha256sum --quiet -c SHA256SUMS) || die "checksums do not match"
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN

  local tgz zip
  tgz=$(ls "$out"/csi-proxy-*-linux-amd64.tar.gz)
  tar -C "$tmp" -xzf "$tgz"
  local dir=$tmp/$(basename "$tgz" .tar.gz)
  for f in csi-proxy csi-proxyctl "${EXTRA[@]}"; do [ -e "$dir/$f" ] || die "$(basename "$tgz") lacks $f"; done
  local version
  version=$(version_of "$dir/csi-proxy")
  echo "release smoke: Linux binary: $("$dir/csi-proxy" -version)"
  [ "$("$dir/csi-proxyctl" -version)" = "csi-proxyctl $version" ] || die "csi-proxyctl is not version $version"

  zip=$(ls "$out"/csi-proxy-*-windows-amd64.zip 2>/dev/null || true)
  if [ -n "$zip" ]; then
    (cd "$tmp" && unzip -q "$zip")
    local wdir=$tmp/$(basename "$zip" .zip)
    for f in csi-proxy.exe csi-proxyctl.exe "${EXTRA[@]}"; do [ -e "$wdir/$f" ] || die "$(basename "$zip") lacks $f"; done
    # Wine prints its own noise on stderr; the version line is on stdout. The prefix is the one
    # windows-cross set up.
    local wline
    wline=$(eval "$("$WC" env)" && wine "$wdir/csi-proxy.exe" -version 2>/dev/null | tr -d '\r') \
      || die "the Windows exe did not run under Wine"
    echo "release smoke: Windows exe under Wine: $wline"
    [ "$wline" = "$("$dir/csi-proxy" -version)" ] || die "Windows and Linux binaries disagree: $wline"
    wline=$(eval "$("$WC" env)" && wine "$wdir/csi-proxyctl.exe" -version 2>/dev/null | tr -d '\r') \
      || die "csi-proxyctl.exe did not run under Wine"
    echo "release smoke: Windows csi-proxyctl.exe under Wine: $wline"
    [ "$wline" = "csi-proxyctl $version" ] || die "csi-proxyctl.exe is not version $version: $wline"
  else
    echo "release smoke: no Windows package in $out"
  fi

  # One real call: Filesystem v1 PathExists on the kubelet dir, over the daemon's socket.
  local sock=$tmp/sock kubelet=$tmp/kubelet
  mkdir -p "$kubelet"
  "$dir/csi-proxy" -socket-dir "$sock" -kubelet-path "$kubelet" -metrics-bind-address 127.0.0.1:0 \
    2>"$tmp/daemon.log" &
  local pid=$!
  python3 - "$sock/csi-proxy-filesystem-v1.sock" "$kubelet" <<'EOF' || { kill "$pid" 2>/dev/null; cat "$tmp/daemon.log" >&2; die "the Linux binary did not answer"; }
import os, sys, time
import grpc
sock, path = sys.argv[1], sys.argv[2]
deadline = time.time() + 20
while not os.path.exists(sock):
    if time.time() > deadline:
        sys.exit(f"no socket {sock} after 20 s")
    time.sleep(0.05)
raw = path.encode()
assert len(raw) < 128, "one-byte length prefix"
request = b"\x0a" + bytes([len(raw)]) + raw  # PathExistsRequest{path}: field 1, length-delimited
with grpc.insecure_channel(f"unix:{sock}") as ch:
    call = ch.unary_unary("/v1.Filesystem/PathExists", request_serializer=None, response_deserializer=None)
    answer = call(request, timeout=10)
assert answer == b"\x08\x01", f"PathExists({path}) answered {answer!r}, expected exists=true"
print(f"release smoke: PathExists({path}) over {sock}: exists=true")
EOF
  # The CLI against the same daemon: every API answers; a call's JSON comes back.
  local apis
  apis=$("$dir/csi-proxyctl" -socket-dir "$sock" apis) || { kill "$pid"; die "csi-proxyctl apis failed"; }
  grep -q '^23 of 23 APIs answer$' <<<"$apis" || { kill "$pid"; die "csi-proxyctl apis: $apis"; }
  local answer
  answer=$("$dir/csi-proxyctl" -socket-dir "$sock" call filesystem/v1 PathExists "{\"path\": \"$kubelet\"}") \
    || { kill "$pid"; die "csi-proxyctl call PathExists failed"; }
  grep -q '"exists": true' <<<"$answer" || { kill "$pid"; die "csi-proxyctl call PathExists answered: $answer"; }
  echo "release smoke: csi-proxyctl: 23 of 23 APIs answer; PathExists over the CLI: exists=true"
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || { cat "$tmp/daemon.log" >&2; die "the daemon exited with $rc on SIGTERM"; }
  [ -z "$(ls -A "$sock" 2>/dev/null)" ] || die "sockets left after a clean stop: $(ls "$sock")"
  local images=("$out"/csi-proxy-*-linux-amd64.oci.tar)
  if [ -e "${images[0]}" ]; then
    local win_image=("$out"/csi-proxy-*-windows-amd64.oci.tar)
    [ -e "${win_image[0]}" ] || win_image=()
    scripts/images.sh smoke "${images[0]}" "${win_image[@]}"
  else
    echo "release smoke: no images in $out"
  fi
  echo "release smoke: $version passed"
}

# Kubernetes versions the manifests are checked against: HostProcess containers are stable since
# 1.26; the newest is what the installed kubernetes-validate knows.
K8S_VERSIONS=(1.26.0 latest)

check() {
  local files=() f v args
  # deploy/policies/ holds csi-proxy's authorization policies, not Kubernetes objects (they are
  # read and checked by crates/stack-tests/tests/driver_policies_scripted.rs).
  for f in deploy/*/*.yaml; do
    [[ $f == deploy/policies/* ]] || files+=("$f")
  done
  python3 -c 'import kubernetes_validate' 2>/dev/null \
    || die "kubernetes-validate is missing: python3 -m pip install kubernetes-validate"
  for v in "${K8S_VERSIONS[@]}"; do
    args=(--strict --quiet)
    [ "$v" = latest ] || args+=(-k "$v")
    echo "== deploy/: ${#files[@]} manifests against Kubernetes $v"
    python3 -m kubernetes_validate "${args[@]}" "${files[@]}" || die "deploy/ manifests do not validate ($v)"
  done
  # What the schemas cannot see: the DaemonSets' flags are the daemon's, the Linux groups'
  # directories are the host's, the two DaemonSets do not collide (tests/deploy).
  local bin=${CSI_PROXY_BIN:-$ROOT/target/debug/csi-proxy}
  [ -x "$bin" ] || die "no daemon binary at $bin to check deploy/ against (cargo build -p csi-proxy)"
  echo "== deploy/: the DaemonSets against $bin's flags (tests/deploy)"
  CSI_PROXY_BIN=$bin python3 -m pytest -q -p no:cacheprovider tests/deploy || die "deploy/ does not fit the daemon"
  if ! command -v systemd-analyze >/dev/null; then
    echo "== deploy/: no systemd-analyze here; the unit file is not verified"
    return
  fi
  # verify wants ExecStart's binary to exist: point it at the one just built.
  local tmp unit out
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  for unit in deploy/linux/*.service; do
    sed "s|/usr/local/bin/csi-proxy|$bin|" "$unit" >"$tmp/$(basename "$unit")"
    echo "== deploy/: systemd-analyze verify $unit"
    # It exits 0 on unknown keys and bad values, only warning: any output is a failure.
    out=$(systemd-analyze verify "$tmp/$(basename "$unit")" 2>&1) || die "$unit: $out"
    [ -z "$out" ] || die "$unit: $out"
  done
}

case "${1:-}" in
  check) shift; check "$@" ;;
  smoke) shift; smoke "$@" ;;
  -h|--help) sed -n '2,20p' "$0" ;;
  *) build "$@" ;;
esac
