"""KV transfer between pools (bspa.h, "KV transfer between pools"): the memory description
a transport registers, exports that pin a prompt's cached pages, and two-phase imports.

bspa moves no bytes: the runtime's transport (NIXL, examples/nixl) copies page_bytes per
(block, region) between the addresses these objects list. Descriptor lists are
``(addr, len, device_id)`` tuples, the form NIXL's ``get_xfer_descs`` / ``prep_xfer_dlist``
take; :meth:`PoolMemory.registration` adds the fourth field ``register_memory`` wants.

    # exporter                                   # importer
    mem = pool.memory()                          peer = bspa.PoolMemory.from_dict(msg["memory"])
    with pool.export_kv(prompt) as exp:          with pool.import_kv(prompt[:exp_tokens],
        send(mem.to_dict(), exp.pages,                   peer_fingerprint=peer.fingerprint,
             exp.keys)                                   peer_keys=keys) as imp:
        wait_until_the_peer_is_done()                src = peer.page_descs(peer_pages[imp.blocks])
                                                     dst = imp.descs()
                                                     transfer(src -> dst)  # raises: abort
                                                 # clean exit: commit (published, matchable)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable, Optional

import numpy as np

from . import _bspa
from ._core import _Handle, _tokens, _using
from ._errors import check
from ._tensor import kDLCPU, kDLCUDA

if TYPE_CHECKING:
    from ._core import Pool

#: Which half of a layer's storage a region holds.
KV_K: int = _bspa.BSPA_KV_K
KV_V: int = _bspa.BSPA_KV_V


@dataclass(frozen=True)
class PoolMemory:
    """Where a pool's pages live (bspa_pool_memory). Region ``r = 2 * layer + kv`` (kv 0 =
    K, 1 = V) starts at ``base + r * region_bytes``; page ``p`` of region ``r`` is the
    ``page_bytes`` at ``base + (r * num_pages + p) * page_bytes``. Plain integers: send
    :meth:`to_dict` to the peer, which rebuilds it with :meth:`from_dict` to address the
    pages it reads or writes remotely."""

    device_type: int
    device_id: int
    num_regions: int
    base: int
    bytes: int
    region_bytes: int
    page_bytes: int
    num_pages: int
    fingerprint: int
    layout_version: int

    @property
    def nixl_mem_type(self) -> str:
        """NIXL's memory type: "DRAM" for a CPU pool, "VRAM" for a CUDA pool."""
        if self.device_type == kDLCUDA:
            return "VRAM"
        if self.device_type == kDLCPU:
            return "DRAM"
        raise ValueError(f"device type {self.device_type} has no NIXL memory type")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PoolMemory":
        return cls(**{f: int(d[f]) for f in cls.__dataclass_fields__})

    def regions(self, per_layer: bool = True) -> list[tuple[int, int, int]]:
        """``(addr, len, device_id)`` of each (layer, K/V) region, as vLLM registers them;
        ``per_layer=False``: the whole storage as one region. Empty without storage."""
        if self.num_regions == 0:
            return []
        if not per_layer:
            return [(self.base, self.bytes, self.device_id)]
        return [(self.base + r * self.region_bytes, self.region_bytes, self.device_id)
                for r in range(self.num_regions)]

    def registration(self, per_layer: bool = False) -> list[tuple[int, int, int, str]]:
        """The regions as NIXL's ``register_memory`` takes them: ``(addr, len, device_id, "")``."""
        return [(a, n, d, "") for a, n, d in self.regions(per_layer)]

    def page_address(self, layer: int, kv: int, page: int) -> int:
        """The first byte of ``page`` in layer ``layer``'s K (kv 0) or V (kv 1)."""
        if not 0 <= kv <= 1:
            raise ValueError(f"kv = {kv} is neither 0 (K) nor 1 (V)")
        r = 2 * int(layer) + kv
        if not 0 <= r < self.num_regions or not 0 <= int(page) < self.num_pages:
            raise IndexError(f"(layer {layer}, page {page}) is outside {self.num_regions // 2} layers of "
                             f"{self.num_pages} pages")
        return self.base + (r * self.num_pages + int(page)) * self.page_bytes

    def page_descs(self, pages: Iterable[int], layers: Optional[Iterable[int]] = None) -> list[tuple[int, int, int]]:
        """One ``(addr, page_bytes, device_id)`` per (page, region), pages in the order given
        and, for each page, its regions in order (layer 0 K, layer 0 V, layer 1 K, ...;
        ``layers`` picks some). Two sides that list their pages of the same blocks get
        descriptor lists that pair up index by index."""
        pages = np.asarray(list(pages) if not isinstance(pages, np.ndarray) else pages, dtype=np.int64)
        if pages.size and (pages.min() < 0 or pages.max() >= self.num_pages):
            raise IndexError(f"page ids {pages.min()}..{pages.max()} are outside [0, {self.num_pages})")
        regions = (np.arange(self.num_regions, dtype=np.int64) if layers is None else
                   np.array([2 * int(l) + kv for l in layers for kv in (0, 1)], dtype=np.int64))
        if regions.size and (regions.min() < 0 or regions.max() >= self.num_regions):
            raise IndexError(f"layers outside [0, {self.num_regions // 2})")
        addrs = self.base + (regions[None, :] * self.num_pages + pages[:, None]) * self.page_bytes
        return [(int(a), self.page_bytes, self.device_id) for a in addrs.reshape(-1)]


