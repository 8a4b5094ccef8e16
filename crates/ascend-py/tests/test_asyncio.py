"""Awaitable connects and transfers: 1,000 concurrent transfers with 100 cancelled at points a
fixed seed picks, every completed one's bytes right, every cancelled one reported as cancelled
with its destination holding only its own old or new bytes, and nothing left behind."""

import asyncio
import random
import time
import zlib

import numpy as np

import ascend_fabric as af
from conftest import POOL, listening_engine

N = 1000
CANCELLED = 100
BLOCK = 4096


def test_a_thousand_transfers_with_a_hundred_cancelled(dev):
    server, addr = listening_engine(dev)
    dst = server.alloc_host(N * BLOCK)
    dreg = server.register(dst)
    old = np.full(N * BLOCK, 0xEE, dtype=np.uint8)
    np.asarray(dst)[: N * BLOCK] = old
    client = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    src = client.alloc_host(N * BLOCK)
    sreg = client.register(src)
    new = np.random.default_rng(3).integers(0, 256, N * BLOCK, dtype=np.uint8)
    np.asarray(src)[: N * BLOCK] = new
    rng = random.Random(11)
    cancel = dict(zip(rng.sample(range(N), CANCELLED), (rng.randrange(4) for _ in range(N))))

    async def one(i):
        desc = [(src.addr + i * BLOCK, dst.addr + i * BLOCK, BLOCK)]
        await client.transfer(addr, "write", desc)

    async def main():
        await client.connect_async(addr)
        tasks = [asyncio.ensure_future(one(i)) for i in range(N)]
        asked = {}
        for i, ticks in sorted(cancel.items(), key=lambda kv: kv[1]):
            for _ in range(ticks):
                await asyncio.sleep(0)
            asked[i] = tasks[i].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return asked, results

    asked, results = asyncio.run(main())
    got = np.asarray(dst)[: N * BLOCK]
    cancelled = 0
    for i, r in enumerate(results):
        block = slice(i * BLOCK, (i + 1) * BLOCK)
        if isinstance(r, asyncio.CancelledError):
            assert asked.get(i), f"transfer {i} cancelled without being asked"
            cancelled += 1
            # Any mix of its own old and new bytes, never bytes from elsewhere.
            ok = (got[block] == old[block]) | (got[block] == new[block])
            assert ok.all(), f"transfer {i}: bytes from elsewhere"
        else:
            assert r is None, f"transfer {i}: {r!r}"
            assert zlib.crc32(got[block].tobytes()) == zlib.crc32(new[block].tobytes()), i
    # A cancel asked of a task that had already finished is no cancel.
    assert cancelled == sum(1 for v in asked.values() if v)
    assert cancelled > 0
    # A cancelled transfer's drop may leave its abort to the engine's progress thread: it ends
    # soon after, not necessarily by now.
    end = time.monotonic() + 20
    while client.peer_stats(addr)["in_flight"]:
        assert time.monotonic() < end, "transfers still in flight 20 s after the cancels"
        time.sleep(0.001)
    client.disconnect(addr)
    sreg.deregister()
    dreg.deregister()
    del src, dst, sreg, dreg, client, server, got


def test_a_failed_transfer_raises_in_the_awaiting_task(dev):
    server, addr = listening_engine(dev)
    client = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    src = client.alloc_host(BLOCK)
    reg = client.register(src)

    async def main():
        await client.connect_async(addr)
        try:
            # The peer offers no memory: the remote range is in no segment.
            await client.transfer(addr, "write", [(src.addr, 0x1000, BLOCK)])
        except af.AscendError as e:
            return e
        return None

    e = asyncio.run(main())
    assert isinstance(e, af.AscendError) and e.status == 103900, e
    client.disconnect(addr)
    reg.deregister()
    del src, reg, client, server


def test_awaiting_needs_a_running_loop(dev):
    eng = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    try:
        eng.transfer("127.0.0.1:1", "write", [])
    except RuntimeError as e:
        assert "loop" in str(e)
    else:
        raise AssertionError("no error without a running loop")
    del eng
