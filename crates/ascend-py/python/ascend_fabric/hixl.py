"""HIXL's Python names over this package's engine, so a program written for ``import hixl``
runs with ``import ascend_fabric.hixl as hixl``.

Every method returns HIXL's status codes (and HIXL's tuples) instead of raising; the engine is
this package's Fabric Mem engine, so the options must select FabricMem
(``OPTION_ENABLE_USE_FABRIC_MEM: "1"``), as with HIXL. What differs from HIXL's module:

* ``get_all_transfer_status`` works in FabricMem mode (HIXL's answers UNSUPPORTED there): the
  requests of ``transfer_async`` that ended since, each once, with their user data.
* The device is the one ``set_device`` named (0 by default), as HIXL uses the thread's current
  device; the backend is the one ``ASCEND_MEM_BACKEND`` names.
"""

import enum
import threading

__all__ = [
    "SUCCESS", "PARAM_INVALID", "TIMEOUT", "NOT_CONNECTED", "ALREADY_CONNECTED",
    "NOTIFY_FAILED", "UNSUPPORTED", "FAILED", "RESOURCE_EXHAUSTED",
    "OPTION_ENABLE_USE_FABRIC_MEM", "OPTION_RDMA_TRAFFIC_CLASS", "OPTION_RDMA_SERVICE_LEVEL",
    "OPTION_BUFFER_POOL", "OPTION_GLOBAL_RESOURCE_CONFIG", "OPTION_AUTO_CONNECT",
    "OPTION_LOCAL_COMM_RES", "FEATURE_SUPPORTED", "FEATURE_NOT_SUPPORTED",
    "MemType", "MEM_DEVICE", "MEM_HOST", "TransferOp", "READ", "WRITE", "TransferStatus",
    "AsyncConnectStatus", "NOT_CONNECT", "CONNECT_PENDING", "CONNECTING", "CONNECTED",
    "CONNECT_FAILED", "DISCONNECT_PENDING", "DISCONNECTING", "FeatureType", "AUTO_CONNECT",
    "CLIENT_SERVER_COMM", "MemDesc", "TransferOpDesc", "TransferArgs", "GetTransferStatusArgs",
    "TransferResult", "NotifyDesc", "Hixl", "get_capability",
]

from . import _native
from ._errors import AscendError

SUCCESS = 0
PARAM_INVALID = 103900
TIMEOUT = 103901
NOT_CONNECTED = 103902
ALREADY_CONNECTED = 103903
NOTIFY_FAILED = 103904
UNSUPPORTED = 103905
RESOURCE_EXHAUSTED = 203900
FAILED = 503900

OPTION_ENABLE_USE_FABRIC_MEM = "EnableUseFabricMem"
OPTION_RDMA_TRAFFIC_CLASS = "RdmaTrafficClass"
OPTION_RDMA_SERVICE_LEVEL = "RdmaServiceLevel"
OPTION_BUFFER_POOL = "BufferPool"
OPTION_GLOBAL_RESOURCE_CONFIG = "GlobalResourceConfig"
OPTION_AUTO_CONNECT = "AutoConnect"
OPTION_LOCAL_COMM_RES = "LocalCommRes"

FEATURE_SUPPORTED = 1
FEATURE_NOT_SUPPORTED = 0

_DEFAULT_TIMEOUT_MS = 1000


class MemType(enum.IntEnum):
    MEM_DEVICE = 0
    MEM_HOST = 1


class TransferOp(enum.IntEnum):
    READ = 0
    WRITE = 1


class TransferStatus(enum.IntEnum):
    WAITING = 0
    COMPLETED = 1
    TIMEOUT = 2
    FAILED = 3


class AsyncConnectStatus(enum.IntEnum):
    NOT_CONNECT = 0
    CONNECT_PENDING = 1
    CONNECTING = 2
    CONNECTED = 3
    CONNECT_FAILED = 4
    DISCONNECT_PENDING = 5
    DISCONNECTING = 6


class FeatureType(enum.IntEnum):
    AUTO_CONNECT = 0
    CLIENT_SERVER_COMM = 1


MEM_DEVICE, MEM_HOST = MemType.MEM_DEVICE, MemType.MEM_HOST
READ, WRITE = TransferOp.READ, TransferOp.WRITE
(
    NOT_CONNECT,
    CONNECT_PENDING,
    CONNECTING,
    CONNECTED,
    CONNECT_FAILED,
    DISCONNECT_PENDING,
    DISCONNECTING,
) = tuple(AsyncConnectStatus)
AUTO_CONNECT, CLIENT_SERVER_COMM = FeatureType.AUTO_CONNECT, FeatureType.CLIENT_SERVER_COMM


class MemDesc:
    def __init__(self, addr, len):
        self.addr, self.len = addr, len


