"""Reusable batches on a CPU pool: steps planned into one batch compute bitwise what one-step
batches compute, refusals keep the previous plan, option errors, lifetimes."""

import gc

import numpy as np
import pytest

import bspa
from child import run_child

HQ, HKV, D, PAGE = 4, 2, 16, 16
MAX_SEQS, MAX_TOKENS, MAX_QUERY, MAX_LEN = 4, 64, 40, 300
SCALE = 0.25


def make_pool():
    return bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=128, dtype="f32")


def launch(pool, batch, layout, q, k, v, rows):
    """kv_write then prefill of one step with tensors of `rows` rows (the step's first)."""
    t = len(q)
    pad = ((0, rows - t), (0, 0), (0, 0))
    out = np.full((rows, HQ, D), 1234.5, dtype=np.float32)
    lse = np.full((HQ, rows), -77.0, dtype=np.float32)
    pool.kv_write(batch, 0, np.pad(k, pad), np.pad(v, pad))
    pool.prefill(batch, 0, layout, np.pad(q, pad), out, scale=SCALE, lse=lse)
    return out, lse


@pytest.mark.parametrize("fixed", [False, True])
def test_steps_of_one_reusable_batch_equal_one_step_batches(fixed):
    rng = np.random.default_rng(3)
    layout = bspa.Layout.strided(num_heads=HQ, block_size=16, local_blocks=2, vert_stride=3)
    with make_pool() as pool, pool.reusable_batch(max_seqs=MAX_SEQS, max_tokens=MAX_TOKENS,
                                                  max_seq_tokens=MAX_LEN, max_query_len=MAX_QUERY,
                                                  fixed_launch_shape=fixed) as reusable:
        assert isinstance(reusable, bspa.Batch) and not reusable.planned
        seqs = [pool.sequence() for _ in range(3)]
        for s, n in zip(seqs, (37, 5, 20)):
            s.append(rng.integers(0, 50000, n))
        for stepi in range(8):
            if stepi == 4:  # one finishes (closed while the plan holds it), one joins
                seqs[1].close()
                seqs[1] = pool.sequence()
                seqs[1].append(rng.integers(0, 50000, 11))
            if stepi == 5:
                seqs.append(pool.sequence())
                seqs[-1].append(rng.integers(0, 50000, 3))
            for s in seqs:  # decode rows: one more token once the pending ones are computed
                if s.num_tokens == s.num_computed:
                    s.append(rng.integers(0, 50000, 1))
            lens = [s.num_tokens - s.num_computed for s in seqs]
            t = sum(lens)
            q = rng.standard_normal((t, HQ, D), dtype=np.float32)
            k = rng.standard_normal((t, HKV, D), dtype=np.float32)
            v = rng.standard_normal((t, HKV, D), dtype=np.float32)
            with pool.batch(seqs, lens) as one:
                want_out, want_lse = launch(pool, one, layout, q, k, v, t)
            reusable.plan(seqs, lens)
            assert reusable.num_tokens == t and reusable.query_lens == tuple(lens)
            assert reusable.rows == (MAX_TOKENS if fixed else t)
            out, lse = launch(pool, reusable, layout, q, k, v, reusable.rows)
            assert out[:t].tobytes() == want_out.tobytes(), f"step {stepi}: outputs differ"
            assert lse[:, :t].tobytes() == want_lse.tobytes(), f"step {stepi}: lse differs"
            assert (out[t:] == 1234.5).all() and (lse[:, t:] == -77.0).all(), "rows past the step written"
            for s, n in zip(seqs, lens):
                s.commit(s.num_computed + n)
            pool.check()


def test_a_refused_plan_raises_and_keeps_the_previous_plan():
    rng = np.random.default_rng(5)
    layout = bspa.Layout.dense(HQ)
    with make_pool() as pool:
        batch = pool.reusable_batch(max_seqs=2, max_tokens=MAX_TOKENS, max_seq_tokens=MAX_LEN)
        q = rng.standard_normal((8, HQ, D), dtype=np.float32)
        k = rng.standard_normal((8, HKV, D), dtype=np.float32)
        with pytest.raises(bspa.InvalidStateError):  # no plan yet
            pool.prefill(batch, 0, layout, q, scale=SCALE)
        seqs = [pool.sequence() for _ in range(3)]
        seqs[0].append(rng.integers(0, 50000, 8))
        for s in seqs[1:]:
            s.append(rng.integers(0, 50000, 1))
        batch.plan(seqs[:1], [8])
        pool.kv_write(batch, 0, k, -k)
        first = pool.prefill(batch, 0, layout, q, scale=SCALE)
        before = pool.stats()
        with pytest.raises(bspa.OutOfRangeError, match="max_seqs"):
            batch.plan(seqs, [8, 1, 1])
        with pytest.raises(IndexError):  # OutOfRangeError is an IndexError too
            batch.plan(seqs, [8, 1, 1])
        with pytest.raises(bspa.InvalidArgumentError):  # the same sequence twice
            batch.plan([seqs[0], seqs[0]], [8, 8])
        with pytest.raises(ValueError, match="query lengths"):
            batch.plan(seqs[:2], [8])
        assert pool.stats() == before, "a refused plan changed the pool"
        assert batch.sequences == (seqs[0],) and batch.query_lens == (8,) and batch.num_tokens == 8
        again = pool.prefill(batch, 0, layout, q, scale=SCALE)
        assert again.tobytes() == first.tobytes(), "the previous plan no longer computes the same"
        pool.check()


