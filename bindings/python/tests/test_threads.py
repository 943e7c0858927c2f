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