class TransferOpDesc:
    def __init__(self, local_addr, remote_addr, len):
        self.local_addr, self.remote_addr, self.len = local_addr, remote_addr, len


class TransferArgs:
    def __init__(self):
        self.user_data = 0


class GetTransferStatusArgs:
    def __init__(self, max_query_count=0xFFFFFFFF, skip_waiting=False):
        self.max_query_count, self.skip_waiting = max_query_count, skip_waiting


class TransferResult:
    def __init__(self):
        self.req, self.user_data, self.status = 0, 0, TransferStatus.WAITING


class NotifyDesc:
    def __init__(self, name, notify_msg):
        self.name, self.notify_msg = name, notify_msg


_device = 0


def set_device(device_id):
    """The device the next ``Hixl.initialize`` uses (HIXL: the thread's current device)."""
    global _device
    _device = int(device_id)


def get_capability(feature):
    """``(SUCCESS, FEATURE_SUPPORTED or FEATURE_NOT_SUPPORTED)``: AutoConnect is supported;
    the client/server engine is not (this face is the Fabric Mem engine's), nor any feature
    it does not know; a negative feature is PARAM_INVALID."""
    if int(feature) < 0:
        return PARAM_INVALID, FEATURE_NOT_SUPPORTED
    if feature == FeatureType.AUTO_CONNECT:
        return SUCCESS, FEATURE_SUPPORTED
    return SUCCESS, FEATURE_NOT_SUPPORTED


def _status(call):
    """Runs ``call``; its error as HIXL's status."""
    try:
        call()
        return SUCCESS
    except AscendError as e:
        return e.status
    except (ValueError, TypeError, OverflowError):
        return PARAM_INVALID


def _op_name(op):
    if op == TransferOp.READ:
        return "read"
    if op == TransferOp.WRITE:
        return "write"
    raise ValueError(f"op {op!r}")


def _descs(op_descs):
    return [(d.local_addr, d.remote_addr, d.len) for d in op_descs]


