"""deploy/'s DaemonSets against the daemon they run: every flag they pass is one the daemon has,
the directories the Linux groups work in are the host's, and the two DaemonSets can live in one
cluster. kubernetes-validate checks the schema (scripts/release.sh check); this checks meaning.

Run by scripts/release.sh check with CSI_PROXY_BIN set to a built daemon (its `-help` is the
list of flags and their defaults).
"""

import os
import pathlib
import re
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
# deploy/policies/ holds the daemon's authorization policies, not Kubernetes objects.
MANIFESTS = sorted(p for p in (ROOT / "deploy").glob("*/*.yaml") if p.parent.name != "policies")
LINUX = ROOT / "deploy/linux/csi-proxy-daemonset.yaml"
WINDOWS = ROOT / "deploy/windows/csi-proxy-hostprocess.yaml"


@pytest.fixture(scope="module")
def daemon_flags():
    """{name: default} from the daemon's own -help."""
    binary = os.environ.get("CSI_PROXY_BIN") or str(ROOT / "target/debug/csi-proxy")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"no daemon at {binary}: set CSI_PROXY_BIN or cargo build -p csi-proxy")
    text = subprocess.run([binary, "-help"], capture_output=True, text=True, check=True).stdout
    flags = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"^  -([A-Za-z0-9_-]+)", line)
        if m:
            name = m.group(1)
            flags[name] = None
            continue
        d = re.search(r'\(default "([^"]*)"\)$', line)
        if name and d:
            flags[name] = d.group(1)
    assert "kubelet-path" in flags and "linux-smb-dir" in flags, f"unexpected -help output:\n{text}"
    return flags


