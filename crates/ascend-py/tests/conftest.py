"""The package's tests run on the emulator built into it (ASCEND_MEM_BACKEND=sim)."""

import gc
import os
import random

import pytest

os.environ.setdefault("ASCEND_MEM_BACKEND", "sim")
# Streams that run on threads of their own, the mode whose streams the tests hold.
os.environ["ASCEND_SIM_STREAM_MODE"] = "threaded"

import ascend_fabric as af  # noqa: E402  (after the backend is chosen)

POOL = 4 << 30


def listening_engine(dev, **kw):
    """An engine listening on a free loopback port below the ephemeral range, and its
    address; a port taken meanwhile is replaced by another."""
    last = None
    for _ in range(20):
        addr = f"127.0.0.1:{random.randrange(20000, 30000)}"
        try:
            return af.Engine(dev, addr, pool_capacity=POOL, **kw), addr
        except af.AscendError as e:
            if "in use" not in str(e):
                raise
            last = e
    raise last


@pytest.fixture(scope="session")
def runtime():
    rt = af.Runtime()
    assert rt.is_emulator, rt.backend
    return rt


@pytest.fixture
def dev(runtime):
    yield runtime.device(0)
    # What a test made is gone once its objects are: nothing left in the emulator.
    gc.collect()
    left = {k: v for k, v in af.emulator_live_objects().items() if v}
    assert not left, f"left behind: {left}"
