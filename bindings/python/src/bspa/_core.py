"""Pool, Sequence, Layout, Batch, ReusableBatch and the launches over the SWIG module."""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Optional, Sequence as Seq, TypeVar, Union

import numpy as np

from . import _bspa
from ._errors import InvalidStateError, check
from ._tensor import (DLTensor, StreamLike, TensorLike, bfloat16_dtype, device_of, float8_e4m3fn_dtype, kDLCPU,
                      kDLCUDA, resolve_stream, tensor_arg)

_DTYPES = {"f32": _bspa.BSPA_DTYPE_F32, "f16": _bspa.BSPA_DTYPE_F16, "bf16": _bspa.BSPA_DTYPE_BF16,
           "fp8_e4m3": _bspa.BSPA_DTYPE_FP8_E4M3}
_DTYPE_ALIASES = {"float32": "f32", "float": "f32", "float16": "f16", "half": "f16", "bfloat16": "bf16",
                  "fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3"}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}

DTypeLike = Union[str, np.dtype, type, object]

#: KV storage budget of a pool given neither ``num_pages`` nor ``memory_bytes``: 256 MiB.
DEFAULT_MEMORY_BYTES = 256 << 20
DeviceLike = Union[str, tuple]


def _dtype_name(dtype: DTypeLike) -> str:
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, (np.dtype, type)):
        name = np.dtype(dtype).name
    else:  # torch.bfloat16 and friends
        name = str(dtype).rsplit(".", 1)[-1]
    name = _DTYPE_ALIASES.get(name, name)
    if name not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of f32, f16, bf16, fp8_e4m3")
    return name


def _device(device: DeviceLike) -> tuple[int, int]:
    if isinstance(device, tuple):
        return (int(device[0]), int(device[1]))
    kind, _, index = str(device).partition(":")
    if kind == "cpu":
        return (kDLCPU, 0)
    if kind == "cuda":
        return (kDLCUDA, int(index or 0))
    raise ValueError(f"device {device!r} is neither 'cpu' nor 'cuda[:N]'")


def _tokens(tokens: Iterable[int]) -> np.ndarray:
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"tokens must be one-dimensional, got shape {arr.shape}")
    if arr.dtype != np.int32:
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"tokens must be integers, got {arr.dtype}")
        if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
            raise OverflowError("a token id does not fit in int32")
        arr = arr.astype(np.int32)
    return np.ascontiguousarray(arr)


def _closed(what: str) -> InvalidStateError:
    return InvalidStateError(_bspa.BSPA_ERR_INVALID_STATE, f"{what} is closed")


_H = TypeVar("_H", bound="_Handle")

# Guards every object's count of calls in flight and its closing flag (_using, close): held
# only to count, never across a C call, so it is never held while it is waited for.
_GATE = threading.Lock()


@contextmanager
def _using(*objs: "_Handle"):
    """The C handles of ``objs``, held open for one call into the library: the SWIG calls
    release the GIL, so another thread may close an object meanwhile, and its C object is
    then destroyed only when the last call using it returns (here). InvalidStateError for an
    object already closed. Every call on a pool's sequence, batch or transfer uses the pool
    too, so a pool is destroyed only when no call on anything of it runs."""
    with _GATE:
        for o in objs:
            if o._handle is None or o._closing:
                raise _closed(o._what)
        for o in objs:
            o._inflight += 1
        handles = tuple(o._handle for o in objs)
    try:
        yield handles
    finally:
        last = []
        with _GATE:
            for o in objs:
                o._inflight -= 1
                if o._closing and o._inflight == 0:
                    last.append(o)
        for o in last:
            o._finish_close()


class _Handle:
    """The lifetime every bspa object shares, written once: ``close()`` (idempotent, any
    thread; what it frees is the subclass's ``_release``), use as a context manager, close
    on garbage collection, and ``_using``, the C handle held open for a call."""

    _what = "handle"  # the object's name in the "... is closed" message
    _handle = None
    _inflight = 0  # calls using it that run in the library now (_using)
    _closing = False  # close() was called: later calls raise; _release runs once none is in flight

    def _release(self) -> None:
        """Frees ``self._handle`` (and what depends on it); runs once, with no call in flight."""
        raise NotImplementedError

    def _may_finalize(self) -> bool:
        """Whether garbage collection may still close it (the owner not gone first)."""
        return True

    def close(self) -> None:
        """Closes it (idempotent; any thread). A call another thread is running on it (or, for
        a pool, on anything of it) finishes first: the C object is destroyed when the last such
        call returns, so no call reads freed memory. Calls made after close() raise
        InvalidStateError."""
        with _GATE:
            if self._handle is None or self._closing:
                return  # closed, or another thread is closing it: destroyed once
            self._closing = True
            now = self._inflight == 0
        if now:
            self._finish_close()

    def _finish_close(self) -> None:
        try:
            self._release()
        finally:
            self._handle = None

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None and self._may_finalize():
            self.close()

    @property
    def closed(self) -> bool:
        return self._handle is None or self._closing


def _handle_array(handles) -> np.ndarray:
    """C handles as the uintp array the SWIG batch functions take."""
    return np.array([int(h) for h in handles], dtype=np.uintp)


