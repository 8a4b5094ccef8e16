"""Huawei Ascend memory and the Fabric Mem transfer engine (HIXL's FabricMem mode), for Python.

The backend is the one ``ASCEND_MEM_BACKEND`` names: CANN (``cann`` or unset; an error when it
does not load, never the emulator) or the emulator built into the package (``sim``).

    import ascend_fabric as af
    rt = af.Runtime()
    dev = rt.device(0)
    engine = af.Engine(dev, "127.0.0.1:26000")

``EtcdDirectory`` and ``Member`` (the engine directory) are there when the package was built
with the ``etcd`` feature (``HAS_DIRECTORY``).
"""

import atexit

from ._errors import (
    AlreadyConnected,
    AscendError,
    Failed,
    InvalidArgument,
    NotConnected,
    NotifyFailed,
    PeerLost,
    ResourceExhausted,
    TimedOut,
    Unsupported,
)
from . import _native
from ._native import (
    Completion,
    CompletionQueue,
    DeviceBuffer,
    Device,
    Engine,
    HostBuffer,
    LocalBlocks,
    Registration,
    RemoteBlocks,
    Request,
    Runtime,
    __version__,
    emulator_hold_streams,
    emulator_live_objects,
)

# No engine thread may take the GIL once the interpreter begins to exit (it would be ended
# mid-call); this waits for those inside and turns the others away.
atexit.register(_native.at_exit)

HAS_DIRECTORY = hasattr(_native, "EtcdDirectory")
if HAS_DIRECTORY:
    EtcdDirectory = _native.EtcdDirectory
    Member = _native.Member

__all__ = [
    "AlreadyConnected",
    "AscendError",
    "Completion",
    "CompletionQueue",
    "Device",
    "DeviceBuffer",
    "Engine",
    "Failed",
    "HAS_DIRECTORY",
    "HostBuffer",
    "InvalidArgument",
    "LocalBlocks",
    "NotConnected",
    "NotifyFailed",
    "PeerLost",
    "Registration",
    "RemoteBlocks",
    "Request",
    "ResourceExhausted",
    "Runtime",
    "TimedOut",
    "Unsupported",
    "__version__",
    "emulator_hold_streams",
    "emulator_live_objects",
] + (["EtcdDirectory", "Member"] if HAS_DIRECTORY else [])
