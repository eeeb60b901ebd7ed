"""Real grpcio clients against the real daemon binary over its unix sockets.

Python's grpcio sends the percent-encoded socket path as :authority on a `unix:` target, and
with `grpc.default_authority` we make it send the raw Windows pipe path that older grpc-go
sends. Stock h2 rejects both; these tests prove every one of the 23 sockets answers them.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import grpc
import pytest
from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = ROOT / "crates" / "wire" / "proto"
WIRE = ROOT.parent / "shared" / "wire" / "upstream-wire.json"
BIN = pathlib.Path(os.environ.get("CSI_PROXY_BIN", ROOT / "target" / "debug" / "csi-proxy"))


@pytest.fixture(scope="session")
def stubs(tmp_path_factory):
    """Python modules generated from our own .proto files."""
    out = tmp_path_factory.mktemp("stubs")
    files = sorted(str(p.relative_to(PROTO)) for p in PROTO.glob("*/*/api.proto"))
    assert len(files) == 23
    include = str(pathlib.Path(protoc.__file__).parent / "_proto")
    rc = protoc.main(["protoc", f"-I{PROTO}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}", *files])
    assert rc == 0, "protoc failed"
    for d in out.rglob("*"):
        if d.is_dir():
            (d / "__init__.py").touch()
    sys.path.insert(0, str(out))
    return out


@pytest.fixture(scope="session")
def daemon():
    assert BIN.exists(), f"build the daemon first: {BIN}"
    sock_dir = pathlib.Path(tempfile.mkdtemp(prefix="csi-proxy-grpcio-"))
    proc = subprocess.Popen([str(BIN), "-socket-dir", str(sock_dir), "-v=2"], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while len(list(sock_dir.glob("*.sock"))) < 23:
        assert proc.poll() is None, f"daemon exited: {proc.stderr.read()}"
        assert time.time() < deadline, "daemon did not create its 23 sockets"
        time.sleep(0.05)
    yield sock_dir
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(sock_dir, ignore_errors=True)


def apis():
    return json.loads(WIRE.read_text())["apis"]


def call_first_method(stubs, api, channel):
    import importlib

    mod = importlib.import_module(f"{api['group']}.{api['version']}.api_pb2")
    grpc_mod = importlib.import_module(f"{api['group']}.{api['version']}.api_pb2_grpc")
    service = api["service"].split(".", 1)[1]
    stub = getattr(grpc_mod, f"{service}Stub")(channel)
    method = api["methods"][0]
    request = getattr(mod, method["input"].split(".", 1)[1])()
    try:
        getattr(stub, method["name"])(request, timeout=10)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def assert_answered_by_handler(api, code, details):
    # UNAVAILABLE or INTERNAL "stream reset"/"protocol error" would mean the transport refused
    # the call; anything our handlers produce has a message from them.
    assert code in (
        grpc.StatusCode.OK,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
    ), f"{api['service']}: {code} {details}"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        # The handler's message, not the framework's "method not found".
        assert "is not implemented on" in details, details
    if code != grpc.StatusCode.OK:
        assert details, f"{api['service']}: {code} without a message"


@pytest.mark.parametrize("authority", ["default", "raw-pipe"])
def test_every_socket_answers(stubs, daemon, authority):
    all_apis = apis()
    assert len(all_apis) == 23
    for api in all_apis:
        path = daemon / f"csi-proxy-{api['group']}-{api['version']}.sock"
        options = []
        if authority == "raw-pipe":
            # What older grpc-go sends: the pipe path as written in Go source.
            options.append(("grpc.default_authority", "\\\\.\\\\pipe\\\\" + f"csi-proxy-{api['group']}-{api['version']}"))
        with grpc.insecure_channel(f"unix:{path}", options=options) as ch:
            code, details = call_first_method(stubs, api, ch)
            assert_answered_by_handler(api, code, details)


def test_second_call_on_one_channel_reuses_the_rewritten_authority(stubs, daemon):
    # grpcio indexes :authority in the HPACK dynamic table after the first call, so later calls
    # reference it; they must keep working.
    api = next(a for a in apis() if a["group"] == "system")
    path = daemon / "csi-proxy-system-v1alpha1.sock"
    with grpc.insecure_channel(f"unix:{path}") as ch:
        for _ in range(5):
            code, details = call_first_method(stubs, api, ch)
            assert_answered_by_handler(api, code, details)


def test_unknown_method_is_unimplemented_by_the_framework(daemon):
    path = daemon / "csi-proxy-disk-v1.sock"
    with grpc.insecure_channel(f"unix:{path}") as ch:
        # A Volume method on the disk pipe: a pipe knows only its own service.
        fn = ch.unary_unary("/v1.Volume/FormatVolume", request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as err:
            fn(b"", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "is not implemented on" not in (err.value.details() or "")