class _PoolStorage:
    """Owns the C pool. The :class:`Pool` holds one reference and every numpy view from
    :meth:`Pool.kv` holds another, so the storage is destroyed only when the pool is
    closed *and* the last view is gone: a view read after ``close()`` reads live memory,
    never freed memory (docs/design.md, "Lifetimes in the bindings")."""

    __slots__ = ("raw", "children", "__weakref__")

    def __init__(self, raw) -> None:
        self.raw = raw
        # The pool's live C batches, KV exports and KV imports by address, each with its
        # destroy function. The C pool must outlive them, and garbage collection of a cycle
        # holding a pool and its children finalizes the objects in any order (the pool's
        # weak sets are cleared first): so every child is destroyed through here, and the
        # storage destroys those left before the pool (batches first, then the transfers).
        self.children: dict = {}

    @property
    def alive(self) -> bool:
        """Whether the C pool still exists (sequences are freed with it)."""
        return self.raw is not None

    def adopt(self, handle, destroy) -> None:
        self.children[int(handle)] = (handle, destroy)

    def owns(self, handle) -> bool:
        """Whether the child is alive (not destroyed with the pool already)."""
        return int(handle) in self.children

    def destroy_child(self, handle) -> None:
        """Destroys a child of this pool unless it is gone already (with the pool)."""
        entry = self.children.pop(int(handle), None)
        if entry is not None:
            entry[1](entry[0])

    # The default arguments keep the functions reachable at interpreter shutdown, when
    # module globals may already be gone.
    def __del__(self, _destroy=_bspa.bspa_pool_destroy, _batch=_bspa.bspa_batch_destroy) -> None:
        raw, self.raw = self.raw, None
        if raw is not None:
            children, self.children = self.children, {}
            # Batches before the transfers: a batch's destroy touches only its sequences.
            for handle, destroy in sorted(children.values(), key=lambda c: c[1] is not _batch):
                destroy(handle)
            _destroy(raw)


@dataclass(frozen=True)
class PoolStats:
    pages_total: int
    pages_free: int
    pages_cached: int
    pages_in_use: int
    num_sequences: int
    match_calls: int
    hits: int
    misses: int
    matched_tokens: int
    queried_tokens: int
    hashed_tokens: int
    published_pages: int
    evictions: int


@dataclass(frozen=True)
class PoolInfo:
    """What a pool was made with (bspa_pool_info): dtype is a name ("bf16", "fp8_e4m3", ...),
    page_bytes the KV bytes of one page over all layers, K and V."""
    device_type: int
    device_id: int
    dtype: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    num_pages: int
    page_bytes: int
    storage_bytes: int
    kv_scales_layers: int


@dataclass(frozen=True)
class SeqInfo:
    num_tokens: int
    num_computed: int
    num_cached: int
    num_pages: int


