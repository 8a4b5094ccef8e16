"""Awaitable connects and transfers: 1,000 concurrent transfers with 100 cancelled at points a
fixed seed picks, every completed one's bytes right, every cancelled one reported as cancelled
with its destination holding only its own old or new bytes, and nothing left behind."""

import asyncio
import os
import random
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

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
    # One stream per transfer: 512 slots, so about half the transfers wait for one.
    client = af.Engine(dev, "127.0.0.1", task_stream_num=1, pool_capacity=POOL)
    src = client.alloc_host(N * BLOCK)
    sreg = client.register(src)
    new = np.random.default_rng(3).integers(0, 256, N * BLOCK, dtype=np.uint8)
    np.asarray(src)[: N * BLOCK] = new
    rng = random.Random(11)
    # Which transfers are cancelled, and how many turns of the loop after they start.
    cancel = dict(zip(rng.sample(range(N), CANCELLED), (rng.randrange(4) for _ in range(N))))

    async def one(i):
        desc = [(src.addr + i * BLOCK, dst.addr + i * BLOCK, BLOCK)]
        await client.transfer(addr, "write", desc)

    async def main():
        await client.connect_async(addr)
        # The streams hold every copy until the cancelled transfers are let go, so each
        # cancel finds its transfer queued on a stream or waiting for a slot, never ended.
        with af.emulator_hold_streams():
            tasks = [asyncio.ensure_future(one(i)) for i in range(N)]
            asked, queued_at = {}, []
            for i, ticks in sorted(cancel.items(), key=lambda kv: kv[1]):
                for _ in range(ticks):
                    await asyncio.sleep(0)
                queued_at.append(client.peer_stats(addr)["in_flight"])
                asked[i] = tasks[i].cancel()
            # A cancelled task lets its transfer go a turn of the loop later: still held.
            await asyncio.wait([tasks[i] for i in asked])
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return asked, queued_at, results

    asked, queued_at, results = asyncio.run(main())
    assert all(asked.values()) and len(asked) == CANCELLED
    # Some cancels came before any copy was queued, some with copies queued on the streams.
    assert queued_at[0] == 0 and max(queued_at) > 0, queued_at
    got = np.asarray(dst)[: N * BLOCK]
    cancelled = 0
    for i, r in enumerate(results):
        block = slice(i * BLOCK, (i + 1) * BLOCK)
        if isinstance(r, asyncio.CancelledError):
            assert i in asked, f"transfer {i} cancelled without being asked"
            cancelled += 1
            # Any mix of its own old and new bytes, never bytes from elsewhere.
            ok = (got[block] == old[block]) | (got[block] == new[block])
            assert ok.all(), f"transfer {i}: bytes from elsewhere"
        else:
            assert r is None, f"transfer {i}: {r!r}"
            assert zlib.crc32(got[block].tobytes()) == zlib.crc32(new[block].tobytes()), i
    assert cancelled == CANCELLED
    stats = client.peer_stats(addr)
    assert stats["writes"] == N - CANCELLED, stats
    # A cancelled transfer's drop leaves its abort to the engine's progress thread: it ends
    # soon after, not necessarily by now.
    end = time.monotonic() + 20
    while client.peer_stats(addr)["in_flight"]:
        assert time.monotonic() < end, "transfers still in flight 20 s after the cancels"
        time.sleep(0.001)
    client.disconnect(addr)
    sreg.deregister()
    dreg.deregister()
    del src, dst, sreg, dreg, client, server, got


# What the children below start from: a listening engine offering a host buffer, and a client
# engine with one of its own. A child's deadlock or abort fails its test rather than hanging or
# killing the suite (faulthandler ends a child stuck for a minute, printing its threads).
TWO_ENGINES = r"""
import asyncio, faulthandler, os, sys, threading
faulthandler.dump_traceback_later(60, exit=True)
os.environ["ASCEND_MEM_BACKEND"] = "sim"
import ascend_fabric as af
from conftest import POOL, listening_engine

dev = af.Runtime().device(0)
server, addr = listening_engine(dev)
dst = server.alloc_host(1 << 20)
dreg = server.register(dst)
client = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
src = client.alloc_host(1 << 20)
sreg = client.register(src)
"""


