"""The Python half of `ascend-bench python`, run by the bench as a child process.

Arguments: PORT DEVICE STREAMS POOL SIZE. It builds the same pair the bench builds in Rust: a
listening engine on 127.0.0.1:PORT and a client engine, both on device DEVICE with STREAMS copy
streams and a VA pool of POOL bytes, a registered host buffer of SIZE bytes on the client and a
registered device buffer of SIZE bytes on the server, the client connected.

It speaks one JSON object per line on stdout. First `{"ready": 1, ...}` (its versions and
whether the backend is the emulator), or `{"import_error": 1}` with the reason on stderr when
`ascend_fabric` cannot be imported. Then, for each line `MODE LEN N` read from stdin (MODE
`sync` or `async`), it makes N WRITEs of one descriptor of LEN bytes one after the other
(`transfer_sync`, or `await transfer(...)` inside `asyncio.run`) and answers
`{"mode": ..., "len": ..., "n": ..., "per_transfer_s": ...}`. At the end of stdin it lets
everything go, the engines last, and exits.
"""

import asyncio
import json
import sys
import time


def say(obj):
    """One JSON line on stdout, flushed (the bench waits for it)."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def sync_pass(client, remote, desc, n):
    """Seconds per transfer of `n` synchronous WRITEs of `desc`."""
    t0 = time.perf_counter()
    for _ in range(n):
        client.transfer_sync(remote, "write", desc, timeout=30.0)
    return (time.perf_counter() - t0) / n


async def async_pass(client, remote, desc, n):
    """Seconds per transfer of `n` awaited WRITEs of `desc`, one at a time."""
    t0 = time.perf_counter()
    for _ in range(n):
        await client.transfer(remote, "write", desc)
    return (time.perf_counter() - t0) / n


def serve(af, port, device, streams, pool, size):
    """Sets up the pair, answers the bench's passes until stdin ends, then tears down."""
    rt = af.Runtime()
    dev = rt.device(device)
    remote = f"127.0.0.1:{port}"
    server = af.Engine(dev, remote, task_stream_num=streams, pool_capacity=pool)
    client = af.Engine(dev, "127.0.0.1", task_stream_num=streams, pool_capacity=pool)
    src = client.alloc_host(size)
    src_reg = client.register(src)
    dst = server.alloc_device(size)
    dst_reg = server.register(dst)
    client.connect(remote, timeout=30.0)
    say(
        {
            "ready": 1,
            "emulator": int(rt.is_emulator),
            "python": sys.version.split()[0],
            "ascend_fabric": af.__version__,
        }
    )
    for line in sys.stdin:
        mode, length, n = line.split()
        length, n = int(length), int(n)
        if not 0 < length <= size or n <= 0:
            raise ValueError(f"pass {line.strip()!r}: length or count out of range")
        desc = [(src.addr, dst.addr, length)]
        if mode == "sync":
            per = sync_pass(client, remote, desc, n)
        elif mode == "async":
            per = asyncio.run(async_pass(client, remote, desc, n))
        else:
            raise ValueError(f"pass {line.strip()!r}: mode is neither sync nor async")
        say({"mode": mode, "len": length, "n": n, "per_transfer_s": per})
    # Everything goes before the interpreter shuts down: an engine left to the interpreter's
    # teardown may still be waking an event loop from its own threads.
    client.disconnect(remote)
    src_reg.deregister()
    dst_reg.deregister()
    del src_reg, dst_reg, src, dst, client, server


def main():
    """Imports the package (or says it cannot), then serves the passes."""
    try:
        import ascend_fabric as af
    except ImportError as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        say({"import_error": 1})
        return 0
    if len(sys.argv) != 6:
        print("usage: transfer_bench.py PORT DEVICE STREAMS POOL SIZE", file=sys.stderr)
        return 2
    port, device, streams, pool, size = (int(a) for a in sys.argv[1:])
    serve(af, port, device, streams, pool, size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