def _memory(pool_handle) -> PoolMemory:
    raw = _bspa.bspa_pool_memory_t()
    raw.version = _bspa.BSPA_POOL_MEMORY_VERSION
    check(_bspa.bspa_pool_memory(pool_handle, raw))
    return PoolMemory(**{f: int(getattr(raw, f)) for f in PoolMemory.__dataclass_fields__})


def _salt(salt) -> Optional[bytes]:
    return salt.encode() if isinstance(salt, str) else salt


class KvExport(_Handle):
    """A prompt's cached pages, pinned for a transport to read (bspa_kv_export_create).
    ``pages`` (int32) and ``keys`` (uint64 ``[n, 2]``, low and high halves) are in block
    order; ``num_tokens`` = pages x page_size tokens of the prompt are exported. Use it as a
    context manager, or call :meth:`close` when the peer has finished reading."""

    _what = "KV export"

    def __init__(self, pool: "Pool", tokens, salt=None, extra_key: int = 0) -> None:
        self._pool = pool
        toks = _tokens(tokens)
        with _using(pool) as (h,):  # the pool stays open until the pages are copied out
            status, handle = _bspa.bspa_py_kv_export_create(h, _salt(salt), int(extra_key), toks)
            check(status)
            # Destroyed through the pool's storage, so never after the C pool (_PoolStorage).
            self._storage = pool._storage
            self._storage.adopt(handle, _bspa.bspa_kv_export_destroy)
            self._handle = handle
            status, count = _bspa.bspa_py_kv_export_pages(handle, None, None, 0)
            check(status)
            self.pages = np.empty(count, dtype=np.int32)
            self.keys = np.empty((count, 2), dtype=np.uint64)
            status, _ = _bspa.bspa_py_kv_export_pages(handle, self.pages, self.keys, count)
            check(status)
        self.num_tokens: int = int(count) * pool.page_size
        pool._transfers.add(self)

    def descs(self, layers: Optional[Iterable[int]] = None) -> list[tuple[int, int, int]]:
        """The exported pages' descriptors in this pool (see :meth:`PoolMemory.page_descs`)."""
        return self._pool.memory().page_descs(self.pages, layers)

    def _release(self) -> None:
        """Releases the pins (the pages stay cached); :meth:`close` calls it."""
        storage, self._storage = self._storage, None  # a closed export keeps no storage alive
        storage.destroy_child(self._handle)  # a no-op once the pool destroyed it


