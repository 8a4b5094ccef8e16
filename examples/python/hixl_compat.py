"""A program written against HIXL's Python names only (``import hixl``), run on this package's
engine by importing ``ascend_fabric.hixl as hixl``: a server process registers device memory
and waits; a client process connects, WRITEs a pattern with transfer_sync, READs it back with
transfer_async polled through get_transfer_status, and tells the server by a notify; the server
checks its memory holds the pattern. Exits 0 when both sides verified.

    ASCEND_MEM_BACKEND=sim python examples/python/hixl_compat.py [ADDR]   # both roles, two processes

HIXL programs take their memory from torch_npu; here the package's own allocation stands in
(the only line that is not HIXL's).
"""

import json
import socket
import subprocess
import sys
import time

import ascend_fabric
import ascend_fabric.hixl as hixl

SIZE = 8 << 20
OPTIONS = {
    hixl.OPTION_ENABLE_USE_FABRIC_MEM: "1",
    hixl.OPTION_GLOBAL_RESOURCE_CONFIG: json.dumps(
        {"fabric_memory.task_stream_num": 4, "fabric_memory.enable_aicpu_unfold": False}
    ),
}


def check(status, what):
    if status != hixl.SUCCESS:
        sys.exit(f"{what} failed with status {status}")


def device_memory(size):
    return ascend_fabric.Runtime().device(0).alloc_device(size)


def server(addr):
    engine = hixl.Hixl()
    check(engine.initialize(addr, OPTIONS), "initialize")
    mem = device_memory(SIZE)
    st, handle = engine.register_mem(hixl.MemDesc(mem.addr, SIZE), hixl.MEM_DEVICE)
    check(st, "register_mem")
    print(f"READY {mem.addr}", flush=True)
    deadline = time.monotonic() + 60
    while True:
        st, notes = engine.get_notifies()
        check(st, "get_notifies")
        if any(n.name == "done" for n in notes):
            break
        if time.monotonic() > deadline:
            sys.exit("no notify from the client within 60 s")
        time.sleep(0.01)
    if mem.read(0, SIZE) != bytes([0xA5]) * SIZE:
        sys.exit("the server's memory does not hold the pattern")
    check(engine.deregister_mem(handle), "deregister_mem")
    engine.finalize()
    print("[server] its memory holds the client's pattern: verified")


def client(server_addr, remote_addr):
    engine = hixl.Hixl()
    check(engine.initialize("127.0.0.1", OPTIONS), "initialize")
    mem = device_memory(2 * SIZE)
    st, handle = engine.register_mem(hixl.MemDesc(mem.addr, 2 * SIZE), hixl.MEM_DEVICE)
    check(st, "register_mem")
    mem.write(bytes([0xA5]) * SIZE)
    check(engine.connect(server_addr, 5000), "connect")
    out = [hixl.TransferOpDesc(mem.addr, remote_addr, SIZE)]
    check(engine.transfer_sync(server_addr, hixl.WRITE, out, 30000), "transfer_sync")
    back = [hixl.TransferOpDesc(mem.addr + SIZE, remote_addr, SIZE)]
    st, req = engine.transfer_async(server_addr, hixl.READ, back, hixl.TransferArgs())
    check(st, "transfer_async")
    while True:
        st, state = engine.get_transfer_status(req)
        check(st, "get_transfer_status")
        if state != hixl.TransferStatus.WAITING:
            break
        time.sleep(0.001)
    if state != hixl.TransferStatus.COMPLETED or mem.read(SIZE, SIZE) != bytes([0xA5]) * SIZE:
        sys.exit(f"the read back ended {state!r} or did not hold the pattern")
    check(engine.send_notify(server_addr, hixl.NotifyDesc("done", "verified"), 5000), "send_notify")
    check(engine.disconnect(server_addr, 5000), "disconnect")
    check(engine.deregister_mem(handle), "deregister_mem")
    engine.finalize()
    print("[client] wrote 8 MiB, read it back: verified")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--server":
        return server(sys.argv[2])
    if len(sys.argv) >= 2 and sys.argv[1] == "--client":
        return client(sys.argv[2], int(sys.argv[3]))
    if len(sys.argv) > 1:
        addr = sys.argv[1]
    else:
        with socket.socket() as s:  # a free port, for the server to take at once
            s.bind(("127.0.0.1", 0))
            addr = f"127.0.0.1:{s.getsockname()[1]}"
    srv = subprocess.Popen([sys.executable, __file__, "--server", addr], stdout=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline().split()
        if not line or line[0] != "READY":
            sys.exit("the server did not start")
        cli = subprocess.run([sys.executable, __file__, "--client", addr, line[1]])
        print(srv.stdout.read(), end="")
        if cli.returncode != 0 or srv.wait(timeout=60) != 0:
            sys.exit("a side failed")
    finally:
        srv.kill()
        srv.wait()
    print("[both] verified on both sides")


if __name__ == "__main__":
    main()
