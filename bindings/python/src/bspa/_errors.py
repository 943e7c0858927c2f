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


_BY_STATUS: dict[int, type[BspaError]] = {
    100: InvalidArgumentError,
    101: NullPointerError,
    102: OutOfRangeError,
    103: ShapeMismatchError,
    104: DtypeMismatchError,
    105: DeviceMismatchError,
    106: BufferTooSmallError,
    107: InvalidStateError,
    200: NotSupportedError,
    201: NoDeviceError,
    300: OutOfPagesError,
    301: OutOfMemoryError,
    400: CudaError,
    500: VersionError,
    900: InternalError,
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
    if status != 0:
        raise error_for(status, _bspa.bspa_last_error())
