"""Prepared block lists: a registration and a peer's segments (by index and by name) cut into
blocks once, then transfers that name blocks by index pairs, synchronous, polled and awaited;
indices past a list and lists of deregistered memory refused with typed errors."""

import asyncio

import numpy as np
import pytest

import ascend_fabric as af
from conftest import POOL, listening_engine

BLOCK = 64 << 10
BLOCKS = 32  # 2 MiB: whole allocation granules, so the buffers are exactly this long


def setup(dev):
    server, addr = listening_engine(dev)
    kv = server.alloc_device(BLOCKS * BLOCK)
    kreg = server.register_named(kv, "kv")
    client = af.Engine(dev, "127.0.0.1", pool_capacity=POOL)
    src = client.alloc_host(BLOCKS * BLOCK)
    sreg = client.register(src)
    client.connect(addr)
    local = client.prepare_local(sreg, BLOCK)
    by_name = client.prepare_remote(addr, ["kv"], BLOCK)
    return server, addr, kv, kreg, client, src, sreg, local, by_name


def test_blocks_by_index_pairs(dev):
    server, addr, kv, kreg, client, src, sreg, local, remote = setup(dev)
    data = np.random.default_rng(5).integers(0, 256, BLOCKS * BLOCK, dtype=np.uint8)
    np.asarray(src)[: BLOCKS * BLOCK] = data
    assert (len(local), local.block_len, len(remote), remote.peer) == (BLOCKS, BLOCK, BLOCKS, addr)
    assert local.block_addr(3) == src.addr + 3 * BLOCK and local.block_addr(BLOCKS) is None
    assert remote.block_addr(2) == kv.addr + 2 * BLOCK and remote.first_block(0) == 0
    # The same segment by index: the peer's first segment is `kv`.
    assert client.remote_segments(addr) == [(kv.addr, BLOCKS * BLOCK)]
    by_index = client.prepare_remote(addr, [0], BLOCK)
    assert by_index.block_addr(5) == remote.block_addr(5)
    # Local block i to remote block BLOCKS-1-i, synchronously.
    pairs = [(i, BLOCKS - 1 - i) for i in range(BLOCKS)]
    client.transfer_prepared_sync("write", local, remote, pairs)
    for i in range(BLOCKS):
        want = data[i * BLOCK : (i + 1) * BLOCK].tobytes()
        assert kv.read((BLOCKS - 1 - i) * BLOCK, BLOCK) == want, i
    # Read two of them back into block 0 and 1, polled.
    np.asarray(src)[: 2 * BLOCK] = 0
    req = client.transfer_prepared_async("read", local, by_index, [(0, BLOCKS - 1), (1, 0)])
    req.wait()
    assert bytes(np.asarray(src)[:BLOCK]) == data[:BLOCK].tobytes()
    assert bytes(np.asarray(src)[BLOCK : 2 * BLOCK]) == data[(BLOCKS - 1) * BLOCK :].tobytes()

    # Awaited, several at once, block i to block i.
    np.asarray(src)[: BLOCKS * BLOCK] = data

    async def main():
        await asyncio.gather(
            *(client.transfer_prepared("write", local, remote, [(i, i)]) for i in range(BLOCKS))
        )

    asyncio.run(main())
    assert kv.read(0, BLOCKS * BLOCK) == data.tobytes()
    client.disconnect(addr)
    del local, remote, by_index, req
    sreg.deregister()
    kreg.deregister()


def test_bad_blocks_are_typed_errors(dev):
    server, addr, kv, kreg, client, src, sreg, local, remote = setup(dev)
    with pytest.raises(af.InvalidArgument) as e:
        client.transfer_prepared_sync("write", local, remote, [(0, 0), (1, BLOCKS)])
    assert e.value.kind == "BlockIndex" and str(BLOCKS) in str(e.value), e.value
    with pytest.raises(af.InvalidArgument) as e:
        client.prepare_remote(addr, ["no-such-segment"], BLOCK)
    assert "no-such-segment" in str(e.value)
    with pytest.raises(af.InvalidArgument):
        client.prepare_remote(addr, [7], BLOCK)
    with pytest.raises(af.InvalidArgument):
        client.prepare_local(sreg, 0)
    with pytest.raises(af.InvalidArgument, match="op"):
        client.transfer_prepared_sync("copy", local, remote, [(0, 0)])
    # A name already taken by a live registration.
    other = server.alloc_host(BLOCK)
    with pytest.raises(af.InvalidArgument) as e:
        server.register_named(other, "kv")
    assert "kv" in str(e.value)
    client.disconnect(addr)
    # A list of a channel that is gone reports the loss.
    with pytest.raises(af.NotConnected):
        client.transfer_prepared_sync("write", local, remote, [(0, 0)])
    sreg.deregister()
    with pytest.raises(af.InvalidArgument, match="deregistered"):
        client.prepare_local(sreg, BLOCK)
    del local, remote
    kreg.deregister()