class KvImport(_Handle):
    """Pages reserved for the blocks of a prompt this pool lacks (bspa_kv_import_create).
    ``blocks[i]`` of the prompt goes into ``pages[i]``; blocks ``[0, num_cached)`` were
    already here. Write them, then :meth:`commit` (they are published and match) or
    :meth:`abort` (they go back unpublished). As a context manager it commits on a clean
    exit and aborts when the block raises, like a database transaction; garbage collection
    of an open import aborts it."""

    _what = "KV import"

    def __init__(self, pool: "Pool", tokens, *, peer_fingerprint: int, peer_keys=None, salt=None,
                 extra_key: int = 0) -> None:
        self._pool = pool
        self._final_state = "aborted"
        toks = _tokens(tokens)
        keys = None
        if peer_keys is not None:
            keys = np.ascontiguousarray(np.asarray(peer_keys, dtype=np.uint64).reshape(-1, 2))
        with _using(pool) as (h,):  # as KvExport's
            status, handle = _bspa.bspa_py_kv_import_create(h, toks, _salt(salt), int(extra_key),
                                                            int(peer_fingerprint), keys,
                                                            0 if keys is None else int(keys.shape[0]))
            check(status)
            self._storage = pool._storage  # as KvExport's
            self._storage.adopt(handle, _bspa.bspa_kv_import_destroy)
            self._handle = handle
            status, count = _bspa.bspa_py_kv_import_pages(handle, None, None, 0)
            check(status)
            self.pages = np.empty(count, dtype=np.int32)
            self.blocks = np.empty(count, dtype=np.int64)
            status, _ = _bspa.bspa_py_kv_import_pages(handle, self.pages, self.blocks, count)
            check(status)
        info = self._info()
        self.num_blocks: int = int(info.num_blocks)
        self.num_cached: int = int(info.num_cached)
        self.published: Optional[int] = None
        pool._transfers.add(self)

    def _info(self):
        raw = _bspa.bspa_kv_import_info_t()
        raw.version = _bspa.BSPA_KV_IMPORT_INFO_VERSION
        with _using(self._pool, self) as (_, h):
            check(_bspa.bspa_kv_import_info(h, raw))
        return raw

    @property
    def state(self) -> str:
        """"reserved", "committed" or "aborted" (after close: what it ended as)."""
        if self.closed:
            return self._final_state
        return {_bspa.BSPA_KV_IMPORT_RESERVED: "reserved", _bspa.BSPA_KV_IMPORT_COMMITTED: "committed",
                _bspa.BSPA_KV_IMPORT_ABORTED: "aborted"}[int(self._info().state)]

    def descs(self, layers: Optional[Iterable[int]] = None) -> list[tuple[int, int, int]]:
        """The reserved pages' descriptors in this pool (see :meth:`PoolMemory.page_descs`),
        pairing index by index with ``peer_memory.page_descs(peer_pages[imp.blocks])``."""
        return self._pool.memory().page_descs(self.pages, layers)

    def commit(self) -> int:
        """The transport wrote every reserved page: publishes them; returns how many entered
        the prefix index. InvalidStateError after commit or abort."""
        with _using(self._pool, self) as (_, h):
            status, published = _bspa.bspa_kv_import_commit(h)
        check(status)
        self.published = int(published)
        return self.published

    def abort(self) -> None:
        """Frees the reserved pages unpublished. A second abort is a no-op."""
        with _using(self._pool, self) as (_, h):
            check(_bspa.bspa_kv_import_abort(h))

    def _release(self) -> None:
        """Aborts an open reservation and frees the import (:meth:`close`, idempotent)."""
        storage, self._storage = self._storage, None  # closed: no storage kept
        if not storage.owns(self._handle):  # destroyed with its pool (an aborted reservation)
            return
        raw = _bspa.bspa_kv_import_info_t()
        raw.version = _bspa.BSPA_KV_IMPORT_INFO_VERSION
        check(_bspa.bspa_kv_import_info(self._handle, raw))  # no call in flight: close waited
        self._final_state = "committed" if int(raw.state) == _bspa.BSPA_KV_IMPORT_COMMITTED else "aborted"
        storage.destroy_child(self._handle)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.closed and self.state == "reserved":
                if exc_type is None:
                    self.commit()
                else:
                    self.abort()
        finally:
            self.close()
