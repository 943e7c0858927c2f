"""CPU prefill through the pool against the float64 reference with an explicit mask."""

import contextlib
import functools

import numpy as np
import pytest

import bspa
from reference import attention, rel_l2, strided_allowed, token_mask

HQ, HKV, D, PAGE, BLOCK = 4, 2, 16, 16, 16
SCALE = 0.3


def make_layout(kind):
    if kind == "dense":
        return bspa.Layout.dense(HQ), lambda h, qb, kb: kb <= qb
    homo = kind == "strided-homo"
    layout = bspa.Layout.strided(num_heads=HQ, block_size=BLOCK, local_blocks=2, vert_stride=3, homo_head=homo)
    return layout, functools.partial(strided_allowed, local_blocks=2, vert_stride=3, num_heads_total=HQ,
                                     homo_head=homo)


class Conversation:
    """Q/K/V of every absolute position of one conversation: a shared prefix recomputed
    in a later turn has the same K/V, as with a real model."""

    def __init__(self, rng, length):
        self.tokens = rng.integers(0, 32000, size=length, dtype=np.int32)
        self.q = rng.standard_normal((length, HQ, D), dtype=np.float32)
        self.k = rng.standard_normal((length, HKV, D), dtype=np.float32)
        self.v = rng.standard_normal((length, HKV, D), dtype=np.float32)


def step(pool, layout, work):
    """work: [(seq, conversation, ctx, q)]. One batch: kv_write then prefill; returns
    (out, lse) split per sequence."""
    seqs = [w[0] for w in work]
    with pool.batch(seqs, [w[3] for w in work]) as batch:
        k_new = np.concatenate([c.k[ctx:ctx + q] for _, c, ctx, q in work])
        v_new = np.concatenate([c.v[ctx:ctx + q] for _, c, ctx, q in work])
        q_new = np.concatenate([c.q[ctx:ctx + q] for _, c, ctx, q in work])
        bspa.kv_write(pool, batch, 0, k_new, v_new)
        out = np.full_like(q_new, np.nan)  # poisoned: an unwritten row fails
        lse = np.full((HQ, len(q_new)), np.nan, dtype=np.float32)
        bspa.prefill(pool, batch, 0, layout, q_new, out, scale=SCALE, lse=lse)
    rows = np.cumsum([0] + [w[3] for w in work])
    return [(out[a:b], lse[:, a:b]) for a, b in zip(rows[:-1], rows[1:])]


def check_against_reference(conv, ctx, q, out, lse, allowed):
    mask = token_mask(HQ, ctx, q, BLOCK, allowed)
    ref_out, ref_lse = attention(conv.q[ctx:ctx + q], conv.k[:ctx + q], conv.v[:ctx + q], mask, SCALE)
    assert not np.isnan(out).any()
    err = rel_l2(out, ref_out)
    assert err <= 1e-5, f"ctx={ctx} q={q}: relative L2 error {err:.3g}, max {np.abs(out - ref_out).max():.3g}"
    assert rel_l2(lse, ref_lse) <= 1e-5


@pytest.mark.parametrize("kind", ["strided", "strided-homo", "dense"])
def test_two_turns_with_prefix_hit_match_the_reference(kind):
    rng = np.random.default_rng(7)
    layout, allowed = make_layout(kind)
    conv = Conversation(rng, 115)
    with bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=32, dtype="f32") as pool:
        with pool.sequence() as first:
            assert first.match(conv.tokens[:70]) == 0
            first.append(conv.tokens[:70])
            [(out, lse)] = step(pool, layout, [(first, conv, 0, 70)])
            check_against_reference(conv, 0, 70, out, lse, allowed)
            first.commit(70)
        second = pool.sequence()
        cached = second.match(conv.tokens)
        assert cached == 64  # the four full pages of turn one
        second.append(conv.tokens[cached:])
        [(out, lse)] = step(pool, layout, [(second, conv, cached, 115 - cached)])
        check_against_reference(conv, cached, 115 - cached, out, lse, allowed)
        second.commit(115)
        pool.check()


def test_mixed_batch_with_unaligned_context_and_decode():
    rng = np.random.default_rng(11)
    layout, allowed = make_layout("strided")
    a, b, c = Conversation(rng, 60), Conversation(rng, 50), Conversation(rng, 34)
    with bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=32, dtype="f32") as pool:
        sa, sb, sc = pool.sequence(), pool.sequence(), pool.sequence()
        sa.append(a.tokens)
        sc.append(c.tokens[:33])
        step(pool, layout, [(sa, a, 0, 37), (sc, c, 0, 33)])  # a chunked prefill stops at 37
        sa.commit(37)
        sc.commit(33)
        sb.append(b.tokens)
        sc.append(c.tokens[33:])
        results = step(pool, layout, [(sa, a, 37, 23), (sb, b, 0, 50), (sc, c, 33, 1)])
        for (conv, ctx, q), (out, lse) in zip([(a, 37, 23), (b, 0, 50), (c, 33, 1)], results):
            check_against_reference(conv, ctx, q, out, lse, allowed)