class Pool(_Handle):
    """A paged KV pool with its prefix cache.

    K and V of each layer are ``[num_pages, num_kv_heads, page_size, head_dim]``. The pool
    and its sequences are internally synchronised and may be used from any thread.
    Closing the pool closes its batches and sequences first; its storage is freed once
    no :meth:`kv` view of it is left.
    """

    def __init__(self, *, num_kv_heads: int, head_dim: int, num_layers: int = 1, page_size: int = 64,
                 num_pages: int = 0, memory_bytes: int = 0, dtype: Optional[DTypeLike] = None,
                 device: DeviceLike = "cpu", hash_seed: Optional[int] = None,
                 events_capacity: int = 0) -> None:
        """``dtype`` defaults to f32 on the CPU and bf16 on CUDA; with neither ``num_pages``
        nor ``memory_bytes`` the pool gets :data:`DEFAULT_MEMORY_BYTES` of KV storage.
        ``dtype="fp8_e4m3"`` stores K/V as e4m3 bytes with per-(layer, KV head) scales
        (:meth:`set_kv_scales`, required before a layer is written); its kv_write, q and out
        are bf16 or f16 (numpy float16, ml_dtypes.bfloat16, or uint16 read as bf16 bits).
        ``events_capacity > 0`` makes the pool record KV cache events for a router (see
        :meth:`drain_events_msgpack` and :mod:`bspa.events`)."""
        options = _bspa.bspa_pool_options()
        check(_bspa.bspa_pool_options_init(options))
        options.device_type, options.device_id = _device(device)
        if dtype is None:
            dtype = "f32" if options.device_type == kDLCPU else "bf16"
        if num_pages == 0 and memory_bytes == 0:
            memory_bytes = DEFAULT_MEMORY_BYTES
        self.dtype: str = _dtype_name(dtype)
        options.dtype = _DTYPES[self.dtype]
        options.num_layers = num_layers
        options.num_kv_heads = num_kv_heads
        options.head_dim = head_dim
        options.page_size = page_size
        options.num_pages = num_pages
        options.memory_bytes = memory_bytes
        if hash_seed is not None:
            options.hash_seed = hash_seed
        options.events_capacity = events_capacity  # KV cache events kept until drained; 0 = none
        status, handle = _bspa.bspa_pool_create(options)
        check(status)
        self._storage: Optional[_PoolStorage] = _PoolStorage(handle)
        self._handle = handle
        self.device: tuple[int, int] = (options.device_type, options.device_id)
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.page_size = page_size
        self._sequences: "weakref.WeakSet[Sequence]" = weakref.WeakSet()
        self._batches: "weakref.WeakSet[Batch]" = weakref.WeakSet()
        self._transfers: weakref.WeakSet = weakref.WeakSet()  # KvExport / KvImport (bspa._transfer)

    # -- lifetime (close, with, closed: _Handle) --------------------------------------
    _what = "pool"

    def _release(self) -> None:
        """Destroys the pool's batches and sequences and then the pool, whose storage is
        freed at once or, while :meth:`kv` views of it are alive, when the last of them
        goes. Every later call on the pool raises InvalidStateError."""
        for batch in list(self._batches):
            batch.close()
        for transfer in list(self._transfers):
            transfer.close()  # an open import aborts
        for seq in list(self._sequences):
            seq.close()
        self._storage = None  # the last reference unless a view holds one

    # -- objects ---------------------------------------------------------------------
    def sequence(self, salt: Optional[bytes] = None, extra_key: int = 0) -> "Sequence":
        """A new empty sequence. ``salt`` isolates tenants: it must come from the server
        (a tenant id), never from a request body (shared prefixes leak through timing)."""
        if isinstance(salt, str):
            salt = salt.encode()
        with _using(self) as (h,):
            status, handle = _bspa.bspa_py_seq_create(h, salt, extra_key)
        check(status)
        seq = Sequence(self, handle)
        self._sequences.add(seq)
        return seq

    def batch(self, sequences: Seq["Sequence"], query_lens: Iterable[int], stream: StreamLike = None) -> "Batch":
        """Plans one engine step: sequence i computes query_lens[i] new tokens after its
        computed ones. Token rows of q/k/v/out are the new tokens concatenated in order."""
        seqs, lens = self._step_args(sequences, query_lens)
        with _using(self, *seqs) as (h, *seq_handles):
            status, handle = _bspa.bspa_batch_create(h, _handle_array(seq_handles), lens, len(seqs),
                                                     self._stream(stream) or None)
        check(status)
        batch = Batch(self, handle, seqs, lens)
        self._batches.add(batch)
        for s in seqs:
            s._batches.add(batch)
        return batch

    def reusable_batch(self, *, max_seqs: int, max_tokens: int, max_seq_tokens: int, max_query_len: int = 0,
                       fixed_launch_shape: bool = False, max_decode_query_len: int = 0) -> "ReusableBatch":
        """A batch sized once from limits and re-planned every step with
        :meth:`ReusableBatch.plan` (bspa_batch_create_reusable): a CUDA pool allocates its
        device metadata, staging buffers and split workspace here, so later plans and
        launches allocate nothing. Limits: ``max_seqs`` sequences a plan may hold (on a CUDA
        pool at most 65535; the header's bspa_batch_options gives every range),
        ``max_tokens`` new tokens of a step, ``max_seq_tokens`` tokens (computed + new) of one
        sequence, ``max_query_len`` new tokens of one sequence (0: ``max_tokens``).
        ``fixed_launch_shape=True`` sizes every launch from the limits (a CUDA graph captured
        once replays after any later plan): q, out, k and v then have exactly ``max_tokens``
        rows (lse ``max_tokens`` columns), of which the step's tokens are the first
        ``num_tokens``; the rest are neither read nor written. ``max_decode_query_len``: the
        longest query of the rows the caller treats as decode rows (1 for plain decode; 0:
        no bound, i.e. 8); on CUDA only sequences of up to that many new tokens (at most 8)
        take the decode kernel, whose tile a fixed-shape batch otherwise sizes for
        ``min(max_query_len, 8)`` (a hint: every value is correct; the CPU ignores it).
        InvalidArgumentError names a limit out of its range."""
        options = _bspa.bspa_batch_options()
        check(_bspa.bspa_batch_options_init(options))
        options.max_seqs = max_seqs
        options.max_tokens = max_tokens
        options.max_seq_tokens = max_seq_tokens
        options.max_query_len = max_query_len
        options.fixed_launch_shape = int(bool(fixed_launch_shape))
        options.max_decode_query_len = max_decode_query_len
        with _using(self) as (h,):
            status, handle = _bspa.bspa_batch_create_reusable(h, options)
        check(status)
        batch = ReusableBatch(self, handle, int(max_seqs), int(max_tokens), int(max_seq_tokens),
                              int(max_query_len) or int(max_tokens), bool(fixed_launch_shape),
                              int(max_decode_query_len))
        self._batches.add(batch)  # closed with the pool, before it
        return batch

    # -- KV transfer between pools (bspa._transfer) ---------------------------------
    def memory(self):
        """Where the pages live and the fingerprint a peer must match (:class:`PoolMemory`)."""
        from ._transfer import _memory
        with _using(self) as (h,):
            return _memory(h)

    def export_kv(self, tokens: Iterable[int], salt: Optional[bytes] = None, extra_key: int = 0):
        """Pins every full cached page of the prompt for a transport to read
        (:class:`KvExport`; no n-1 cap; a miss exports 0 pages). Salt and extra key are the
        prompt's, as its sequences use them."""
        from ._transfer import KvExport
        return KvExport(self, tokens, salt, extra_key)

    def import_kv(self, tokens: Iterable[int], *, peer_fingerprint: int, peer_keys=None,
                  salt: Optional[bytes] = None, extra_key: int = 0):
        """Reserves pages for the full pages of the prompt this pool lacks (:class:`KvImport`),
        after checking the exporter's fingerprint (InvalidArgumentError when the pools' pages
        are not interchangeable) and, when given, its keys (``[n, 2]`` uint64)."""
        from ._transfer import KvImport
        return KvImport(self, tokens, peer_fingerprint=peer_fingerprint, peer_keys=peer_keys, salt=salt,
                        extra_key=extra_key)

    def _step_args(self, sequences: Seq["Sequence"], query_lens: Iterable[int]) -> tuple:
        """A step's sequences and their query lengths as int32, checked (the call that uses
        them holds them open: _using)."""
        seqs = list(sequences)
        lens = np.ascontiguousarray(np.asarray(list(query_lens), dtype=np.int32))
        if len(lens) != len(seqs):
            raise ValueError(f"{len(seqs)} sequences but {len(lens)} query lengths")
        for s in seqs:
            if s._pool is not self:
                raise ValueError("a sequence of another pool")
        return seqs, lens

    def _stream(self, stream: StreamLike) -> int:
        cuda_device = self.device[1] if self.device[0] == kDLCUDA else None
        return resolve_stream(stream, [], cuda_device)

    # -- queries ---------------------------------------------------------------------
    def stats(self) -> PoolStats:
        raw = _bspa.bspa_pool_stats_t()
        with _using(self) as (h,):
            check(_bspa.bspa_pool_stats(h, raw))
        return PoolStats(**{f: int(getattr(raw, f)) for f in PoolStats.__dataclass_fields__})

    def info(self) -> PoolInfo:
        """The pool's geometry, dtype and storage bytes (bspa_pool_info)."""
        raw = _bspa.bspa_pool_info_t()
        raw.version = _bspa.BSPA_POOL_INFO_VERSION
        with _using(self) as (h,):
            check(_bspa.bspa_pool_info(h, raw))
        fields = {f: int(getattr(raw, f)) for f in PoolInfo.__dataclass_fields__ if f != "dtype"}
        return PoolInfo(dtype=_DTYPE_NAMES.get(int(raw.dtype), str(raw.dtype)), **fields)

    def set_kv_scales(self, layer: int, k_scales, v_scales) -> None:
        """FP8 pools: the fp32 dequantization scales of one layer, one per KV head for K and
        for V (value = scale * e4m3; e.g. amax / 448 from calibration). Copied. Raises
        InvalidArgumentError for a wrong count or a scale that is not finite and > 0 (the
        layer keeps its previous scales), InvalidStateError on pools of other dtypes."""
        k = np.ascontiguousarray(k_scales, dtype=np.float32).reshape(-1)
        v = np.ascontiguousarray(v_scales, dtype=np.float32).reshape(-1)
        if k.size != v.size:
            raise ValueError(f"{k.size} K scales but {v.size} V scales")
        with _using(self) as (h,):
            check(_bspa.bspa_pool_set_kv_scales(h, layer, k, v, int(k.size)))

    def kv_scales(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """FP8 pools: one layer's K and V scales as float32 arrays ``[num_kv_heads]``;
        InvalidStateError when they were never set."""
        k = np.empty(self.num_kv_heads, dtype=np.float32)
        v = np.empty(self.num_kv_heads, dtype=np.float32)
        with _using(self) as (h,):
            check(_bspa.bspa_pool_get_kv_scales(h, layer, k, v, self.num_kv_heads))
        return k, v

    def check(self) -> None:
        """Verifies every invariant of the pool; raises InternalError if one is broken."""
        with _using(self) as (h,):
            check(_bspa.bspa_pool_check(h))

    def drain_events_msgpack(self, ts: Optional[float] = None, dp_rank: Optional[int] = 0) -> bytes:
        """Takes every queued KV cache event as one msgpack-encoded vLLM ``EventBatch``
        (``[ts, events, dp_rank]``, see bspa.h) and returns it; the queue is then empty.
        ``ts`` defaults to ``time.time()``, ``dp_rank=None`` is written as nil. Needs a
        pool made with ``events_capacity > 0``. :class:`bspa.events.KvEventPublisher`
        sends these batches over ZMQ."""
        if ts is None:
            ts = time.time()
        rank = -1 if dp_rank is None else int(dp_rank)
        size = 0
        while True:  # events recorded between the size query and the drain make it grow
            buf = bytearray(size)
            with _using(self) as (h,):
                status, size_needed = _bspa.bspa_pool_events_drain_msgpack(h, float(ts), rank, buf if size else None)
            if status == _bspa.BSPA_ERR_BUFFER_TOO_SMALL or (status == _bspa.BSPA_OK and not size):
                size = int(size_needed) + 4096
                continue
            check(status)
            return bytes(buf[:size_needed])

    @property
    def num_pages(self) -> int:
        return self.stats().pages_total

    def kv(self, layer: int):
        """Views of one layer's K and V storage, ``[num_pages, num_kv_heads, page_size,
        head_dim]``: numpy arrays for a CPU pool, :class:`KVTensor` DLPack tensors for a CUDA
        pool (``torch.from_dlpack(pool.kv(0)[0])``). A view keeps the storage alive: it stays
        readable after close() (the memory is freed with the last view). Reading it races
        with concurrent kv_write calls. bf16 CPU pools give ml_dtypes.bfloat16 arrays when
        ml_dtypes is installed, else the raw bits as uint16; fp8_e4m3 pools likewise
        ml_dtypes.float8_e4m3fn, else the e4m3 bytes as uint8 (:func:`fp8_e4m3_to_float32`
        decodes them; multiply by :meth:`kv_scales` for the values)."""
        if self.device[0] != kDLCPU:
            return self.kv_tensors(layer)
        k, v = DLTensor(), DLTensor()
        with _using(self) as (h,):
            check(_bspa.bspa_pool_kv(h, layer, ctypes.addressof(k), ctypes.addressof(v)))
            storage = self._storage
        np_dtype = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
                    "bf16": bfloat16_dtype() or np.dtype(np.uint16),
                    "fp8_e4m3": float8_e4m3fn_dtype() or np.dtype(np.uint8)}[self.dtype]
        views = []
        for t in (k, v):
            shape = tuple(t.shape[i] for i in range(t.ndim))
            count = int(np.prod(shape))
            buf = (ctypes.c_char * (count * np_dtype.itemsize)).from_address(t.data)
            buf._bspa_storage = storage  # numpy's .base chain keeps buf, buf keeps the storage
            views.append(np.frombuffer(buf, dtype=np_dtype).reshape(shape))
        return views[0], views[1]

    def kv_tensors(self, layer: int) -> tuple["KVTensor", "KVTensor"]:
        """One layer's K and V storage as :class:`KVTensor` objects (DLPack producers) on the
        pool's device, for ``torch.from_dlpack``, ``cupy.from_dlpack``, ``np.from_dlpack``."""
        if self.closed:
            raise _closed(self._what)
        if not 0 <= layer < self.num_layers:  # checked by the library too; a clear message here
            raise IndexError(f"layer = {layer} is outside [0, {self.num_layers})")
        return KVTensor(self, layer, 0), KVTensor(self, layer, 1)

    # -- launches --------------------------------------------------------------------
    def kv_write(self, batch: "Batch", layer: int, k: TensorLike, v: TensorLike, stream: StreamLike = None) -> None:
        """Writes the batch's new K and V, ``[T_new, num_kv_heads, head_dim]``, into their pages."""
        keep: list = []
        s = self._stream(stream)
        raw = self.dtype in ("bf16", "fp8_e4m3")  # uint16 arrays are bf16 bits
        args = _bspa.bspa_kv_write_args()
        check(_bspa.bspa_kv_write_args_init(args))
        args.layer = layer
        args.k_new = tensor_arg(k, s, keep, raw_bf16=raw)
        args.v_new = tensor_arg(v, s, keep, raw_bf16=raw)
        with batch._launch_lock, _using(self, batch) as (h, hb):
            check(_bspa.bspa_kv_write(h, hb, args, s or None))

    def prefill(self, batch: "Batch", layer: int, layout: "Layout", q: TensorLike, out: Optional[TensorLike] = None,
                *, scale: float, lse: Optional[TensorLike] = None, stream: StreamLike = None) -> TensorLike:
        """Block-sparse causal attention of the batch's new tokens over their cached prefix
        and themselves. q, out: ``[T_new, Hq, head_dim]``; lse: ``[Hq, T_new]`` float32.
        Returns ``out`` (allocated like ``q`` when omitted, for numpy and torch)."""
        if out is None:
            out = _empty_like(q)
        keep: list = []
        s = self._stream(stream)
        raw = self.dtype in ("bf16", "fp8_e4m3")  # uint16 arrays are bf16 bits
        args = _bspa.bspa_prefill_args()
        check(_bspa.bspa_prefill_args_init(args))
        args.layer = layer
        args.q = tensor_arg(q, s, keep, raw_bf16=raw)
        args.out = tensor_arg(out, s, keep, writable=True, raw_bf16=raw)
        args.lse = tensor_arg(lse, s, keep, writable=True)
        args.scale = float(scale)
        with batch._launch_lock, _using(self, batch, layout) as (h, hb, hl):
            args.layout = hl
            check(_bspa.bspa_prefill(h, hb, args, s or None))
        return out


