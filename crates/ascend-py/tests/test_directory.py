"""The engine directory on a real etcd (the package built with feature ``etcd``): engines
published by name, found and connected to by name, a departure ending the channel, and the
store's errors as typed exceptions. Skipped when the package has no directory, unless
ASCEND_FABRIC_TEST_DIRECTORY=1 says it must have one."""

import os
import shutil
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import ascend_fabric as af
from conftest import listening_engine

MUST = os.environ.get("ASCEND_FABRIC_TEST_DIRECTORY") == "1"
if not af.HAS_DIRECTORY and not MUST:
    pytest.skip("the package was built without the directory (feature etcd)", allow_module_level=True)

BLOCK = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd():
    """An etcd of its own on free loopback ports, stopped afterwards."""
    assert af.HAS_DIRECTORY, "the package was built without the directory (feature etcd)"
    binary = os.environ.get("ETCD_BIN") or shutil.which("etcd")
    assert binary, "etcd is not installed (Debian: apt-get install etcd-server)"
    data = tempfile.mkdtemp(prefix="etcd-")
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = subprocess.Popen(
        [binary, "--data-dir", data, "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
         f"http://127.0.0.1:{peer}", "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 30
        while True:
            try:
                af.EtcdDirectory([url], request_timeout=1.0)
                break
            except af.AscendError:
                assert proc.poll() is None, "etcd exited"
                assert time.monotonic() < end, "etcd did not answer within 30 s"
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def test_engines_find_each_other_by_name(dev, etcd):
    prefix = f"/test-{os.getpid()}"
    d = af.EtcdDirectory([etcd], prefix=prefix, ttl=5.0)
    server, addr = listening_engine(dev)
    kv = server.alloc_device(BLOCK)
    kreg = server.register(kv)
    decode = af.Member(server, d, "decode-0", "emulator", [("kv", kv.addr, BLOCK)])
    client_engine, client_addr = listening_engine(dev)
    prefill = af.Member(client_engine, d, "prefill-0", "emulator")
    entry = d.lookup("decode-0")
    assert entry["addr"] == addr and entry["segments"] == {"kv": (kv.addr, BLOCK)}, entry
    assert [n for n, _ in d.list("")] == ["decode-0", "prefill-0"]
    assert d.lookup("nobody") is None
    got = prefill.connect_by_name("decode-0", 10.0)
    assert got["addr"] == addr and prefill.connected() == [("decode-0", addr)]
    src = client_engine.alloc_host(BLOCK)
    sreg = client_engine.register(src)
    np.asarray(src)[:BLOCK] = 0x3C
    seg_addr, _ = got["segments"]["kv"]
    client_engine.transfer_sync(addr, "write", [(src.addr, seg_addr, BLOCK)])
    assert kv.read(0, BLOCK) == b"\x3c" * BLOCK
    # The decode engine leaves: the prefill member is told after it ended the channel.
    decode.leave()
    end = time.monotonic() + 30
    while True:
        ev = prefill.next_event(1.0)
        if ev == ("left", "decode-0"):
            break
        assert time.monotonic() < end, "no departure seen within 30 s"
    assert addr not in client_engine.peers() and prefill.connected() == []
    with pytest.raises(af.InvalidArgument) as e:
        prefill.connect_by_name("decode-0", 1.0)
    assert e.value.kind == "NotFound" and "decode-0" in str(e.value)
    with pytest.raises(af.InvalidArgument):
        decode.connect_by_name("prefill-0")
    with pytest.raises(af.InvalidArgument) as e:
        af.Member(client_engine, d, "prefill-0")
    assert e.value.kind == "NameTaken", e.value.kind
    prefill.leave()
    sreg.deregister()
    kreg.deregister()


def test_directory_errors_are_typed(dev, etcd):
    with pytest.raises(af.Failed) as e:
        af.EtcdDirectory([f"127.0.0.1:{free_port()}"], request_timeout=0.5)
    assert e.value.kind == "Unreachable", e.value.kind
    d = af.EtcdDirectory([etcd], prefix=f"/bad-{os.getpid()}")
    not_listening = af.Engine(dev, "127.0.0.1")
    with pytest.raises(af.InvalidArgument) as e:
        af.Member(not_listening, d, "x")
    assert e.value.kind == "BadOption", e.value.kind
    listening, _ = listening_engine(dev)
    with pytest.raises(af.InvalidArgument):
        af.Member(listening, d, "")
    with pytest.raises(af.InvalidArgument):
        d.lookup("bad/name")
