"""Exceptions mapped from bspa status codes.

Every failed call raises a subclass of :class:`BspaError` carrying the status and the
library's message. Categories also derive from the matching builtin, so
``except MemoryError`` catches :class:`OutOfPagesError` and ``except ValueError``
catches every invalid-argument error.
"""

from __future__ import annotations

from . import _bspa


class BspaError(Exception):
    """A bspa call failed. ``status`` is the C status code, ``message`` the library's text."""

    def __init__(self, status: int, message: str) -> None:
        self.status = int(status)
        self.status_name: str = _bspa.bspa_status_string(self.status)
        self.message = message
        super().__init__(f"{self.status_name}: {message}" if message else self.status_name)


class InvalidArgumentError(BspaError, ValueError):
    """1xx: the caller passed something invalid."""


class NullPointerError(InvalidArgumentError):
    """A required argument was missing (NULL)."""


class OutOfRangeError(InvalidArgumentError, IndexError):
    """An index (layer, head, page, block) was out of range."""


class ShapeMismatchError(InvalidArgumentError):
    """A tensor's ndim, shape or strides are wrong."""


class DtypeMismatchError(InvalidArgumentError, TypeError):
    """A tensor's dtype is wrong."""


class DeviceMismatchError(InvalidArgumentError):
    """A tensor lives on the wrong device."""


class BufferTooSmallError(InvalidArgumentError):
    """An output buffer was too small."""


class InvalidStateError(InvalidArgumentError):
    """The call is not valid for the object's current state."""


class NotSupportedError(BspaError, NotImplementedError):
    """2xx: valid but not supported by this build or device."""


class NoDeviceError(NotSupportedError):
    """The requested device does not exist on this machine."""


class ResourceError(BspaError, MemoryError):
    """3xx: a resource ran out."""


class OutOfPagesError(ResourceError):
    """The pool has no free or evictable page left; the failed call changed nothing."""


class OutOfMemoryError(ResourceError):
    """A host or device allocation failed."""


class CudaError(BspaError, RuntimeError):
    """4xx: the CUDA runtime reported an error."""


class VersionError(BspaError):
    """5xx: an options struct or the library's ABI version does not match."""


class InternalError(BspaError, RuntimeError):
    """9xx: a bug in bspa; please report it with :func:`bspa.build_info`."""


# Keyed by the header's constants (through the SWIG module), so the codes are defined once.
_BY_STATUS: dict[int, type[BspaError]] = {
    _bspa.BSPA_ERR_INVALID_ARGUMENT: InvalidArgumentError,
    _bspa.BSPA_ERR_NULL_POINTER: NullPointerError,
    _bspa.BSPA_ERR_OUT_OF_RANGE: OutOfRangeError,
    _bspa.BSPA_ERR_SHAPE_MISMATCH: ShapeMismatchError,
    _bspa.BSPA_ERR_DTYPE_MISMATCH: DtypeMismatchError,
    _bspa.BSPA_ERR_DEVICE_MISMATCH: DeviceMismatchError,
    _bspa.BSPA_ERR_BUFFER_TOO_SMALL: BufferTooSmallError,
    _bspa.BSPA_ERR_INVALID_STATE: InvalidStateError,
    _bspa.BSPA_ERR_NOT_SUPPORTED: NotSupportedError,
    _bspa.BSPA_ERR_NO_DEVICE: NoDeviceError,
    _bspa.BSPA_ERR_OUT_OF_PAGES: OutOfPagesError,
    _bspa.BSPA_ERR_OUT_OF_MEMORY: OutOfMemoryError,
    _bspa.BSPA_ERR_CUDA: CudaError,
    _bspa.BSPA_ERR_VERSION: VersionError,
    _bspa.BSPA_ERR_INTERNAL: InternalError,
}

_BY_CATEGORY: dict[int, type[BspaError]] = {
    1: InvalidArgumentError,
    2: NotSupportedError,
    3: ResourceError,
    4: CudaError,
    5: VersionError,
    9: InternalError,
}


def error_for(status: int, message: str) -> BspaError:
    """The exception for a failed status (codes this binding does not know map by category)."""
    cls = _BY_STATUS.get(status) or _BY_CATEGORY.get(status // 100, BspaError)
    return cls(status, message)


def check(status: int) -> None:
    """Raises the mapped exception when ``status`` is not BSPA_OK.

    Must run right after the call, on the same thread: the message is thread-local.
    """
    if status != _bspa.BSPA_OK:
        raise error_for(status, _bspa.bspa_last_error())
