"""Lifetimes across the binding: what a view or a handle keeps alive."""

import gc
import os
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import bspa


def test_kv_view_read_after_close_reads_live_memory():
    # Issue 22's reproduction: before views kept the storage alive this read freed memory
    # (8 MiB per tensor, an munmap'd block) and the interpreter died with SIGSEGV. Run in a
    # child so a regression fails this test instead of killing pytest.
    code = textwrap.dedent("""
        import gc, bspa
        with bspa.Pool(num_kv_heads=2, head_dim=64, page_size=64, num_pages=256, dtype="f32") as pool:
            k, v = pool.kv(0)
            k[:] = 1.0
        gc.collect()
        print(k.sum(), v.shape)
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
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