@contextlib.contextmanager
def one_conversation_pool(seed, tokens):
    """A strided layout, a conversation of `tokens` tokens and an f32 pool whose one sequence holds them."""
    layout, _ = make_layout("strided")
    conv = Conversation(np.random.default_rng(seed), tokens)
    with bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=16, dtype="f32") as pool:
        seq = pool.sequence()
        seq.append(conv.tokens)
        yield layout, conv, pool, seq


def test_prefill_paged_over_the_pools_pages_matches_prefill():
    with one_conversation_pool(3, 90) as (layout, conv, pool, seq):
        step(pool, layout, [(seq, conv, 0, 41)])
        seq.commit(41)
        [(expected, _)] = step(pool, layout, [(seq, conv, 41, 49)])
        k_pages, v_pages = pool.kv(0)
        out = bspa.prefill_paged(conv.q[41:], k_pages, v_pages, seq.pages()[None, :],
                                 np.array([0, 49], dtype=np.int32), np.array([41], dtype=np.int32),
                                 layout, scale=SCALE)
        assert rel_l2(out, expected) <= 1e-6


def aligned_bytes(n, offset=0):
    """A uint8 [n] array whose data lies `offset` bytes past a 16-byte boundary."""
    raw = np.zeros(n + 32, dtype=np.uint8)
    start = -raw.ctypes.data % 16 + offset
    return raw[start:start + n]


def test_prefill_workspace_bytes_on_cpu_is_zero():
    assert bspa.prefill_workspace_bytes("cpu", D) == 0
    assert bspa.prefill_workspace_bytes((bspa.kDLCPU, 0), 128) == 0


def test_prefill_workspace_bytes_rejects_head_dim_0():
    with pytest.raises(bspa.InvalidArgumentError, match="head_dim") as caught:
        bspa.prefill_workspace_bytes("cpu", 0)
    assert isinstance(caught.value, bspa.BspaError)


@contextlib.contextmanager
def paged_tail(seed, tokens, context):
    """A conversation of `tokens` tokens written to a pool, and a function that runs
    bspa.prefill_paged over the pool's own pages for its rows past `context` (keyword
    arguments passed on)."""
    with one_conversation_pool(seed, tokens) as (layout, conv, pool, seq):
        step(pool, layout, [(seq, conv, 0, tokens)])
        k_pages, v_pages = pool.kv(0)
        metadata = (seq.pages()[None, :], np.array([0, tokens - context], dtype=np.int32),
                    np.array([context], dtype=np.int32))
        yield lambda **kw: bspa.prefill_paged(conv.q[context:], k_pages, v_pages, *metadata, layout, scale=SCALE,
                                              **kw)


def test_prefill_paged_with_a_cpu_workspace_matches_without():
    with paged_tail(5, 75, 45) as prefill_tail:
        expected = prefill_tail()
        np.testing.assert_array_equal(prefill_tail(workspace=aligned_bytes(4096)), expected)
        # The workspace reaches the library: a misaligned one is refused.
        with pytest.raises(bspa.InvalidArgumentError, match="workspace"):
            prefill_tail(workspace=aligned_bytes(4096, offset=1))


def test_prefill_paged_max_decode_query_len_is_a_hint():
    with paged_tail(7, 80, 77) as prefill_tail:
        expected = prefill_tail()
        for bound in (1, 2, 8, 1000):
            # CUDA routes rows by it; the CPU has one path: the same bytes.
            np.testing.assert_array_equal(prefill_tail(max_decode_query_len=bound), expected)
        with pytest.raises(bspa.InvalidArgumentError, match="max_decode_query_len = -1"):
            prefill_tail(max_decode_query_len=-1)


def test_launch_errors_map_to_exceptions():
    with bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=8, dtype="f32") as pool:
        seq = pool.sequence()
        seq.append(np.arange(20))
        with pool.batch([seq], [20]) as batch:
            k = np.zeros((20, HKV, D), dtype=np.float32)
            with pytest.raises(bspa.ShapeMismatchError):
                pool.kv_write(batch, 0, k[:19], k[:19])
            with pytest.raises(bspa.DtypeMismatchError) as caught:
                pool.kv_write(batch, 0, k.astype(np.float16), k.astype(np.float16))
            assert isinstance(caught.value, TypeError)
            with pytest.raises(bspa.OutOfRangeError):
                pool.kv_write(batch, 1, k, k)
        with pytest.raises(bspa.OutOfRangeError):
            pool.batch([seq], [21])


def test_arrays_not_in_native_byte_order_are_refused():
    # DLPack has no byte order: a big-endian array would be read as other values.
    pool = bspa.Pool(num_kv_heads=1, head_dim=8, num_pages=4, page_size=16, dtype="f32")
    seq = pool.sequence()
    seq.append(np.arange(4))
    batch = pool.batch([seq], [4])
    k = np.zeros((4, 1, 8), dtype=">f4")
    with pytest.raises(ValueError, match="byte order"):
        pool.kv_write(batch, 0, k, k)
    native = np.zeros((4, 1, 8), dtype=np.float32)
    pool.kv_write(batch, 0, native, native)
    with pytest.raises(ValueError, match="byte order"):
        pool.prefill(batch, 0, bspa.Layout.dense(1), native, np.zeros((4, 1, 8), dtype=">f4"), scale=0.5)
    pool.close()