def documents(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def the_daemonset(path):
    (ds,) = [d for d in documents(path) if d["kind"] == "DaemonSet"]
    return ds


def the_container(ds):
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    return c


def parse_args(args):
    """'-name=value' / '-name' into {name: value}; every argument must be one of these forms."""
    out = {}
    for a in args:
        m = re.fullmatch(r"--?([A-Za-z0-9_-]+)(?:=(.*))?", a)
        assert m, f"argument {a!r} is not -name or -name=value"
        out[m.group(1)] = m.group(2) if m.group(2) is not None else "true"
    return out


def proxy_daemonsets():
    return [(p, the_daemonset(p)) for p in (LINUX, WINDOWS)]


@pytest.mark.parametrize("path", [LINUX, WINDOWS], ids=lambda p: p.name)
def test_every_flag_is_the_daemons(path, daemon_flags):
    args = parse_args(the_container(the_daemonset(path)).get("args", []))
    unknown = sorted(set(args) - set(daemon_flags))
    assert not unknown, f"{path.name} passes flags the daemon does not have: {unknown}"


def test_the_two_daemonsets_can_share_a_cluster():
    seen = {}
    for path, ds in proxy_daemonsets():
        key = (ds["metadata"]["namespace"], ds["metadata"]["name"])
        assert key not in seen, f"{path.name} and {seen[key]} are both {key}: the second apply replaces the first"
        seen[key] = path.name
    # Neither selector may match the other's pods (a controller would adopt or fight over them).
    for path, ds in proxy_daemonsets():
        selector = ds["spec"]["selector"]["matchLabels"]
        own = ds["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= own.items(), f"{path.name}: its selector does not match its own pods"
        for other_path, other in proxy_daemonsets():
            if other_path == path:
                continue
            labels = other["spec"]["template"]["metadata"]["labels"]
            assert not selector.items() <= labels.items(), (
                f"{path.name}'s selector {selector} also matches {other_path.name}'s pods {labels}"
            )
    names = {ds["metadata"]["name"] for _, ds in proxy_daemonsets()}
    assert names == {"csi-proxy-linux", "csi-proxy-windows"}


def host_mount(ds, container, path):
    """The volumeMount whose mountPath is `path` or a parent of it, and its hostPath volume."""
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"].get("volumes", [])}
    best = None
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"]):
                best = m
    assert best is not None, f"{path} is not on any volume: it exists only in the container"
    volume = volumes[best["name"]]
    assert "hostPath" in volume, f"{path} is on volume {best['name']}, which is not a hostPath"
    rel = os.path.relpath(path, best["mountPath"])
    host = os.path.normpath(os.path.join(volume["hostPath"]["path"], rel))
    return best, host


def test_linux_groups_work_in_the_hosts_directories(daemon_flags):
    ds = the_daemonset(LINUX)
    c = the_container(ds)
    args = parse_args(c.get("args", []))
    value = lambda flag: args.get(flag, daemon_flags[flag])  # noqa: E731

    # Mounts the daemon makes (volumes under the kubelet's directory, SMB shares) must reach the
    # host, and the links it makes there (SMB) are absolute paths: each directory is the host's
    # own at the same path, shared both ways.
    for flag in ("kubelet-path", "linux-smb-dir"):
        path = value(flag)
        mount, host = host_mount(ds, c, path)
        assert host == path, f"-{flag}={path} is the host's {host}: links to it would not resolve on the host"
        assert mount.get("mountPropagation") == "Bidirectional", (
            f"-{flag}={path} is mounted without Bidirectional propagation: mounts made there stay in the container"
        )
    # The sockets node plugins dial are in the host's directory.
    _, host = host_mount(ds, c, value("socket-dir"))
    assert host == value("socket-dir")

    spec = ds["spec"]["template"]["spec"]
    # iscsiadm reaches iscsid through an abstract socket, which is per network namespace; the node
    # records and initiator name are the host's.
    assert spec.get("hostNetwork") is True, "iSCSI: iscsid's abstract socket is only reachable in the host's network"
    for path in ("/etc/iscsi", "/var/lib/iscsi"):
        _, host = host_mount(ds, c, path)
        assert host == path, f"iSCSI: {path} is not the host's"
    for path in ("/dev", "/sys"):
        _, host = host_mount(ds, c, path)
        assert host == path
    assert c["securityContext"].get("privileged") is True


def test_windows_logs_reach_kubectl_logs():
    args = parse_args(the_container(the_daemonset(WINDOWS)).get("args", []))
    if args.get("logtostderr", "true") == "false":
        assert args.get("alsologtostderr") == "true", (
            "-logtostderr=false without -alsologtostderr: `kubectl logs` would show nothing"
        )
        assert "log_file" in args or "log_dir" in args


def test_windows_daemonset_is_hostprocess_with_the_exe_at_the_image_root():
    ds = the_daemonset(WINDOWS)
    spec = ds["spec"]["template"]["spec"]
    assert spec["securityContext"]["windowsOptions"]["hostProcess"] is True
    assert spec["hostNetwork"] is True
    (command,) = the_container(ds)["command"]
    # scripts/images.sh puts csi-proxy.exe at the image's root.
    assert command == "$env:CONTAINER_SANDBOX_MOUNT_POINT/csi-proxy.exe"


def test_every_manifest_parses():
    assert MANIFESTS, "no manifests under deploy/"
    for path in MANIFESTS:
        assert documents(path), f"{path} holds no document"


def test_linux_audit_log_and_smb_dir_are_on_the_host(daemon_flags):
    """-audit-log must land on the node, not in the container's writable layer; -linux-smb-dir
    must be made by the daemon (owner-only), not by the kubelet as a 0755 hostPath."""
    ds = the_daemonset(LINUX)
    c = the_container(ds)
    args = parse_args(c.get("args", []))
    # The documented audit path (commented out in the manifest) and any given one.
    for path in {args.get("audit-log", ""), "/var/log/csi-proxy/audit.log"} - {""}:
        _, host = host_mount(ds, c, os.path.dirname(path))
        assert host == os.path.dirname(path), f"-audit-log={path} is not on the host's {os.path.dirname(path)}"
    smb = args.get("linux-smb-dir", daemon_flags["linux-smb-dir"])
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    for m in c.get("volumeMounts", []):
        assert m["mountPath"].rstrip("/") != smb.rstrip("/"), (
            f"-linux-smb-dir={smb} is a hostPath of its own ({volumes[m['name']]['hostPath']}): the kubelet creates it "
            "0755, open to every local user; mount its parent so the daemon creates it 0700"
        )


def test_images_are_marked_as_placeholders():
    """No image is published: each DaemonSet's image is the reserved example registry, marked as
    a placeholder right above it."""
    for path in (LINUX, WINDOWS):
        text = path.read_text()
        image = the_container(the_daemonset(path))["image"]
        assert image.startswith("registry.example.com/"), f"{path.name}: {image} is not the documented placeholder"
        lines = text.splitlines()
        (at,) = [i for i, line in enumerate(lines) if line.strip() == f"image: {image}"]
        assert "PLACEHOLDER" in lines[at - 1], f"{path.name}: the image line is not marked as a placeholder"


UNIT = ROOT / "deploy/linux/csi-proxy.service"
INSTALL_SERVICE = ROOT / "deploy/windows/install-service.ps1"


def unit_values(path, section, key):
    """Every value of `key` in `section` of a systemd unit, split on spaces (systemd's lists)."""
    values, current = [], None
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current == section and line.startswith(key + "="):
            values += line[len(key) + 1 :].split()
    return values


def test_the_unit_stops_after_the_kubelet():
    """systemd stops units in the reverse of their start order: Before=kubelet.service starts the
    daemon first and so stops it only once the kubelet has stopped (its unmounts at a node's
    shutdown still reach the daemon). After=kubelet.service would stop it first."""
    assert "kubelet.service" in unit_values(UNIT, "Unit", "Before")
    assert "kubelet.service" not in unit_values(UNIT, "Unit", "After")
    # The daemon's own stop deadline (transport drain 5 s + host calls 10 s + 5 s) fits in it.
    (timeout,) = unit_values(UNIT, "Service", "TimeoutStopSec")
    assert int(timeout) >= 20


def test_the_windows_service_waits_for_the_kubelet_at_shutdown(daemon_flags):
    """install-service.ps1 passes -preshutdown-wait, a flag the daemon has."""
    text = INSTALL_SERVICE.read_text()
    assert "-preshutdown-wait=" in text
    assert "preshutdown-wait" in daemon_flags
