"""A program written against HIXL's Python names only (``import hixl``), run on this package's
engine by importing ``ascend_fabric.hixl as hixl``: a server process registers zeroed device
memory and waits; a client process connects, WRITEs the pattern 0xAA over the server's memory
with transfer_sync, READs it back with transfer_async polled through get_transfer_status, and
tells the server by a notify named "done"; the server finishes once its memory holds the pattern
and either that notify came or the pattern held for ``--linger`` seconds (a notify of another
name is printed; a client that sends none is tolerated). Exits 0 when both sides verified.

    ASCEND_MEM_BACKEND=sim python examples/python/hixl_compat.py [ADDR]   # both roles, two processes
    python examples/python/hixl_compat.py --server ADDR [--size N] [--linger S] [--timeout S]
    python examples/python/hixl_compat.py --client SERVER_ADDR REMOTE_ADDR [--size N]

``--server`` prints ``READY <address of its memory>``; ``--client`` takes that address
(decimal or 0x-hex) as REMOTE_ADDR. Each role speaks HIXL's FabricMem protocol, so either
interoperates with HIXL's own C++ engine in the other role: the sizes (``--size``, default
8 MiB) must match, and a client is given the address the server registered.

HIXL programs take their memory from torch_npu; here the package's own allocation stands in
(``device_memory``, whose buffers' ``read`` and ``write`` stand in for the tensors' copies: the
only code that is not HIXL's).
"""

import argparse
import json
import socket
import subprocess
import sys
import time

import ascend_fabric
import ascend_fabric.hixl as hixl

SIZE = 8 << 20
PATTERN = 0xAA
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


def server(addr, size, linger, timeout):
    engine = hixl.Hixl()
    check(engine.initialize(addr, OPTIONS), "initialize")
    mem = device_memory(size)
    mem.write(bytes(size))
    st, handle = engine.register_mem(hixl.MemDesc(mem.addr, size), hixl.MEM_DEVICE)
    check(st, "register_mem")
    print(f"READY {mem.addr:#x}", flush=True)
    want = bytes([PATTERN]) * size
    deadline = time.monotonic() + timeout
    done = False  # the client's "done" notify came
    held_since = None  # since when the memory holds the pattern without a break
    while True:
        st, notes = engine.get_notifies()
        check(st, "get_notifies")
        for n in notes:
            print(f"[server] notify {n.name!r}: {n.notify_msg!r}", flush=True)
            done = done or n.name == "done"
        now = time.monotonic()
        if mem.read(0, size) == want:
            held_since = now if held_since is None else held_since
            if done or now - held_since >= linger:
                break
        else:
            held_since = None  # the client may still be writing, or writing something else
        if now > deadline:
            sys.exit(f"the server's memory did not hold the pattern within {timeout:g} s")
        time.sleep(0.02)
    check(engine.deregister_mem(handle), "deregister_mem")
    engine.finalize()
    how = "after the client's notify" if done else f"for {linger:g} s"
    what = f"{size} bytes of {PATTERN:#x}, {how}"
    print(f"[server] its memory holds the client's pattern ({what}): verified")


def client(server_addr, remote_addr, size):
    engine = hixl.Hixl()
    check(engine.initialize("127.0.0.1", OPTIONS), "initialize")
    mem = device_memory(2 * size)
    st, handle = engine.register_mem(hixl.MemDesc(mem.addr, 2 * size), hixl.MEM_DEVICE)
    check(st, "register_mem")
    mem.write(bytes([PATTERN]) * size + bytes(size))
    check(engine.connect(server_addr, 5000), "connect")
    out = [hixl.TransferOpDesc(mem.addr, remote_addr, size)]
    check(engine.transfer_sync(server_addr, hixl.WRITE, out, 30000), "transfer_sync")
    back = [hixl.TransferOpDesc(mem.addr + size, remote_addr, size)]
    st, req = engine.transfer_async(server_addr, hixl.READ, back, hixl.TransferArgs())
    check(st, "transfer_async")
    deadline = time.monotonic() + 30
    while True:
        st, state = engine.get_transfer_status(req)
        check(st, "get_transfer_status")
        if state != hixl.TransferStatus.WAITING or time.monotonic() > deadline:
            break
        time.sleep(0.001)
    if state != hixl.TransferStatus.COMPLETED or mem.read(size, size) != bytes([PATTERN]) * size:
        sys.exit(f"the read back ended {state!r} or did not hold the pattern")
    check(engine.send_notify(server_addr, hixl.NotifyDesc("done", "verified"), 5000), "send_notify")
    check(engine.disconnect(server_addr, 5000), "disconnect")
    check(engine.deregister_mem(handle), "deregister_mem")
    engine.finalize()
    what = f"{size} bytes of {PATTERN:#x} to {remote_addr:#x}"
    print(f"[client] wrote {what}, read them back: verified")


def both(addr, size):
    if addr is None:
        with socket.socket() as s:  # a free port, for the server to take at once
            s.bind(("127.0.0.1", 0))
            addr = f"127.0.0.1:{s.getsockname()[1]}"
    sizes = ["--size", str(size)]
    srv = subprocess.Popen(
        [sys.executable, __file__, "--server", addr, *sizes], stdout=subprocess.PIPE, text=True
    )
    try:
        line = srv.stdout.readline().split()
        if not line or line[0] != "READY":
            sys.exit("the server did not start")
        cli = subprocess.run([sys.executable, __file__, "--client", addr, line[1], *sizes])
        print(srv.stdout.read(), end="")
        if cli.returncode != 0 or srv.wait(timeout=60) != 0:
            sys.exit("a side failed")
    finally:
        srv.kill()
        srv.wait()
    print("[both] verified on both sides")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    role = p.add_mutually_exclusive_group()
    role.add_argument("--server", metavar="ADDR", help="serve on ADDR (ip:port)")
    role.add_argument("--client", nargs=2, metavar=("SERVER_ADDR", "REMOTE_ADDR"))
    p.add_argument("addr", nargs="?", metavar="ADDR", help="both roles: the server's ip:port")
    p.add_argument("--size", type=lambda s: int(s, 0), default=SIZE, help="bytes (8 MiB)")
    p.add_argument(
        "--linger",
        type=float,
        default=2.0,
        help="server: seconds the pattern must hold when no 'done' notify comes (2)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="server: seconds to wait (60)")
    a = p.parse_args()
    if a.size <= 0:
        p.error("--size must be positive")
    if a.server is not None:
        return server(a.server, a.size, a.linger, a.timeout)
    if a.client is not None:
        return client(a.client[0], int(a.client[1], 0), a.size)
    return both(a.addr, a.size)


if __name__ == "__main__":
    main()
