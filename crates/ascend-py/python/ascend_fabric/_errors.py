"""The package's exceptions: one base, one subclass per HIXL status, and ``PeerLost``.

Each also derives from the built-in exception a Python caller would catch for it
(``InvalidArgument`` is a ``ValueError``, ``TimedOut`` a ``TimeoutError``, ``NotConnected`` a
``ConnectionError``), so code that knows nothing of this package still handles them.
"""


class AscendError(Exception):
    """An error of the memory layer or the engine.

    ``status`` is the HIXL status code (as HIXL's Python module reports it, e.g. 103900 for
    PARAM_INVALID), ``kind`` the Rust error's variant (``"OutOfRange"``, ``"PeerLost"``, ...),
    and the message the Rust error's text, which names the call and the value.
    """

    def __init__(self, message: str, status: int, kind: str):
        super().__init__(message)
        self.status = status
        self.kind = kind

    def __reduce__(self):
        # Pickled (multiprocessing, a process pool) and copied with all three fields.
        return (type(self), (self.args[0], self.status, self.kind))


class InvalidArgument(AscendError, ValueError):
    """PARAM_INVALID (103900): an argument the call refused before doing anything."""


class TimedOut(AscendError, TimeoutError):
    """TIMEOUT (103901): the call's time ran out (a timed-out transfer is aborted)."""


class NotConnected(AscendError, ConnectionError):
    """NOT_CONNECTED (103902): no channel to the peer."""


class PeerLost(NotConnected):
    """NOT_CONNECTED, kind ``PeerLost``: the channel to the peer ended under the call (the
    peer died, stopped answering heartbeats, left the directory, or was disconnected)."""


class AlreadyConnected(AscendError):
    """ALREADY_CONNECTED (103903)."""


class NotifyFailed(AscendError):
    """NOTIFY_FAILED (103904)."""


class Unsupported(AscendError):
    """UNSUPPORTED (103905): not in this engine, runtime or build."""


class ResourceExhausted(AscendError):
    """RESOURCE_EXHAUSTED (203900): memory, VA or stream slots ran out."""


class Failed(AscendError):
    """FAILED (503900): anything else (a refused copy, an abort, a busy registration)."""


_BY_STATUS = {
    103900: InvalidArgument,
    103901: TimedOut,
    103902: NotConnected,
    103903: AlreadyConnected,
    103904: NotifyFailed,
    103905: Unsupported,
    203900: ResourceExhausted,
    503900: Failed,
}


def _from_native(message: str, status: int, kind: str) -> AscendError:
    """The exception for an error of the native module."""
    cls = PeerLost if kind == "PeerLost" else _BY_STATUS.get(status, AscendError)
    return cls(message, status, kind)