def test_fixed_launch_shape_wants_max_tokens_rows():
    with make_pool() as pool:
        batch = pool.reusable_batch(max_seqs=1, max_tokens=32, max_seq_tokens=64, fixed_launch_shape=True)
        seq = pool.sequence()
        seq.append(np.arange(8))
        batch.plan([seq], [8])
        q = np.zeros((8, HQ, D), dtype=np.float32)
        with pytest.raises(bspa.ShapeMismatchError):
            pool.prefill(batch, 0, bspa.Layout.dense(HQ), q, scale=SCALE)


def test_option_errors_name_the_limit():
    with make_pool() as pool:
        with pytest.raises(bspa.InvalidArgumentError, match="max_query_len = 65"):
            pool.reusable_batch(max_seqs=4, max_tokens=64, max_seq_tokens=1000, max_query_len=65)
        with pytest.raises(bspa.InvalidArgumentError, match="max_decode_query_len = -1"):
            pool.reusable_batch(max_seqs=4, max_tokens=64, max_seq_tokens=1000, max_decode_query_len=-1)
        bounded = pool.reusable_batch(max_seqs=4, max_tokens=64, max_seq_tokens=1000, max_decode_query_len=1)
        assert bounded.max_decode_query_len == 1
        bounded.close()
        with pytest.raises(bspa.InvalidArgumentError, match="max_seqs"):
            pool.reusable_batch(max_seqs=0, max_tokens=64, max_seq_tokens=1000)
        with pytest.raises(bspa.InvalidArgumentError, match="max_seq_tokens"):
            pool.reusable_batch(max_seqs=1, max_tokens=64, max_seq_tokens=0)
        with pytest.raises(TypeError):
            pool.reusable_batch(max_seqs=1, max_tokens=64)  # max_seq_tokens is required
        other = make_pool()
        batch = pool.reusable_batch(max_seqs=1, max_tokens=64, max_seq_tokens=100)
        stranger = other.sequence()
        stranger.append([1, 2])
        with pytest.raises(ValueError, match="another pool"):
            batch.plan([stranger], [2])
        other.close()


def test_device_allocation_counts_of_cpu_pools_balance():
    counts = bspa.device_allocation_counts()
    assert isinstance(counts, bspa.DeviceAllocationCounts)
    with make_pool() as pool, pool.reusable_batch(max_seqs=2, max_tokens=16, max_seq_tokens=64):
        assert bspa.device_allocation_counts() == counts  # CPU pools allocate no device memory
    assert counts.allocations >= counts.frees


def test_closing_the_pool_closes_the_batch_and_a_plan_survives_its_sequences():
    pool = make_pool()
    batch = pool.reusable_batch(max_seqs=2, max_tokens=64, max_seq_tokens=200)
    seq = pool.sequence()
    seq.append(np.arange(40))  # 3 pages
    batch.plan([seq], [40])
    seq.close()  # the plan keeps its pages out of reuse, the batch stays open
    assert not batch.closed and pool.stats().pages_in_use == 3
    nxt = pool.sequence()
    nxt.append([7])
    batch.plan([nxt], [1])
    assert pool.stats().pages_in_use == 1, "re-planning kept the previous plan's pages"
    pool.close()
    assert batch.closed
    with pytest.raises(bspa.InvalidStateError):
        batch.plan([nxt], [1])
    batch.close()  # idempotent


def test_a_garbage_cycle_of_pool_and_batches_frees_batches_first():
    # A cycle holding a pool and its batches is finalized in any order, the pool's storage
    # possibly before a batch; the storage then destroys the batch itself, so the batch's
    # own finalizer never reaches a destroyed pool. MALLOC_PERTURB_ poisons freed memory, so
    # a batch destroyed after its pool would read garbage (and crash or hang) here.
    code = """
        import gc, bspa
        from child import engine_in_cycle
        gc.disable()
        for _ in range(20):
            e = engine_in_cycle(bspa, num_kv_heads=2, head_dim=16, page_size=16, num_pages=16, dtype="f32")
            e.seq = e.pool.sequence()
            e.seq.append(list(range(20)))
            e.batches = [e.pool.reusable_batch(max_seqs=1, max_tokens=32, max_seq_tokens=64),
                         e.pool.batch([e.seq], [20])]
            e.batches[0].plan([e.seq], [20])
            del e
            gc.collect()
        print("ok")
    """
    run = run_child(code, MALLOC_PERTURB_="165")
    assert run.returncode == 0 and run.stdout.strip() == "ok", f"exit {run.returncode}: {run.stderr}"
    gc.collect()