class KVTensor:
    """K (``which = 0``) or V of one layer of a pool's storage as a DLPack tensor,
    ``[num_pages, num_kv_heads, page_size, head_dim]`` in the pool's dtype on its device.
    It and every tensor made from it hold the pool's storage: they stay valid after the
    pool is closed, and the memory is freed with the last of them.

    Streams: the storage carries no pending work of its own. ``__dlpack__`` does not wait
    on anything; order ``kv_write`` and the consumer's reads on your streams as usual (bspa
    launches on torch's current stream unless told otherwise)."""

    def __init__(self, pool: "Pool", layer: int, which: int) -> None:
        self._storage = pool._storage
        self._layer, self._which = int(layer), int(which)
        self.device: tuple[int, int] = pool.device
        self.dtype: str = pool.dtype
        self.shape: tuple[int, ...] = (pool.num_pages, pool.num_kv_heads, pool.page_size, pool.head_dim)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, *, stream: Optional[int] = None, max_version: Optional[tuple] = None,
                   dl_device: Optional[tuple] = None, copy: Optional[bool] = None):
        if copy:
            raise BufferError("KVTensor exports the pool's storage itself; copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != tuple(self.device):
            raise BufferError(f"KVTensor lives on device {self.device}, not {tuple(dl_device)}")
        result = _bspa.bspa_py_kv_capsule(self._storage.raw, self._layer, self._which, self._storage)
        if isinstance(result, int):
            check(result)
        return result

    def __repr__(self) -> str:
        return f"KVTensor({'KV'[self._which]}, layer {self._layer}, shape {self.shape}, {self.dtype}, device {self.device})"


def _empty_like(q: TensorLike) -> TensorLike:
    if isinstance(q, np.ndarray):
        return np.empty_like(q)
    if hasattr(q, "new_empty"):  # torch
        return q.new_empty(q.shape)
    raise TypeError("pass `out` explicitly for tensors other than numpy arrays and torch tensors")


class Sequence(_Handle):
    """A request's token sequence and its pages. Made by :meth:`Pool.sequence`."""

    _what = "sequence"

    def __init__(self, pool: Pool, handle) -> None:
        self._pool = pool  # keeps the pool alive at least as long as the sequence
        self._storage = pool._storage  # whether the C pool (which frees its sequences) is still there
        self._handle = handle
        self._batches: "weakref.WeakSet[Batch]" = weakref.WeakSet()

    def _release(self) -> None:
        """Releases the pages (published ones stay cached); closes batches using it."""
        for batch in list(self._batches):
            batch.close()
        _bspa.bspa_seq_destroy(self._handle)
        self._storage = None  # a closed sequence keeps no storage alive

    def _may_finalize(self) -> bool:
        # Not once the C pool is gone (it freed the sequence), whichever of the pool and its
        # storage garbage collection finalized first.
        return self._pool._handle is not None and self._storage.alive

    def match(self, tokens: Iterable[int]) -> int:
        """Pins the longest cached page-aligned prefix of the prompt (never its last token)
        and returns its length in tokens; 0 on a miss. Only on an empty sequence."""
        toks = _tokens(tokens)
        with _using(self._pool, self) as (_, h):
            status, cached = _bspa.bspa_seq_match(h, toks)
        check(status)
        return int(cached)

    def append(self, tokens: Iterable[int]) -> None:
        """Adds tokens and reserves their pages; all or nothing (OutOfPagesError changes nothing)."""
        toks = _tokens(tokens)
        with _using(self._pool, self) as (_, h):
            check(_bspa.bspa_seq_append(h, toks))

    def commit(self, computed: int) -> None:
        """Tokens [0, computed) now hold valid KV; full pages are published."""
        with _using(self._pool, self) as (_, h):
            check(_bspa.bspa_seq_commit(h, computed))

    def pages(self) -> np.ndarray:
        count = 0
        while True:  # another thread's append between sizing and copying makes it grow
            pages = np.empty(count, dtype=np.int32)
            with _using(self._pool, self) as (_, h):
                status, needed = _bspa.bspa_seq_pages(h, pages if count else None)
            if status == _bspa.BSPA_ERR_BUFFER_TOO_SMALL or (status == _bspa.BSPA_OK and needed > count):
                count = int(needed)
                continue
            check(status)
            return pages[:needed]

    def info(self) -> SeqInfo:
        raw = _bspa.bspa_seq_info_t()
        with _using(self._pool, self) as (_, h):
            check(_bspa.bspa_seq_info(h, raw))
        return SeqInfo(int(raw.num_tokens), int(raw.num_computed), int(raw.num_cached), int(raw.num_pages))

    @property
    def num_tokens(self) -> int:
        return self.info().num_tokens

    @property
    def num_computed(self) -> int:
        return self.info().num_computed


class Layout(_Handle):
    """Which key blocks each query block of each head may see. Immutable; shareable
    across threads. Build with :meth:`strided`, :meth:`dense` or :meth:`csr`."""

    _what = "layout"

    def __init__(self, handle, num_heads: int) -> None:
        self._handle = handle
        self.num_heads = num_heads

    @classmethod
    def strided(cls, *, num_heads: int = 32, num_heads_total: Optional[int] = None, head_begin: int = 0,
                block_size: int = 64, local_blocks: int = 16, vert_stride: int = 8,
                homo_head: bool = False) -> "Layout":
        """Phi-3-small's local + vertical-stride rule over this rank's heads
        [head_begin, head_begin + num_heads) of num_heads_total (default num_heads)."""
        o = _bspa.bspa_layout_strided_options()
        check(_bspa.bspa_layout_strided_options_init(o))
        o.num_heads = num_heads
        o.num_heads_total = num_heads if num_heads_total is None else num_heads_total
        o.head_begin = head_begin
        o.block_size = block_size
        o.local_blocks = local_blocks
        o.vert_stride = vert_stride
        o.homo_head = int(bool(homo_head))
        status, handle = _bspa.bspa_layout_create_strided(o)
        check(status)
        return cls(handle, num_heads)

    @classmethod
    def dense(cls, num_heads: int) -> "Layout":
        """Dense causal attention."""
        status, handle = _bspa.bspa_layout_create_dense(num_heads)
        check(status)
        return cls(handle, num_heads)

    @classmethod
    def csr(cls, crow: np.ndarray, col: np.ndarray, *, block_size: int) -> "Layout":
        """A caller's own layout: ``crow`` ``[num_heads, num_block_rows + 1]`` absolute
        offsets into ``col`` (key blocks, ascending per row, diagonal included)."""
        crow = np.ascontiguousarray(crow, dtype=np.int32)
        col = np.ascontiguousarray(col, dtype=np.int32).reshape(-1)
        if crow.ndim != 2 or crow.shape[1] < 2:
            raise ValueError(f"crow must be [num_heads, num_block_rows + 1], got shape {crow.shape}")
        if crow.size and (crow.min() < 0 or crow.max() > col.size):
            raise ValueError(f"crow offsets must lie in [0, len(col) = {col.size}]")
        num_heads, rows = crow.shape[0], crow.shape[1] - 1
        status, handle = _bspa.bspa_layout_create_csr(num_heads, block_size, rows, crow, col)
        check(status)
        return cls(handle, num_heads)

    def allowed(self, head: int, q_block: int, k_block: int) -> bool:
        with _using(self) as (h,):
            status, allowed = _bspa.bspa_layout_allowed(h, head, q_block, k_block)
        check(status)
        return bool(allowed)

    def _release(self) -> None:
        _bspa.bspa_layout_destroy(self._handle)


class Batch(_Handle):
    """One engine step's plan. Use it from one thread (one stream) at a time; it keeps its
    sequences alive and is closed before any of them."""

    _what = "batch"

    def __init__(self, pool: Pool, handle, sequences: list, query_lens: np.ndarray) -> None:
        self._pool = pool
        # The storage, not only the pool object, so the C pool outlives the C batch
        # whatever order garbage collection finalizes them in (_PoolStorage.children).
        self._storage = pool._storage
        self._storage.adopt(handle, _bspa.bspa_batch_destroy)
        self._handle = handle
        # One call at a time on a batch (bspa.h): a plan replaces what a launch reads.
        self._launch_lock = threading.Lock()
        self.sequences = tuple(sequences)
        self.query_lens = tuple(int(x) for x in query_lens)
        self.num_tokens = sum(self.query_lens)

    def _release(self) -> None:
        """Destroys the plan. The caller makes sure no launch using it still runs on a device."""
        storage, self._storage = self._storage, None  # a closed batch holds no storage
        storage.destroy_child(self._handle)


class ReusableBatch(Batch):
    """A batch re-planned every step (:meth:`Pool.reusable_batch`): :meth:`plan` replaces
    its plan, and :meth:`Pool.kv_write` / :meth:`Pool.prefill` take it like a :class:`Batch`.
    Launches before the first plan raise InvalidStateError. A plan holds references to its
    sequences: closing one of them does not close the batch (its pages stay out of reuse
    until the next plan or :meth:`close`). Closing the pool closes the batch first. One
    thread (one stream) at a time; plan and launch on the same stream."""

    def __init__(self, pool: Pool, handle, max_seqs: int, max_tokens: int, max_seq_tokens: int,
                 max_query_len: int, fixed_launch_shape: bool, max_decode_query_len: int = 0) -> None:
        super().__init__(pool, handle, [], np.zeros(0, dtype=np.int32))
        self.max_seqs, self.max_tokens, self.max_seq_tokens = max_seqs, max_tokens, max_seq_tokens
        self.max_query_len = max_query_len
        self.fixed_launch_shape = fixed_launch_shape
        self.max_decode_query_len = max_decode_query_len
        self.planned = False

    def plan(self, sequences: Seq["Sequence"], query_lens: Iterable[int], stream: StreamLike = None) -> None:
        """Plans a step (bspa_batch_plan), with :meth:`Pool.batch`'s meaning of the
        arguments. A step past a limit raises OutOfRangeError naming it; a failed plan keeps
        the previous one (and these attributes) as they were."""
        seqs, lens = self._pool._step_args(sequences, query_lens)
        with self._launch_lock, _using(self._pool, self, *seqs) as (_, h, *seq_handles):
            check(_bspa.bspa_batch_plan(h, _handle_array(seq_handles), lens, len(seqs),
                                        self._pool._stream(stream) or None))
        self.sequences = tuple(seqs)
        self.query_lens = tuple(int(x) for x in lens)
        self.num_tokens = sum(self.query_lens)
        self.planned = True

    @property
    def rows(self) -> int:
        """Rows the launch tensors must have: ``max_tokens`` with fixed launch shapes,
        else the step's ``num_tokens``."""
        return self.max_tokens if self.fixed_launch_shape else self.num_tokens


class DeviceAllocationCounts(NamedTuple):
    allocations: int
    frees: int


def device_allocation_counts() -> DeviceAllocationCounts:
    """Process-wide counts of the device and pinned-host allocations bspa has made and
    freed (bspa_device_allocation_counts): equal before and after a steady-state step
    that allocates nothing."""
    status, allocations, frees = _bspa.bspa_device_allocation_counts()
    check(status)
    return DeviceAllocationCounts(int(allocations), int(frees))


def kv_write(pool: Pool, batch: Batch, layer: int, k: TensorLike, v: TensorLike, stream: StreamLike = None) -> None:
    """:meth:`Pool.kv_write` as a function."""
    pool.kv_write(batch, layer, k, v, stream)


def prefill(pool: Pool, batch: Batch, layer: int, layout: Layout, q: TensorLike, out: Optional[TensorLike] = None,
            *, scale: float, lse: Optional[TensorLike] = None, stream: StreamLike = None) -> TensorLike:
    """:meth:`Pool.prefill` as a function."""
    return pool.prefill(batch, layer, layout, q, out, scale=scale, lse=lse, stream=stream)


def prefill_paged(q: TensorLike, k_pages: TensorLike, v_pages: TensorLike, block_table: TensorLike,
                  query_starts: TensorLike, context_lens: TensorLike, layout: Layout, *, scale: float,
                  out: Optional[TensorLike] = None, lse: Optional[TensorLike] = None,
                  max_query_len: Optional[int] = None, workspace: Optional[TensorLike] = None,
                  k_scale: Optional[TensorLike] = None, v_scale: Optional[TensorLike] = None,
                  max_decode_query_len: int = 0, stream: StreamLike = None) -> TensorLike:
    """Bring-your-own cache: the same attention over caller-owned pages
    ``[num_pages, num_kv_heads, page_size, head_dim]``. block_table int32
    ``[num_seqs, max_pages]``, query_starts int32 ``[num_seqs + 1]``, context_lens int32
    ``[num_seqs]``, all on q's device. ``max_query_len`` defaults to the largest query
    length (read from query_starts, which must then be host memory). ``workspace``,
    optional: uint8 ``[n]`` scratch on q's device, 16-byte aligned, n >=
    :func:`prefill_workspace_bytes`; it lets a CUDA launch split long key ranges across
    SMs, and launches sharing it must not overlap.

    FP8 pages: k_pages/v_pages of e4m3 bytes (``torch.float8_e4m3fn``, numpy uint8 or
    ml_dtypes.float8_e4m3fn) with ``k_scale`` and ``v_scale``, float32 ``[num_kv_heads]`` on
    the same device (value = scale[h] * e4m3); q and out are then bf16 or f16.

    ``max_decode_query_len``: the longest query among the sequences the caller treats as
    decode rows (vLLM's ``max_decode_query_len``; 1 for plain decode; 0, the default: no
    bound, i.e. 8). On CUDA only sequences of up to that many new tokens (at most 8) take
    the decode kernel, whose tile it sizes, and longer ones the prefill kernel: a mixed
    launch over device metadata otherwise sizes the decode tile for 8 new tokens. A hint:
    any value gives a correct result (the CPU ignores it); a negative one raises
    ``InvalidArgumentError``."""
    if out is None:
        out = _empty_like(q)
    if max_query_len is None:
        if device_of(query_starts)[0] != kDLCPU:
            raise ValueError("pass max_query_len when query_starts lives on a device")
        starts = np.asarray(query_starts)
        max_query_len = int(np.diff(starts).max()) if starts.size > 1 else 0
    keep: list = []
    s = resolve_stream(stream, [q, out, k_pages])
    args = _bspa.bspa_paged_args()
    check(_bspa.bspa_paged_args_init(args))
    args.q = tensor_arg(q, s, keep)
    args.out = tensor_arg(out, s, keep, writable=True)
    args.lse = tensor_arg(lse, s, keep, writable=True)
    args.workspace = tensor_arg(workspace, s, keep, writable=True)
    args.k_pages = tensor_arg(k_pages, s, keep)
    args.v_pages = tensor_arg(v_pages, s, keep)
    args.block_table = tensor_arg(block_table, s, keep)
    args.query_starts = tensor_arg(query_starts, s, keep)
    args.context_lens = tensor_arg(context_lens, s, keep)
    args.k_scale = tensor_arg(k_scale, s, keep)
    args.v_scale = tensor_arg(v_scale, s, keep)
    args.max_query_len = int(max_query_len)
    args.max_decode_query_len = int(max_decode_query_len)
    args.scale = float(scale)
    with _using(layout) as (hl,):
        args.layout = hl
        check(_bspa.bspa_prefill_paged(args, s or None))
    return out


def prefill_workspace_bytes(device: DeviceLike, head_dim: int) -> int:
    """Bytes of :func:`prefill_paged`'s optional ``workspace`` for launches on ``device``
    ('cpu', 'cuda[:N]' or a DLPack ``(device_type, device_id)``) with ``head_dim``: 0 where
    no launch uses one (CPU; GPUs or head dims without the Hopper kernel)."""
    device_type, device_id = _device(device)
    status, size = _bspa.bspa_prefill_workspace_bytes(device_type, device_id, head_dim)
    check(status)
    return int(size)


def fp8_e4m3_to_float32(codes) -> np.ndarray:
    """Decodes e4m3 (e4m3fn) bytes, any uint8 array, to float32 (NaN for 0x7f / 0xff):
    the values of an fp8 pool's pages before their scale."""
    c = np.asarray(codes, dtype=np.uint8)
    sign = np.where(c & 0x80, -1.0, 1.0).astype(np.float32)
    exp = ((c >> 3) & 0xF).astype(np.int32)
    mant = (c & 0x7).astype(np.float32)
    value = np.where(exp == 0, mant * np.float32(2.0 ** -9),
                     (1.0 + mant / 8.0) * np.exp2((exp - 7).astype(np.float32))).astype(np.float32)
    value = np.where((exp == 15) & (mant == 7), np.float32(np.nan), value)
    return (sign * value).astype(np.float32)
