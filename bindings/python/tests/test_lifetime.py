"""Lifetimes across the binding: what a view or a handle keeps alive."""

import gc
import weakref

import numpy as np
import pytest

import bspa
from child import run_child


def test_kv_view_read_after_close_reads_live_memory():
    # Issue 22's reproduction: before views kept the storage alive this read freed memory
    # (8 MiB per tensor, an munmap'd block) and the interpreter died with SIGSEGV. Run in a
    # child so a regression fails this test instead of killing pytest.
    code = """
        import gc, bspa
        with bspa.Pool(num_kv_heads=2, head_dim=64, page_size=64, num_pages=256, dtype="f32") as pool:
            k, v = pool.kv(0)
            k[:] = 1.0
        gc.collect()
        print(k.sum(), v.shape)
    """
    run = run_child(code)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr}"
    assert float(run.stdout.split()[0]) == 256 * 2 * 64 * 64


def test_view_keeps_storage_until_the_last_view_goes():
    pool = bspa.Pool(num_kv_heads=2, head_dim=8, page_size=16, num_pages=8, dtype="f32")
    storage = weakref.ref(pool._storage)
    k, v = pool.kv(0)
    row = k[3, 1]  # a slice of a view holds it too
    pool.close()
    with pytest.raises(bspa.InvalidStateError):
        pool.kv(0)  # the closed pool makes no new views
    del k, v
    gc.collect()
    assert storage() is not None, "a slice of a view still reads the storage"
    row[:] = 2.0
    assert float(row.sum()) == 2.0 * 16 * 8
    del row
    gc.collect()
    assert storage() is None, "the storage outlived its last view"


def test_storage_freed_at_close_without_views():
    pool = bspa.Pool(num_kv_heads=2, head_dim=8, page_size=16, num_pages=8, dtype="f32")
    storage = weakref.ref(pool._storage)
    pool.close()
    assert storage() is None


def test_sequence_and_batch_keep_the_pool_object_alive():
    pool = bspa.Pool(num_kv_heads=2, head_dim=8, page_size=16, num_pages=8, dtype="f32")
    seq = pool.sequence()
    seq.append(np.arange(20))
    batch = pool.batch([seq], [20])
    del pool
    gc.collect()
    # The pool object lives on through the sequence; using both is still valid.
    assert seq.info().num_tokens == 20 and batch.num_tokens == 20
    batch.close()
    seq.close()


def test_dlpack_views_of_the_storage_keep_it_alive():
    # The DLPack path that CUDA pools use for kv(), exercised on a CPU pool through numpy.
    pool = bspa.Pool(num_kv_heads=2, head_dim=8, page_size=16, num_pages=8, dtype="f32")
    storage = weakref.ref(pool._storage)
    seq = pool.sequence()
    seq.append(np.arange(20))
    k_new = np.arange(20 * 2 * 8, dtype=np.float32).reshape(20, 2, 8)
    with pool.batch([seq], [20]) as b:
        pool.kv_write(b, 0, k_new, -k_new)
    pages = seq.pages()
    kt, vt = pool.kv_tensors(0)
    assert kt.__dlpack_device__() == (bspa.kDLCPU, 0) and kt.shape == (8, 2, 16, 8)
    k, v = np.from_dlpack(kt), np.from_dlpack(vt)
    assert k.shape == (8, 2, 16, 8) and k.dtype == np.float32
    # Token 17: page 1, slot 1.
    assert np.array_equal(k[pages[1], :, 1], k_new[17]) and np.array_equal(v[pages[1], :, 1], -k_new[17])
    del kt, vt
    pool.close()
    gc.collect()
    assert storage() is not None and float(k[pages[1], 1, 1, 0]) == float(k_new[17, 1, 0])
    del k, v
    gc.collect()
    assert storage() is None, "the storage outlived its last DLPack view"


def test_an_unconsumed_capsule_releases_the_storage():
    pool = bspa.Pool(num_kv_heads=2, head_dim=8, page_size=16, num_pages=8, dtype="f32")
    storage = weakref.ref(pool._storage)
    kt, _ = pool.kv_tensors(0)
    capsule = kt.__dlpack__()
    del kt, _
    pool.close()
    gc.collect()
    assert storage() is not None
    del capsule
    gc.collect()
    assert storage() is None


def test_kv_tensors_refuses_a_bad_layer_and_a_closed_pool():
    pool = bspa.Pool(num_kv_heads=2, head_dim=8, page_size=16, num_pages=8, dtype="f32")
    with pytest.raises(IndexError):
        pool.kv_tensors(1)
    pool.close()
    with pytest.raises(bspa.InvalidStateError):
        pool.kv_tensors(0)
