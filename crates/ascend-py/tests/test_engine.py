"""The engine and the memory layer from Python: numpy views of host memory without a copy,
transfers in one process and between two, and the errors bad input raises."""

import os
import pickle
import subprocess
import sys
import zlib

import numpy as np
import pytest

import ascend_fabric as af
from conftest import POOL, listening_engine

MIB = 1 << 20
PARAM_INVALID = 103900


def test_a_host_buffer_is_a_numpy_view_without_a_copy(dev):
    eng = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    host = eng.alloc_host(MIB)
    view = np.asarray(host)
    assert view.dtype == np.uint8 and view.shape == (len(host),)
    assert view.__array_interface__["data"][0] == host.addr
    view[:5] = np.frombuffer(b"hello", dtype=np.uint8)
    assert host.read(0, 5) == b"hello"
    host.write(b"world", 5)
    assert bytes(view[5:10]) == b"world"
    # The view keeps the buffer alive after the last name for it goes.
    del host
    view[10] = 42
    assert view[10] == 42
    del view, eng


def test_device_memory_is_reached_by_copies(dev):
    eng = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    d = eng.alloc_device(MIB)
    assert not hasattr(d, "__array_interface__")
    d.write(b"\x01\x02\x03", 100)
    assert d.read(100, 3) == b"\x01\x02\x03"
    assert len(d.read()) == len(d)
    del d, eng


def test_write_then_read_back_in_one_process(dev):
    server, addr = listening_engine(dev)
    remote = server.alloc_device(4 * MIB)
    rreg = server.register(remote)
    client = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    src, dst = client.alloc_host(4 * MIB), client.alloc_device(4 * MIB)
    regs = [client.register(src), client.register(dst)]
    data = np.random.default_rng(7).integers(0, 256, 4 * MIB, dtype=np.uint8)
    np.asarray(src)[: 4 * MIB] = data
    client.connect(addr)
    assert client.peers() == [addr]
    blocks = [(src.addr + i * MIB, remote.addr + (3 - i) * MIB, MIB) for i in range(4)]
    client.transfer_sync(addr, "write", blocks)
    for i in range(4):
        assert remote.read((3 - i) * MIB, MIB) == data[i * MIB : (i + 1) * MIB].tobytes()
    client.transfer_sync(addr, "read", [(dst.addr, remote.addr, 4 * MIB)])
    assert zlib.crc32(dst.read(0, 4 * MIB)) == zlib.crc32(remote.read(0, 4 * MIB))
    stats = client.peer_stats(addr)
    assert (stats["writes"], stats["reads"], stats["descriptors"]) == (1, 1, 5)
    assert [r.kind for r in regs] == ["host", "device"] and rreg.kind == "device"
    client.disconnect(addr)
    for r in regs + [rreg]:
        r.deregister()
        assert not r.registered
    del src, dst, remote, client, server, regs, rreg


SERVER = r"""
import sys, zlib
import ascend_fabric as af
from conftest import listening_engine
dev = af.Runtime().device(0)
eng, addr = listening_engine(dev)
buf = eng.alloc_device(1 << 20)
reg = eng.register(buf)
print(addr, buf.addr, flush=True)
expected = int(sys.stdin.readline())
assert zlib.crc32(buf.read(0, 1 << 20)) == expected, "the bytes did not arrive"
print("VERIFIED", flush=True)
"""


def test_a_transfer_between_two_processes(dev):
    here = os.path.dirname(__file__)
    child = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        cwd=here,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        addr, remote = child.stdout.readline().split()
        eng = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
        src = eng.alloc_host(MIB)
        reg = eng.register(src)
        payload = bytes(range(256)) * (MIB // 256)
        src.write(payload)
        eng.connect(addr)
        eng.transfer_sync(addr, "write", [(src.addr, int(remote), MIB)])
        eng.disconnect(addr)
        child.stdin.write(f"{zlib.crc32(payload)}\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "VERIFIED"
        assert child.wait(timeout=30) == 0
        reg.deregister()
        del src, reg, eng
    finally:
        child.kill()
        child.wait()


def test_bad_input_raises_typed_errors(dev):
    server, addr = listening_engine(dev)
    remote = server.alloc_device(MIB)
    rreg = server.register(remote)
    eng = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    src = eng.alloc_host(MIB)
    reg = eng.register(src)
    eng.connect(addr)
    # A local range no registration covers: the engine's own check, before any copy.
    with pytest.raises(af.InvalidArgument) as e:
        eng.transfer_sync(addr, "write", [(src.addr + len(src), remote.addr, 4096)])
    assert e.value.status == PARAM_INVALID, e.value.kind
    assert hex(src.addr + len(src)) in str(e.value), str(e.value)
    # Each exception is also the built-in one a caller would catch.
    assert isinstance(e.value, ValueError) and isinstance(e.value, af.AscendError)
    with pytest.raises(af.InvalidArgument, match="Engine.transfer_sync: op"):
        eng.transfer_sync(addr, "copy", [(src.addr, remote.addr, 1)])
    with pytest.raises(af.InvalidArgument, match="timeout"):
        eng.transfer_sync(addr, "write", [(src.addr, remote.addr, 1)], timeout=-1)
    with pytest.raises(af.InvalidArgument, match="HostBuffer or DeviceBuffer"):
        eng.register(b"not memory")
    with pytest.raises(af.InvalidArgument) as e:
        src.read(len(src) - 1, 2)
    assert e.value.kind == "OutOfBounds", e.value.kind
    # Checked before anything is allocated for it.
    with pytest.raises(af.InvalidArgument):
        src.read(0, 1 << 62)
    with pytest.raises(af.InvalidArgument):
        eng.connect("not an address")
    with pytest.raises(af.InvalidArgument):
        eng.register_raw(0x10, 4096)
    with pytest.raises(af.AlreadyConnected):
        eng.connect(addr)
    with pytest.raises(af.NotConnected) as e:
        eng.transfer_sync("127.0.0.1:1", "write", [(src.addr, remote.addr, 1)])
    assert isinstance(e.value, ConnectionError) and e.value.kind == "NotConnected"
    # Exceptions cross processes (pickled) with their fields.
    back = pickle.loads(pickle.dumps(e.value))
    assert (type(back), back.status, back.kind, str(back)) == (
        af.NotConnected, e.value.status, "NotConnected", str(e.value))
    # A timeout too long for the clock is a long wait, never a crash.
    eng.send_notify(addr, "n", "m", timeout=1e19)
    eng.disconnect(addr)
    reg.deregister()
    rreg.deregister()
    del src, remote, reg, rreg, eng, server
