"""Long calls release the GIL (SWIG -threads): another Python thread runs meanwhile, and
each thread still reads its own error message."""

import threading
import time

import numpy as np
import pytest

import bspa


def long_prefill_setup(tokens=1024, heads=8, dim=64):
    pool = bspa.Pool(num_kv_heads=heads, head_dim=dim, page_size=64, num_pages=tokens // 64 + 1, dtype="f32")
    seq = pool.sequence()
    seq.append(np.arange(tokens))
    batch = pool.batch([seq], [tokens])
    rng = np.random.default_rng(0)
    k = rng.standard_normal((tokens, heads, dim), dtype=np.float32)
    q = rng.standard_normal((tokens, heads, dim), dtype=np.float32)
    pool.kv_write(batch, 0, k, k)
    return pool, batch, bspa.Layout.dense(heads), q


def test_a_ticker_thread_keeps_ticking_during_a_prefill():
    # A prefill long enough to tell (> 50 ms) on this machine, idle or loaded: the size
    # doubles until one call takes that long.
    for tokens in (1024, 2048, 4096, 8192):
        pool, batch, layout, q = long_prefill_setup(tokens)
        out = np.empty_like(q)
        start = time.perf_counter()
        pool.prefill(batch, 0, layout, q, out, scale=0.125)
        alone = time.perf_counter() - start
        if alone > 0.05:
            break
        batch.close()
        pool.close()
    assert alone > 0.05, f"the prefill of {tokens} tokens took {alone:.3f} s, too short to tell"

    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.02)  # the ticker is running
    calls, begin = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - begin < 0.3:
        pool.prefill(batch, 0, layout, q, out, scale=0.125)
        calls += 1
    end = time.perf_counter()
    stop.set()
    ticker.join()
    during = [t for t in ticks if begin <= t <= end]
    # Holding the GIL through the C call lets the ticker in only between calls (about one
    # tick per call); released, it ticks every millisecond or so even on a loaded machine.
    assert len(during) >= 4 * calls + 10, (
        f"{len(during)} ticks during {calls} prefills of {alone * 1e3:.0f} ms each: the GIL was held")
    batch.close()
    pool.close()


def test_error_messages_stay_per_thread():
    pool = bspa.Pool(num_kv_heads=2, head_dim=8, page_size=16, num_pages=4, dtype="f32")
    errors = {}
    barrier = threading.Barrier(4)

    def fail(i):
        barrier.wait()
        for _ in range(200):
            try:
                bspa.Layout.dense(-i - 1)
            except bspa.InvalidArgumentError as e:
                if f"{-i - 1}" not in str(e):
                    errors[i] = str(e)
                    return

    threads = [threading.Thread(target=fail, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    pool.close()


def run_while_prefilling(close_something, tokens=2048):
    """Starts a prefill on another thread, runs close_something(pool, batch, layout) while
    it runs in the library (GIL released), and returns what the prefill thread got."""
    pool, batch, layout, q = long_prefill_setup(tokens)
    out = np.empty_like(q)
    want = pool.prefill(batch, 0, layout, q, np.empty_like(q), scale=0.125)
    result = {}
    started = threading.Event()

    def worker():
        started.set()
        try:
            pool.prefill(batch, 0, layout, q, out, scale=0.125)
            result["out"] = out
        except bspa.InvalidStateError as e:  # closed before the call began
            result["closed"] = e

    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    time.sleep(0.005)
    close_something(pool, batch, layout)
    t.join()
    return result, want


@pytest.mark.parametrize("what", ["pool", "batch", "layout", "sequence"])
def test_close_while_another_thread_calls_waits_for_the_call(what):
    # close() returns at once; the C object goes when the running call returns, so the call
    # finishes on live memory (before: SIGSEGV) and every later call raises.
    def close(pool, batch, layout):
        {"pool": pool, "batch": batch, "layout": layout, "sequence": batch.sequences[0]}[what].close()

    result, want = run_while_prefilling(close)
    assert "out" in result or "closed" in result
    if "out" in result:
        np.testing.assert_array_equal(result["out"], want)


def test_two_threads_closing_the_same_objects_destroy_each_once():
    for _ in range(20):
        pool = bspa.Pool(num_kv_heads=1, head_dim=8, num_pages=128, page_size=16, dtype="f32")
        seqs = [pool.sequence() for _ in range(100)]
        for s in seqs:
            s.append(np.arange(5))
        layouts = [bspa.Layout.dense(1) for _ in range(50)]
        barrier = threading.Barrier(2)

        def closer():
            barrier.wait()
            for obj in seqs + layouts:
                obj.close()

        threads = [threading.Thread(target=closer) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(s.closed for s in seqs) and all(lay.closed for lay in layouts)
        pool.check()
        assert pool.stats().num_sequences == 0
        pool.close()


def test_a_plan_waits_for_a_launch_of_the_same_batch():
    # One call at a time per batch (bspa.h): a plan from another thread waits for the
    # running prefill instead of freeing the plan it reads (before: std::length_error).
    tokens, heads, dim = 2048, 8, 64
    pool = bspa.Pool(num_kv_heads=heads, head_dim=dim, page_size=64, num_pages=2 * (tokens // 64) + 2, dtype="f32")
    seq, other = pool.sequence(), pool.sequence()
    seq.append(np.arange(tokens))
    other.append(np.arange(tokens) + 7)
    batch = pool.reusable_batch(max_seqs=4, max_tokens=tokens, max_seq_tokens=4 * tokens)
    batch.plan([seq], [tokens])
    rng = np.random.default_rng(1)
    k = rng.standard_normal((tokens, heads, dim), dtype=np.float32)
    q = rng.standard_normal((tokens, heads, dim), dtype=np.float32)
    pool.kv_write(batch, 0, k, k)
    layout = bspa.Layout.dense(heads)
    want = pool.prefill(batch, 0, layout, q, np.empty_like(q), scale=0.125)
    out = np.empty_like(q)
    started = threading.Event()

    def worker():
        started.set()
        pool.prefill(batch, 0, layout, q, out, scale=0.125)

    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    for i in range(20):
        batch.plan([other] if i % 2 else [seq], [tokens])
    t.join()
    # The worker's launch ran over one whole plan: seq's (the first) or, if it started late,
    # one of the later ones, each of whose launches computes what a fresh plan would.
    assert np.isfinite(out).all()
    if batch.sequences[0] is seq:
        np.testing.assert_array_equal(pool.prefill(batch, 0, layout, q, np.empty_like(q), scale=0.125), want)
    pool.check()