def run_child(script):
    """Runs ``script`` in a child interpreter; it must exit 0 having printed DONE."""
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=os.path.dirname(__file__),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "DONE" in out.stdout, (out.returncode, out.stderr[-3000:])


DROP_DURING_LOOP = TWO_ENGINES + r"""
async def main():
    global client, src, sreg
    await client.connect_async(addr)
    hold = af.emulator_hold_streams()
    tasks = [asyncio.ensure_future(client.transfer(addr, "write", [(src.addr, dst.addr, 4096)]))
             for _ in range(50)]
    await asyncio.sleep(0)
    # The last names of the engine and its memory go while transfers wait on held streams and
    # the engine's threads may be waking this loop: the engine shuts down, and each transfer
    # ends with the engine's shutdown as its peer lost.
    del client, src, sreg
    hold.release()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, af.PeerLost) and "shut down" in str(r) for r in results), results

asyncio.run(main())
dreg.deregister()
del dst, dreg, server
import gc; gc.collect()
left = {k: v for k, v in af.emulator_live_objects().items() if v}
assert not left, left
print("DONE", flush=True)
"""


def test_dropping_the_engine_under_awaited_transfers_ends_them_without_deadlock(dev):
    run_child(DROP_DURING_LOOP)


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
    assert isinstance(e, af.InvalidArgument) and e.status == 103900, e
    client.disconnect(addr)
    reg.deregister()
    del src, reg, client, server


def test_awaiting_needs_a_running_loop(dev):
    eng = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    with pytest.raises(RuntimeError, match="loop"):
        eng.transfer("127.0.0.1:1", "write", [])
    del eng


EXIT_WITH_ENGINES_ALIVE = TWO_ENGINES + r"""
async def connect():
    await client.connect_async(addr)

async def one():
    await client.transfer(addr, "write", [(src.addr, dst.addr, 4096)])

loop = asyncio.new_event_loop()
loop.run_until_complete(connect())
hold = af.emulator_hold_streams()
tasks = [loop.create_task(one()) for _ in range(100)]
for _ in range(3):
    loop.run_until_complete(asyncio.sleep(0))
print("DONE", flush=True)
# Exits with the engines, their memory, the channel, the held streams and a loop with awaited
# transfers all alive: the interpreter finalizes them while the engines' threads wake the
# loop's futures (each transfer ends as the engine shuts down).
"""


def test_exiting_with_awaited_transfers_in_flight_is_clean(dev):
    for _ in range(3):
        run_child(EXIT_WITH_ENGINES_ALIVE)


DAEMON_WAITING_AT_EXIT = r"""
import os, threading
os.environ["ASCEND_MEM_BACKEND"] = "sim"
import ascend_fabric as af
cq = af.CompletionQueue()
started = threading.Event()

def consume():
    started.set()
    while True:
        cq.wait(16, 0.01)  # the GIL released, again and again

threading.Thread(target=consume, daemon=True).start()
started.wait()
print("DONE", flush=True)
# The main thread ends with the daemon thread coming back from calls that released the GIL.
"""


def test_a_daemon_thread_in_a_call_without_the_gil_does_not_abort_the_exit(dev):
    for _ in range(5):
        run_child(DAEMON_WAITING_AT_EXIT)


LOST_PEER_WHILE_ASKING = TWO_ENGINES + r"""
async def main():
    await client.connect_async(addr)
    with af.emulator_hold_streams():
        tasks = [asyncio.ensure_future(client.transfer(addr, "write", [(src.addr, dst.addr, 4096)]))
                 for _ in range(64)]
        await asyncio.sleep(0)
        # Ending the channel wakes every awaiting task, from another thread, while this one
        # (holding the GIL) asks the engine about the same peer, again and again.
        t = threading.Thread(target=client.disconnect, args=(addr,))
        t.start()
        while t.is_alive():
            client.remote_segments(addr)
            client.peer_stats(addr)
            client.peers()
        t.join()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, af.PeerLost) for r in results), results

asyncio.run(main())
print("DONE", flush=True)
"""


def test_asking_about_a_peer_while_it_is_lost_does_not_deadlock(dev):
    run_child(LOST_PEER_WHILE_ASKING)
