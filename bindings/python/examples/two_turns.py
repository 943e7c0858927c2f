"""A two-turn conversation with a shared prefix on the CPU backend: the second turn
reuses the first turn's cached pages and computes only its new tokens.

    python bindings/python/examples/two_turns.py
"""

import numpy as np

import bspa

HQ, HKV, D = 4, 2, 64


def rows(start: int, n: int, heads: int, salt: float) -> np.ndarray:
    """Stand-in for a model's projections: deterministic per position, so the shared
    prefix has the same K/V in both turns."""
    i = np.arange(start * heads * D, (start + n) * heads * D, dtype=np.float64)
    return np.sin(i * 0.618 + salt).astype(np.float32).reshape(n, heads, D)


def turn(pool: bspa.Pool, layout: bspa.Layout, prompt: np.ndarray) -> int:
    with pool.sequence() as seq:  # closing keeps its full pages cached
        cached = seq.match(prompt)
        seq.append(prompt[cached:])
        n = len(prompt) - cached
        with pool.batch([seq], [n]) as batch:
            pool.kv_write(batch, 0, rows(cached, n, HKV, 1.0), rows(cached, n, HKV, 2.0))
            out = pool.prefill(batch, 0, layout, rows(cached, n, HQ, 3.0), scale=1 / 8)
        seq.commit(len(prompt))
    print(f"prompt {len(prompt):4d} tokens: {cached:4d} cached, {n:4d} computed, out[0] = {out.flat[0]:+.4f}")
    return cached


def main() -> None:
    with bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=16, num_pages=64, dtype="f32") as pool:
        layout = bspa.Layout.strided(num_heads=HQ, block_size=16, local_blocks=4, vert_stride=4)
        first = (np.arange(300) * 7919 % 32000).astype(np.int32)
        second = np.concatenate([first, 1000 + np.arange(120, dtype=np.int32)])
        turn(pool, layout, first)
        cached = turn(pool, layout, second)
        print(f"cached tokens in turn 2: {cached}")
        s = pool.stats()
        print(f"pool: {s.hits} hits, {s.matched_tokens} matched tokens of {s.queried_tokens} queried")


if __name__ == "__main__":
    main()
