"""The HIXL face: a program written against HIXL's Python names (``import hixl``) runs with
``import ascend_fabric.hixl as hixl``: statuses instead of exceptions, synchronous and polled
transfers, the completion query HIXL lacks in FabricMem mode, notifies, async connects."""

import json
import random
import time

import ascend_fabric.hixl as hixl

MIB = 1 << 20
OPTIONS = {
    hixl.OPTION_ENABLE_USE_FABRIC_MEM: "1",
    hixl.OPTION_GLOBAL_RESOURCE_CONFIG: json.dumps(
        {
            "fabric_memory.task_stream_num": 4,
            "fabric_memory.enable_aicpu_unfold": False,
            "fabric_memory.max_capacity": 1,
        }
    ),
}


def until(what, cond, within=20.0):
    """Polls ``cond`` (HIXL's way: its module has no waits) until it holds, or fails."""
    end = time.monotonic() + within
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.001)


def server_engine():
    """A HIXL engine listening on a free loopback port, and its address."""
    for _ in range(20):
        addr = f"127.0.0.1:{random.randrange(20000, 30000)}"
        h = hixl.Hixl()
        if h.initialize(addr, OPTIONS) == hixl.SUCCESS:
            return h, addr
    raise AssertionError("no free port")


def test_hixl_programs_run_unchanged(dev):
    server, addr = server_engine()
    remote = dev.alloc_device(MIB)
    st, rh = server.register_mem(hixl.MemDesc(remote.addr, len(remote)), hixl.MEM_DEVICE)
    assert st == hixl.SUCCESS and rh
    client = hixl.Hixl()
    assert client.initialize("127.0.0.1", OPTIONS) == hixl.SUCCESS
    local = dev.alloc_host(MIB)
    st, lh = client.register_mem(hixl.MemDesc(local.addr, len(local)), hixl.MEM_HOST)
    assert st == hixl.SUCCESS
    local.write(b"\x5a" * MIB)
    assert client.connect(addr, 5000) == hixl.SUCCESS
    assert client.connect(addr, 5000) == hixl.ALREADY_CONNECTED
    desc = [hixl.TransferOpDesc(local.addr, remote.addr, MIB)]
    assert client.transfer_sync(addr, hixl.WRITE, desc, 30000) == hixl.SUCCESS
    assert remote.read(0, MIB) == b"\x5a" * MIB
    # Asynchronous reads, polled one by one and through the completion query.
    remote.write(b"\x33" * 4096, 8192)
    reqs = []
    for i in range(4):
        args = hixl.TransferArgs()
        args.user_data = 100 + i
        back = [hixl.TransferOpDesc(local.addr + i * 4096, remote.addr + 8192, 4096)]
        st, req = client.transfer_async(addr, hixl.READ, back, args)
        assert st == hixl.SUCCESS
        reqs.append(req)
    first, ends = reqs[0], []

    def first_ended():
        st, state = client.get_transfer_status(first)
        assert st == hixl.SUCCESS
        if state != hixl.TransferStatus.WAITING:
            ends.append(state)
        return bool(ends)

    until("the first read", first_ended)
    assert ends == [hixl.TransferStatus.COMPLETED]
    # Reported once, then forgotten, as HIXL.
    assert client.get_transfer_status(first) == (hixl.PARAM_INVALID, hixl.TransferStatus.FAILED)
    seen = {}

    def drained():
        st, results = client.get_all_transfer_status(hixl.GetTransferStatusArgs(skip_waiting=True))
        assert st == hixl.SUCCESS
        for r in results:
            assert r.req not in seen, "a request reported twice"
            seen[r.req] = (r.user_data, r.status)
        return len(seen) == 3

    until("the other reads", drained)
    assert seen == {reqs[i]: (100 + i, hixl.TransferStatus.COMPLETED) for i in (1, 2, 3)}
    assert local.read(0, 4 * 4096) == b"\x33" * (4 * 4096)
    # Notifies.
    note = hixl.NotifyDesc("kv", "ready")
    assert client.send_notify(addr, note, 2000) == hixl.SUCCESS
    got = []
    until("the notify", lambda: got.extend(server.get_notifies()[1]) or got)
    assert [(n.name, n.notify_msg) for n in got] == [("kv", "ready")]
    assert client.disconnect(addr, 2000) == hixl.SUCCESS
    assert client.get_async_connect_status(addr) == (hixl.SUCCESS, hixl.NOT_CONNECT)
    # An asynchronous connect, polled.
    assert client.connect_async(addr, 5000) == hixl.SUCCESS
    until("the async connect", lambda: client.get_async_connect_status(addr)[1] == hixl.CONNECTED)
    assert client.get_all_async_connect_status() == (hixl.SUCCESS, {addr: hixl.CONNECTED})
    assert client.disconnect(addr, 2000) == hixl.SUCCESS
    assert client.deregister_mem(lh) == hixl.SUCCESS
    assert server.deregister_mem(rh) == hixl.SUCCESS
    client.finalize()
    server.finalize()
    del local, remote, client, server


def test_bad_input_is_a_status(dev):
    h = hixl.Hixl()
    # Not the Fabric Mem engine: HIXL would pick another one.
    assert h.initialize("127.0.0.1", {}) == hixl.UNSUPPORTED
    assert h.initialize("127.0.0.1", OPTIONS) == hixl.SUCCESS
    buf = dev.alloc_host(MIB)
    # A type that is not what the memory is, or no type HIXL has.
    assert h.register_mem(hixl.MemDesc(buf.addr, len(buf)), hixl.MEM_DEVICE) == (hixl.PARAM_INVALID, 0)
    assert h.register_mem(hixl.MemDesc(buf.addr, len(buf)), 7) == (hixl.PARAM_INVALID, 0)
    st, handle = h.register_mem(hixl.MemDesc(buf.addr, len(buf)), hixl.MEM_HOST)
    assert st == hixl.SUCCESS
    assert h.register_mem(hixl.MemDesc(0x10, 4096), hixl.MEM_HOST)[0] == hixl.PARAM_INVALID
    assert h.deregister_mem(424242) == hixl.PARAM_INVALID
    assert h.get_transfer_status(424242) == (hixl.PARAM_INVALID, hixl.TransferStatus.FAILED)
    desc = [hixl.TransferOpDesc(buf.addr, 0x1000, 4096)]
    assert h.transfer_sync("127.0.0.1:1", 7, desc) == hixl.PARAM_INVALID
    assert h.transfer_sync("127.0.0.1:1", hixl.WRITE, desc) == hixl.NOT_CONNECTED
    assert h.connect("not an address") == hixl.PARAM_INVALID
    assert hixl.get_capability(hixl.AUTO_CONNECT) == (hixl.SUCCESS, hixl.FEATURE_SUPPORTED)
    assert h.deregister_mem(handle) == hixl.SUCCESS
    h.finalize()
    # Before initialize (here: after finalize) every call is FAILED, as HIXL's.
    assert h.transfer_sync("127.0.0.1:1", hixl.WRITE, desc) == hixl.FAILED
    assert h.get_transfer_status(1) == (hixl.FAILED, hixl.TransferStatus.FAILED)
    assert h.get_all_transfer_status() == (hixl.FAILED, [])
    assert h.get_async_connect_status("127.0.0.1:1") == (hixl.FAILED, hixl.NOT_CONNECT)
    assert h.deregister_mem(handle) == hixl.FAILED
    assert hixl.get_capability(99) == (hixl.SUCCESS, hixl.FEATURE_NOT_SUPPORTED)
    del buf, h
