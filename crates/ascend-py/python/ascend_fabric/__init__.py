"""Huawei Ascend memory and the Fabric Mem transfer engine (HIXL's FabricMem mode), for Python.

The backend is the one ``ASCEND_MEM_BACKEND`` names: CANN (``cann`` or unset; an error when it
does not load, never the emulator) or the emulator built into the package (``sim``).

    import ascend_fabric as af
    rt = af.Runtime()
    dev = rt.device(0)
    engine = af.Engine(dev, "127.0.0.1:26000")
"""

from ._errors import AscendError
from ._native import (
    DeviceBuffer,
    Device,
    Engine,
    HostBuffer,
    Registration,
    Runtime,
    __version__,
    emulator_live_objects,
)

__all__ = [
    "AscendError",
    "Device",
    "DeviceBuffer",
    "Engine",
    "HostBuffer",
    "Registration",
    "Runtime",
    "__version__",
    "emulator_live_objects",
]
