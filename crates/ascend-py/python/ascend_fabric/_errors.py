"""The package's exception."""


class AscendError(Exception):
    """An error of the memory layer or the engine.

    ``status`` is the HIXL status code (``0x``-style integers as HIXL's Python module reports
    them, e.g. 103900 for PARAM_INVALID), ``kind`` its name, and the message the Rust error's
    text.
    """

    def __init__(self, message: str, status: int, kind: str):
        super().__init__(message)
        self.status = status
        self.kind = kind
