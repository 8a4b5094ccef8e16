"""The completion queue from several threads: producers hand requests over with user data,
consumers take the ended ones; each request is reported once, to one consumer, with its own
user data and its bytes in place; a cancelled one gives its user data back."""

import asyncio
import threading
import time

import numpy as np
import pytest

import ascend_fabric as af
from conftest import POOL, listening_engine

BLOCK = 4096
PRODUCERS = 4
PER_PRODUCER = 200
CONSUMERS = 3
IN_FLIGHT = 32  # well under the engine's stream slots: a submission never finds them all busy
TOTAL = PRODUCERS * PER_PRODUCER


def test_many_threads_share_one_queue(dev):
    server, addr = listening_engine(dev)
    dst = server.alloc_host(TOTAL * BLOCK)
    dreg = server.register(dst)
    client = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    src = client.alloc_host(TOTAL * BLOCK)
    sreg = client.register(src)
    data = np.random.default_rng(9).integers(0, 256, TOTAL * BLOCK, dtype=np.uint8)
    np.asarray(src)[: TOTAL * BLOCK] = data
    client.connect(addr)
    cq = af.CompletionQueue()
    room = threading.Semaphore(IN_FLIGHT)
    seen, failures, lock = {}, [], threading.Lock()
    pushed = threading.Event()
    left = [PRODUCERS]

    def produce(p):
        try:
            for k in range(PER_PRODUCER):
                i = p * PER_PRODUCER + k
                room.acquire()
                desc = [(src.addr + i * BLOCK, dst.addr + i * BLOCK, BLOCK)]
                cq.push(client.transfer_async(addr, "write", desc), ("block", i))
        except Exception as e:  # noqa: BLE001 (reported by the test below)
            failures.append(e)
        finally:
            with lock:
                left[0] -= 1
                if not left[0]:
                    pushed.set()

    def consume():
        while True:
            got = cq.wait(16, 0.05)
            for c in got:
                room.release()
                with lock:
                    assert c.id not in seen, "a request reported twice"
                    seen[c.id] = c.user_data
                if c.error is not None:
                    failures.append(c.error)
            if not got and pushed.is_set() and not len(cq):
                return

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    threads += [threading.Thread(target=consume) for _ in range(CONSUMERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert sorted(seen.values()) == [("block", i) for i in range(TOTAL)]
    assert bytes(np.asarray(dst)[: TOTAL * BLOCK]) == data.tobytes()
    client.disconnect(addr)
    sreg.deregister()
    dreg.deregister()


def test_cancel_and_failures_come_back_with_their_data(dev):
    server, addr = listening_engine(dev)
    dst = server.alloc_host(2 * BLOCK)
    dreg = server.register(dst)
    client = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    src = client.alloc_host(2 * BLOCK)
    sreg = client.register(src)
    client.connect(addr)
    cq = af.CompletionQueue()
    with af.emulator_hold_streams():
        req = client.transfer_async(addr, "write", [(src.addr, dst.addr, BLOCK)])
        rid = cq.push(req, {"block": 0})
        # The Request object was handed over.
        with pytest.raises(af.InvalidArgument, match="CompletionQueue"):
            req.status()
        with pytest.raises(af.InvalidArgument, match="CompletionQueue"):
            cq.push(req)
        other = cq.push(client.transfer_async(addr, "write", [(src.addr, dst.addr, BLOCK)]), 7)
        assert len(cq) == 2 and cq.ready == 0
        assert cq.cancel(rid) == {"block": 0}
        assert cq.cancel(rid) is None
        # Disconnecting fails what is in flight: a completion with the lost peer's error.
        client.disconnect(addr)
    (c,) = cq.wait(4, 10.0)
    assert (c.id, c.user_data, c.status) == (other, 7, "failed"), c
    assert isinstance(c.error, af.PeerLost), c.error
    with pytest.raises(af.PeerLost):
        c.result()
    assert cq.wait(4, 0.0) == [] and not len(cq)
    sreg.deregister()
    dreg.deregister()


def test_a_cancelled_next_takes_nothing(dev):
    server, addr = listening_engine(dev)
    dst = server.alloc_host(BLOCK)
    dreg = server.register(dst)
    client = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    src = client.alloc_host(BLOCK)
    sreg = client.register(src)
    client.connect(addr)
    cq = af.CompletionQueue()

    async def main():
        with af.emulator_hold_streams():
            cq.push(client.transfer_async(addr, "write", [(src.addr, dst.addr, BLOCK)]), "mine")
            task = asyncio.ensure_future(cq.next())
            await asyncio.sleep(0)  # waiting in next()
        # The request ends and the engine wakes the task while this thread still runs; then
        # the task is cancelled before the loop gets to it.
        end = time.monotonic() + 20
        while not cq.ready:
            assert time.monotonic() < end, "the request did not end"
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return None

    got = asyncio.run(main())
    if got is None:
        # Cancelled: the completion is still in the queue.
        (c,) = cq.wait(4, 10.0)
    else:
        c = got  # the task had the completion before the cancel
    assert (c.user_data, c.status) == ("mine", "completed")
    assert not len(cq)
    client.disconnect(addr)
    sreg.deregister()
    dreg.deregister()
