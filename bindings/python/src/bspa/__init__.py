"""bspa — paged KV cache, prefix caching and block-sparse prefill attention.

Python binding of the bspa C library (libbspa). Host data are numpy arrays; device
tensors are any object with ``__dlpack__`` (torch, cupy, jax), used on the caller's
stream (torch's current stream unless ``stream=`` says otherwise).

    import numpy as np, bspa
    with bspa.Pool(num_kv_heads=2, head_dim=64, page_size=16, num_pages=64, dtype="f32") as pool:
        seq = pool.sequence()
        cached = seq.match(prompt)             # tokens reused from the prefix cache
        seq.append(prompt[cached:])
        with pool.batch([seq], [len(prompt) - cached]) as batch:
            pool.kv_write(batch, 0, k, v)
            out = pool.prefill(batch, 0, bspa.Layout.dense(4), q, scale=0.125)
        seq.commit(len(prompt))
"""

from __future__ import annotations

from . import _bspa
from ._core import (DEFAULT_MEMORY_BYTES, Batch, DeviceAllocationCounts, KVTensor, Layout, Pool, PoolInfo, PoolStats,
                    ReusableBatch, Sequence, SeqInfo, device_allocation_counts, fp8_e4m3_to_float32, kv_write,
                    prefill, prefill_paged, prefill_workspace_bytes)
from ._errors import (BspaError, BufferTooSmallError, CudaError, DeviceMismatchError,
                      DtypeMismatchError, InternalError, InvalidArgumentError, InvalidStateError,
                      NoDeviceError, NotSupportedError, NullPointerError, OutOfMemoryError,
                      OutOfPagesError, OutOfRangeError, ResourceError, ShapeMismatchError,
                      VersionError, error_for)
from ._tensor import kDLCPU, kDLCUDA
from ._transfer import KV_K, KV_V, KvExport, KvImport, PoolMemory


def _check_abi() -> None:
    built_for = _bspa.bspa_py_header_abi_version()
    loaded = _bspa.bspa_abi_version()
    if loaded != built_for:
        raise VersionError(_bspa.BSPA_ERR_VERSION,
                           f"libbspa has ABI version {loaded}, this binding was built for {built_for}: "
                           f"rebuild the binding against the library it loads")


_check_abi()

ABI_VERSION: int = _bspa.bspa_py_header_abi_version()
__version__: str = _bspa.bspa_version_string()


def version() -> str:
    """The loaded library's version string, e.g. "0.1.0"."""
    return _bspa.bspa_version_string()


def build_info() -> str:
    """What the loaded library was compiled with (backends, CUDA arches, dtypes)."""
    return _bspa.bspa_build_info()


def device_count(device: str = "cuda") -> int:
    """Number of devices of a kind: 'cpu' (1) or 'cuda' (0 without a GPU or driver)."""
    from ._core import _device
    from ._errors import check
    status, count = _bspa.bspa_device_count(_device(device)[0])
    check(status)
    return int(count)


__all__ = [
    "ABI_VERSION", "DEFAULT_MEMORY_BYTES", "Batch", "BspaError", "BufferTooSmallError", "CudaError",
    "DeviceAllocationCounts", "DeviceMismatchError",
    "DtypeMismatchError", "InternalError", "InvalidArgumentError", "InvalidStateError", "KV_K", "KV_V", "KVTensor", "KvExport", "KvImport", "Layout",
    "NoDeviceError", "NotSupportedError", "NullPointerError", "OutOfMemoryError", "OutOfPagesError",
    "OutOfRangeError", "Pool", "PoolInfo", "PoolMemory", "PoolStats", "ResourceError", "ReusableBatch", "SeqInfo", "Sequence", "ShapeMismatchError",
    "VersionError", "build_info", "device_allocation_counts", "device_count", "error_for", "fp8_e4m3_to_float32", "kDLCPU", "kDLCUDA", "kv_write", "prefill",
    "prefill_paged", "prefill_workspace_bytes", "version",
]