class Hixl:
    """One engine, as HIXL's ``Hixl``."""

    def __init__(self):
        self._engine = None
        self._dev = None
        self._regs = {}
        self._reqs = {}
        self._connects = {}
        self._lock = threading.Lock()
        self._next = 1

    def _take_id(self):
        with self._lock:
            n, self._next = self._next, self._next + 1
            return n

    def initialize(self, local_engine, options={}):  # noqa: B006 (HIXL's signature)
        if self._engine is not None:
            return SUCCESS
        try:
            dev = _native.Runtime().device(_device)
            self._engine = _native.Engine.from_hixl(dev, local_engine, dict(options))
            self._dev = dev
            return SUCCESS
        except AscendError as e:
            return e.status
        except (ValueError, TypeError):
            return PARAM_INVALID

    def finalize(self):
        with self._lock:
            regs, self._regs = self._regs, {}
            self._reqs.clear()
        for r in regs.values():
            r.deregister()
        self._engine = None

    def register_mem(self, mem_desc, mem_type):
        engine = self._engine
        if engine is None:
            return FAILED, 0
        if mem_type not in (MemType.MEM_DEVICE, MemType.MEM_HOST):
            return PARAM_INVALID, 0
        holder = []
        want = "device" if mem_type == MemType.MEM_DEVICE else "host"

        def reg():
            # HIXL keeps device and host memory apart by the type given: a type that is not
            # what the memory is, is refused rather than taken silently.
            if self._dev.pointer_kind(mem_desc.addr) != want:
                raise ValueError(f"mem_type {mem_type!r}: the memory at {mem_desc.addr:#x} is not {want}")
            holder.append(engine.register_raw(mem_desc.addr, mem_desc.len))

        st = _status(reg)
        if st != SUCCESS:
            return st, 0
        handle = self._take_id()
        with self._lock:
            self._regs[handle] = holder[0]
        return SUCCESS, handle

    def deregister_mem(self, mem_handle):
        engine = self._engine
        if engine is None:
            return FAILED
        with self._lock:
            reg = self._regs.pop(mem_handle, None)
        if reg is None:
            return PARAM_INVALID
        reg.deregister()
        return SUCCESS

    def connect(self, remote_engine, timeout_in_millis=_DEFAULT_TIMEOUT_MS):
        engine = self._engine
        if engine is None:
            return FAILED
        return _status(lambda: engine.connect(remote_engine, timeout_in_millis / 1000.0))

    def disconnect(self, remote_engine, timeout_in_millis=_DEFAULT_TIMEOUT_MS):
        engine = self._engine
        if engine is None:
            return FAILED
        return _status(lambda: engine.disconnect(remote_engine, timeout_in_millis / 1000.0))

    def _in_background(self, remote, pending, running, done, call):
        with self._lock:
            self._connects[remote] = pending

        def run():
            with self._lock:
                self._connects[remote] = running
            st = call()
            with self._lock:
                self._connects[remote] = done(st)

        threading.Thread(target=run, daemon=True).start()
        return SUCCESS

    def connect_async(self, remote_engine, timeout_in_millis=_DEFAULT_TIMEOUT_MS):
        engine = self._engine
        if engine is None:
            return FAILED
        return self._in_background(
            remote_engine,
            CONNECT_PENDING,
            CONNECTING,
            lambda st: CONNECTED if st == SUCCESS else CONNECT_FAILED,
            lambda: self.connect(remote_engine, timeout_in_millis),
        )

    def disconnect_async(self, remote_engine, timeout_in_millis=_DEFAULT_TIMEOUT_MS):
        engine = self._engine
        if engine is None:
            return FAILED
        return self._in_background(
            remote_engine,
            DISCONNECT_PENDING,
            DISCONNECTING,
            lambda st: NOT_CONNECT,
            lambda: self.disconnect(remote_engine, timeout_in_millis),
        )

    def get_async_connect_status(self, remote_engine):
        engine = self._engine
        if engine is None:
            return FAILED, NOT_CONNECT
        with self._lock:
            state = self._connects.get(remote_engine)
        connected = remote_engine in engine.peers()
        if state in (None, CONNECTED, NOT_CONNECT):
            # Settled states follow the engine (a later disconnect or a lost peer shows).
            state = CONNECTED if connected else NOT_CONNECT
        return SUCCESS, state

    def get_all_async_connect_status(self):
        if self._engine is None:
            return FAILED, {}
        with self._lock:
            remotes = list(self._connects)
        return SUCCESS, {r: self.get_async_connect_status(r)[1] for r in remotes}

    def transfer_sync(self, remote_engine, op, op_descs, timeout_in_millis=_DEFAULT_TIMEOUT_MS):
        engine = self._engine
        if engine is None:
            return FAILED
        return _status(
            lambda: engine.transfer_sync(
                remote_engine, _op_name(op), _descs(op_descs), timeout_in_millis / 1000.0
            )
        )

    def transfer_async(self, remote_engine, op, op_descs, args=None):
        engine = self._engine
        if engine is None:
            return FAILED, 0
        holder = []
        st = _status(
            lambda: holder.append(
                engine.transfer_async(remote_engine, _op_name(op), _descs(op_descs))
            )
        )
        if st != SUCCESS:
            return st, 0
        req = self._take_id()
        user_data = args.user_data if args is not None else 0
        with self._lock:
            self._reqs[req] = (holder[0], user_data)
        return SUCCESS, req

    @staticmethod
    def _state(request):
        s = request.status()
        if s == "waiting":
            return TransferStatus.WAITING
        return TransferStatus.COMPLETED if s == "completed" else TransferStatus.FAILED

    def _ended(self, req):
        """Forgets an ended request; whether this caller did (so it reports the end, once)."""
        with self._lock:
            return self._reqs.pop(req, None) is not None

    def get_transfer_status(self, req):
        engine = self._engine
        if engine is None:
            return FAILED, TransferStatus.FAILED
        with self._lock:
            entry = self._reqs.get(req)
        if entry is None:
            return PARAM_INVALID, TransferStatus.FAILED
        state = self._state(entry[0])
        if state != TransferStatus.WAITING and not self._ended(req):
            # Another thread reported its end first: as HIXL, it is forgotten.
            return PARAM_INVALID, TransferStatus.FAILED
        return SUCCESS, state

    def get_all_transfer_status(self, args=None):
        engine = self._engine
        if engine is None:
            return FAILED, []
        args = args or GetTransferStatusArgs()
        with self._lock:
            entries = list(self._reqs.items())
        out = []
        for req, (request, user_data) in entries:
            if len(out) >= args.max_query_count:
                break
            state = self._state(request)
            if state == TransferStatus.WAITING and args.skip_waiting:
                continue
            if state != TransferStatus.WAITING and not self._ended(req):
                continue
            r = TransferResult()
            r.req, r.user_data, r.status = req, user_data, state
            out.append(r)
        return SUCCESS, out

    def send_notify(self, remote_engine, notify, timeout_in_millis=_DEFAULT_TIMEOUT_MS):
        engine = self._engine
        if engine is None:
            return FAILED
        if timeout_in_millis <= 0:
            return PARAM_INVALID
        return _status(
            lambda: engine.send_notify(
                remote_engine, notify.name, notify.notify_msg, timeout_in_millis / 1000.0
            )
        )

    def get_notifies(self):
        engine = self._engine
        if engine is None:
            return FAILED, []
        return SUCCESS, [NotifyDesc(n, m) for n, m in engine.take_notifies()]
