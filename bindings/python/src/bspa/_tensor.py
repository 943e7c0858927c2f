"""Tensors at the ABI: numpy arrays become DLTensor structs built here over the array's
memory; anything else with ``__dlpack__`` (torch, cupy, jax) hands over a DLPack capsule
made ready on the caller's stream."""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional, Sequence, Union

import numpy as np

from . import _bspa

# DLPack's codes, from dlpack.h through the SWIG module.
kDLCPU = _bspa.kDLCPU
kDLCUDA = _bspa.kDLCUDA
kDLCUDAManaged = _bspa.kDLCUDAManaged

_kDLInt, _kDLUInt, _kDLFloat, _kDLBfloat = _bspa.kDLInt, _bspa.kDLUInt, _bspa.kDLFloat, _bspa.kDLBfloat
#: DLPack's kDLFloat8_e4m3fn (DLPack >= 1.1): torch.float8_e4m3fn exports it.
kDLFloat8_e4m3fn = 10


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def bfloat16_dtype() -> Optional[np.dtype]:
    """numpy's bfloat16 from ml_dtypes when it is installed (numpy itself has none)."""
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def float8_e4m3fn_dtype() -> Optional[np.dtype]:
    """numpy's float8_e4m3fn from ml_dtypes when it is installed (numpy itself has none)."""
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return np.dtype(ml_dtypes.float8_e4m3fn)


def _dl_dtype(dtype: np.dtype, raw_bf16: bool) -> DLDataType:
    if dtype.name == "bfloat16" or (raw_bf16 and dtype == np.uint16):
        return DLDataType(_kDLBfloat, 16, 1)
    if dtype.name == "float8_e4m3fn":
        return DLDataType(kDLFloat8_e4m3fn, 8, 1)
    if dtype.kind == "f":
        return DLDataType(_kDLFloat, dtype.itemsize * 8, 1)
    if dtype.kind == "i":
        return DLDataType(_kDLInt, dtype.itemsize * 8, 1)
    if dtype.kind == "u":
        return DLDataType(_kDLUInt, dtype.itemsize * 8, 1)
    raise TypeError(f"numpy dtype {dtype} has no DLPack equivalent bspa uses")


class HostTensor:
    """A DLTensor over a numpy array's memory. Keeps the array alive; ``address`` is what
    the SWIG layer takes. ``raw_bf16`` reads uint16 arrays as bfloat16 bit patterns."""

    def __init__(self, array: np.ndarray, *, writable: bool = False, raw_bf16: bool = False) -> None:
        if writable and not array.flags.writeable:
            raise ValueError("output array is read-only")
        if not array.dtype.isnative:  # DLPack has no byte order: the library reads native values
            raise ValueError(f"array dtype {array.dtype.str} is not in this machine's byte order; "
                             "convert it with .astype(array.dtype.newbyteorder('='))")
        itemsize = array.dtype.itemsize
        if any(s % itemsize for s in array.strides):
            raise ValueError(f"array strides {array.strides} are not multiples of its item size {itemsize}")
        self.array = array
        ndim = array.ndim
        self._shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
        self._strides = (ctypes.c_int64 * max(ndim, 1))(*(s // itemsize for s in array.strides))
        self.struct = DLTensor(
            data=array.ctypes.data,
            device=DLDevice(kDLCPU, 0),
            ndim=ndim,
            dtype=_dl_dtype(array.dtype, raw_bf16),
            shape=ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64)),
            strides=ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64)),
            byte_offset=0,
        )

    @property
    def address(self) -> int:
        return ctypes.addressof(self.struct)


TensorLike = Any  # a numpy array or any object with __dlpack__ / __dlpack_device__
StreamLike = Union[None, int, Any]  # None, a cudaStream_t as int, or an object with .cuda_stream


def device_of(obj: TensorLike) -> tuple[int, int]:
    if isinstance(obj, np.ndarray):
        return (kDLCPU, 0)
    if hasattr(obj, "__dlpack_device__"):
        device_type, device_id = obj.__dlpack_device__()
        return (int(device_type), int(device_id))
    raise TypeError(f"{type(obj).__name__} is neither a numpy array nor a DLPack tensor (__dlpack__)")


def resolve_stream(stream: StreamLike, tensors: Sequence[Optional[TensorLike]],
                   cuda_device: Optional[int] = None) -> int:
    """The cudaStream_t to launch on: the given one, else torch's current stream when the
    tensors are CUDA torch tensors or `cuda_device` is given and torch is loaded (the
    caller's stream), else 0 (the default stream)."""
    if stream is not None:
        return int(getattr(stream, "cuda_stream", stream))
    torch = sys.modules.get("torch")
    if cuda_device is not None and torch is not None:
        return int(torch.cuda.current_stream(cuda_device).cuda_stream)
    for t in tensors:
        if t is None or isinstance(t, np.ndarray):
            continue
        device_type, device_id = device_of(t)
        if device_type == kDLCUDA and torch is not None and isinstance(t, torch.Tensor):
            return int(torch.cuda.current_stream(device_id).cuda_stream)
    return 0


def tensor_arg(obj: Optional[TensorLike], stream: int, keep: list, *, writable: bool = False,
               raw_bf16: bool = False) -> Union[None, int, Any]:
    """What the SWIG layer takes for a DLTensor argument; ``keep`` holds what must outlive the call."""
    if obj is None:
        return None
    if isinstance(obj, np.ndarray):
        host = HostTensor(obj, writable=writable, raw_bf16=raw_bf16)
        keep.append(host)
        return host.address
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"{type(obj).__name__} is neither a numpy array nor a DLPack tensor (__dlpack__)")
    device_type, _ = device_of(obj)
    if device_type in (kDLCUDA, kDLCUDAManaged):
        # DLPack reserves 0; 1 names the legacy default stream.
        capsule = obj.__dlpack__(stream=stream if stream != 0 else 1)
    else:
        capsule = obj.__dlpack__()
    keep.append(capsule)
    return capsule
