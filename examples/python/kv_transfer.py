"""KV-cache blocks from a prefill process to a decode process, by prepared block index, on
asyncio, with checksums on both sides.

The decode process allocates a device KV cache of 64 blocks of 256 KiB, registers it under
the name ``kv`` and waits. The prefill process fills a host cache of 64 blocks (a pattern of
its own in each), connects (awaited), prepares both caches as block lists once
(``prepare_local``, ``prepare_remote`` by the name ``kv``), and WRITEs 16 batches of 4 (local
block, decode block) pairs, at most 4 batches in flight (awaited ``transfer_prepared``; no two
batches write the same decode block). One more batch is cancelled while its copies are queued
(``task.cancel()``: its decode blocks may hold anything of its own bytes), and is written again.
Then the prefill READs every decode block back into a second host cache and compares
checksums, and tells the decode process, by a notify, the checksum its whole cache must have;
the decode process compares it with its own memory. Both exit 0 only when everything matches.

    ASCEND_MEM_BACKEND=sim python examples/python/kv_transfer.py            # both processes
    ASCEND_MEM_BACKEND=sim python examples/python/kv_transfer.py --decode [ADDR]  # one side
    ASCEND_MEM_BACKEND=sim python examples/python/kv_transfer.py --prefill ADDR   # the other
"""

import asyncio
import random
import subprocess
import sys
import time
import zlib

import numpy as np

import ascend_fabric as af

BLOCK = 256 << 10
BLOCKS = 64
PER_BATCH = 4
IN_FLIGHT = 4


def crc(data) -> int:
    return zlib.crc32(bytes(data))


def listen(dev, addr):
    """An engine at ``addr``, or with ``addr`` None, at a free loopback port below the
    ephemeral range (a port taken meanwhile is replaced by another)."""
    if addr is not None:
        return af.Engine(dev, addr), addr
    for _ in range(20):
        addr = f"127.0.0.1:{random.randrange(20000, 30000)}"
        try:
            return af.Engine(dev, addr), addr
        except af.AscendError as e:
            if "in use" not in str(e):
                raise
    sys.exit("[decode] no free port")


def decode(addr):
    dev = af.Runtime().device(0)
    engine, addr = listen(dev, addr)
    cache = engine.alloc_device(BLOCKS * BLOCK)
    reg = engine.register_named(cache, "kv")
    print(f"READY {addr}", flush=True)
    deadline = time.monotonic() + 120
    expected = None
    while expected is None:
        for name, msg in engine.take_notifies():
            if name == "kv-digest":
                expected = int(msg)
        if time.monotonic() > deadline:
            sys.exit("[decode] no digest from the prefill within 120 s")
        time.sleep(0.01)
    got = crc(cache.read(0, BLOCKS * BLOCK))
    if got != expected:
        sys.exit(f"[decode] cache checksum {got:#x}, the prefill expects {expected:#x}")
    reg.deregister()
    print(f"[decode] {BLOCKS} blocks, checksum {got:#x}: verified", flush=True)


async def write_batches(engine, local, remote, batches):
    room = asyncio.Semaphore(IN_FLIGHT)

    async def one(pairs):
        async with room:
            await engine.transfer_prepared("write", local, remote, pairs)

    await asyncio.gather(*(one(p) for p in batches))


async def cancel_one(engine, local, remote, pairs):
    """Starts a batch, cancels it while its copies are queued; True when it was cancelled."""
    task = asyncio.ensure_future(engine.transfer_prepared("write", local, remote, pairs))
    await asyncio.sleep(0)  # submitted: its copies are queued on the streams
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False  # it had ended already


async def prefill_async(engine, decode_addr, sreg, breg):
    await engine.connect_async(decode_addr)
    local = engine.prepare_local(sreg, BLOCK)
    readback = engine.prepare_local(breg, BLOCK)
    remote = engine.prepare_remote(decode_addr, ["kv"], BLOCK)
    rng = random.Random(7)
    # Decode block d gets local block plan[d]; the decode blocks are dealt to the batches.
    plan = [rng.randrange(BLOCKS) for _ in range(BLOCKS)]
    order = rng.sample(range(BLOCKS), BLOCKS)
    batches = [[(plan[d], d) for d in order[i : i + PER_BATCH]] for i in range(0, BLOCKS, PER_BATCH)]
    await write_batches(engine, local, remote, batches)
    # One batch cancelled mid-flight, then written again.
    again = batches[0]
    cancelled = await cancel_one(engine, local, remote, again)
    await engine.transfer_prepared("write", local, remote, again)
    # Every decode block read back into block d of the second cache.
    await engine.transfer_prepared("read", readback, remote, [(d, d) for d in range(BLOCKS)])
    return plan, cancelled


def prefill(decode_addr):
    dev = af.Runtime().device(0)
    engine = af.Engine(dev, "127.0.0.1")
    cache, readback = engine.alloc_host(BLOCKS * BLOCK), engine.alloc_host(BLOCKS * BLOCK)
    sreg, breg = engine.register(cache), engine.register(readback)
    patterns = np.random.default_rng(1).integers(0, 256, BLOCKS * BLOCK, dtype=np.uint8)
    cache.write(patterns.tobytes())
    plan, cancelled = asyncio.run(prefill_async(engine, decode_addr, sreg, breg))
    # (read() copies: it works where host memory is not readable in place, too)
    src, back = cache.read(), readback.read()
    for d in range(BLOCKS):
        want = crc(src[plan[d] * BLOCK : (plan[d] + 1) * BLOCK])
        if crc(back[d * BLOCK : (d + 1) * BLOCK]) != want:
            sys.exit(f"[prefill] decode block {d} does not hold local block {plan[d]}")
    digest = crc(b"".join(src[p * BLOCK : (p + 1) * BLOCK] for p in plan))
    engine.send_notify(decode_addr, "kv-digest", str(digest), 5.0)
    engine.disconnect(decode_addr)
    sreg.deregister()
    breg.deregister()
    what = "cancelled mid-flight and written again" if cancelled else "ended before its cancel"
    print(f"[prefill] {BLOCKS} blocks in {BLOCKS // PER_BATCH} batches, one batch {what}; "
          f"read back: verified", flush=True)


def main():
    if len(sys.argv) in (2, 3) and sys.argv[1] == "--decode":
        return decode(sys.argv[2] if len(sys.argv) == 3 else None)
    if len(sys.argv) == 3 and sys.argv[1] == "--prefill":
        return prefill(sys.argv[2])
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    side = subprocess.Popen([sys.executable, __file__, "--decode"], stdout=subprocess.PIPE, text=True)
    try:
        ready = side.stdout.readline().split()
        if len(ready) != 2 or ready[0] != "READY":
            sys.exit("the decode process did not start")
        addr = ready[1]
        rc = subprocess.run([sys.executable, __file__, "--prefill", addr], timeout=120).returncode
        print(side.stdout.read(), end="")
        if rc != 0 or side.wait(timeout=60) != 0:
            sys.exit("a side failed")
    finally:
        side.kill()
        side.wait()
    print("[both] verified on both sides")


if __name__ == "__main__":
    main()
