import numpy as np
import pytest

import bspa
from reference import strided_allowed


def small_pool(**kw):
    args = dict(num_kv_heads=2, head_dim=8, page_size=16, num_pages=8, dtype="f32")
    args.update(kw)
    return bspa.Pool(**args)


def test_abi_and_version():
    assert bspa.ABI_VERSION == bspa._bspa.bspa_abi_version()
    assert bspa.version() == "0.1.0"
    assert "cpu" in bspa.build_info()
    assert bspa.device_count("cpu") == 1


def test_prefix_hit():
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 32000, size=40, dtype=np.int32)
    with small_pool() as pool:
        with pool.sequence() as first:
            assert first.match(prompt) == 0
            first.append(prompt)
            first.commit(len(prompt))
        follow_up = np.concatenate([prompt, rng.integers(0, 32000, size=9, dtype=np.int32)])
        second = pool.sequence()
        assert second.match(follow_up) == 32  # two full pages of 16
        assert second.info() == bspa.SeqInfo(num_tokens=32, num_computed=32, num_cached=32, num_pages=2)
        stats = pool.stats()
        assert (stats.hits, stats.misses, stats.matched_tokens) == (1, 1, 32)
        # A different salt never shares pages.
        with pool.sequence(salt=b"tenant-b") as other:
            assert other.match(follow_up) == 0
        pool.check()


def test_out_of_pages_is_memory_error_and_changes_nothing():
    with small_pool(num_pages=4) as pool:
        seq = pool.sequence()
        seq.append(np.arange(20))
        before_stats, before_info = pool.stats(), seq.info()
        with pytest.raises(bspa.OutOfPagesError) as caught:
            seq.append(np.arange(100))
        err = caught.value
        assert isinstance(err, MemoryError) and isinstance(err, bspa.BspaError)
        assert err.status == 300 and err.status_name == "BSPA_ERR_OUT_OF_PAGES"
        assert "bspa_seq_append" in err.message
        assert seq.info() == before_info
        assert pool.stats() == before_stats
        pool.check()
        with pytest.raises(MemoryError):
            seq.append(np.arange(100))


def test_invalid_argument_is_value_error_naming_the_value():
    with pytest.raises(ValueError) as caught:
        small_pool(page_size=48)
    assert isinstance(caught.value, bspa.InvalidArgumentError)
    assert "page_size = 48" in caught.value.message
    with small_pool() as pool:
        with pytest.raises(bspa.OutOfRangeError):
            pool.kv(5)
        seq = pool.sequence()
        seq.append([1, 2, 3])
        with pytest.raises(bspa.InvalidStateError):
            seq.match([1, 2, 3])  # only on an empty sequence


def test_close_is_idempotent_and_closed_objects_refuse_calls():
    pool = small_pool()
    seq = pool.sequence()
    pool.close()
    pool.close()
    assert pool.closed
    with pytest.raises(bspa.InvalidStateError):
        seq.append([1])
    with pytest.raises(bspa.InvalidStateError):
        pool.stats()


def test_pages_and_kv_views():
    with small_pool() as pool:
        seq = pool.sequence()
        seq.append(np.arange(33))
        pages = seq.pages()
        assert pages.dtype == np.int32 and len(pages) == 3 and len(set(pages.tolist())) == 3
        k, v = pool.kv(0)
        assert k.shape == v.shape == (8, 2, 16, 8) and k.dtype == np.float32


@pytest.mark.parametrize("homo", [False, True])
def test_strided_layout_follows_the_rule(homo):
    heads, total, begin = 4, 8, 4
    layout = bspa.Layout.strided(num_heads=heads, num_heads_total=total, head_begin=begin, block_size=16,
                                 local_blocks=3, vert_stride=4, homo_head=homo)
    for h in range(heads):
        for qb in range(12):
            for kb in range(12):
                expected = strided_allowed(begin + h, qb, kb, local_blocks=3, vert_stride=4,
                                           num_heads_total=total, homo_head=homo)
                assert layout.allowed(h, qb, kb) == expected, (h, qb, kb)
    with pytest.raises(IndexError):
        layout.allowed(heads, 0, 0)


def test_csr_layout():
    # Two heads, three block rows: head 0 dense causal, head 1 only the diagonal.
    crow = np.array([[0, 1, 3, 6], [6, 7, 8, 9]])
    col = np.array([0, 0, 1, 0, 1, 2, 0, 1, 2])
    layout = bspa.Layout.csr(crow, col, block_size=16)
    assert layout.allowed(0, 2, 0) and not layout.allowed(1, 2, 0) and layout.allowed(1, 2, 2)
    with pytest.raises(bspa.InvalidArgumentError):
        bspa.Layout.csr(crow, np.array([0, 0, 1, 0, 1, 2, 0, 1, 1]), block_size=16)  # no diagonal


def test_defaults_make_a_usable_cpu_pool():
    # Issue 22: the first numpy call on a default Pool(...) failed (bf16, zero pages).
    with bspa.Pool(num_kv_heads=2, head_dim=64) as pool:
        assert pool.dtype == "f32"
        # 256 MiB over K and V pages of 2 heads x 64 tokens x 64 dims x 4 bytes.
        assert pool.num_pages == bspa.DEFAULT_MEMORY_BYTES // (2 * 2 * 64 * 64 * 4)
        seq = pool.sequence()
        seq.append(np.arange(10))
        rng = np.random.default_rng(0)
        k = rng.standard_normal((10, 2, 64), dtype=np.float32)
        with pool.batch([seq], [10]) as b:
            pool.kv_write(b, 0, k, k)
            out = pool.prefill(b, 0, bspa.Layout.dense(2), rng.standard_normal((10, 2, 64), dtype=np.float32),
                               scale=0.125)
        assert out.shape == (10, 2, 64) and np.isfinite(out).all()
