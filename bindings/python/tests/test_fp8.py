"""FP8 (e4m3) pools from Python: scales, quantization on write, the attention over
dequantized pages, host data as uint8 with the dtype named, bspa_prefill_paged with
scale arrays, and the torch.float8_e4m3fn path where torch is installed."""

import functools

import numpy as np
import pytest

import bspa
from reference import attention, rel_l2, strided_allowed, token_mask

HQ, HKV, D, PAGE, BLOCK = 4, 2, 16, 16, 16
SCALE = 0.3


def nearest_e4m3(x):
    """Independent encoder: the nearest of the 127 non-negative finite codes (ties to the
    even code), saturated at 448, NaN -> 0x7f, the sign kept."""
    table = bspa.fp8_e4m3_to_float32(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x.astype(np.float64)).reshape(-1, 1)
    d = np.abs(table[None, :] - a)
    best = d.min(axis=1, keepdims=True)
    ties = d == best
    codes = np.arange(0x7F)
    even = np.where(ties & (codes % 2 == 0), codes, 1000).min(axis=1)
    pick = np.where(even < 1000, even, np.where(ties, codes, 1000).min(axis=1))
    pick = np.where(a[:, 0] >= 448.0, 0x7E, pick)
    out = (pick | np.where(np.signbit(x.reshape(-1)), 0x80, 0)).astype(np.uint8)
    out = np.where(np.isnan(x.reshape(-1)), np.where(np.signbit(x.reshape(-1)), 0xFF, 0x7F), out)
    return out.astype(np.uint8).reshape(x.shape)


def test_decode_table_landmarks():
    v = bspa.fp8_e4m3_to_float32(np.array([0x00, 0x80, 0x01, 0x07, 0x08, 0x38, 0x7E, 0xFE, 0x7F, 0xFF], np.uint8))
    assert v[0] == 0 and np.signbit(v[1])
    assert v[2] == 2.0 ** -9 and v[3] == 7 * 2.0 ** -9 and v[4] == 2.0 ** -6
    assert v[5] == 1.0 and v[6] == 448.0 and v[7] == -448.0
    assert np.isnan(v[8]) and np.isnan(v[9])


def make_pool(**kw):
    args = dict(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=64, dtype="fp8_e4m3")
    args.update(kw)
    return bspa.Pool(**args)


def test_scales_round_trip_and_errors():
    with make_pool(num_layers=2) as pool:
        assert pool.info().dtype == "fp8_e4m3"
        with pytest.raises(bspa.InvalidStateError, match="layer 0"):
            pool.kv_scales(0)
        pool.set_kv_scales(1, [0.5, 0.25], np.array([1.0, 2.0], np.float32))
        k, v = pool.kv_scales(1)
        assert k.tolist() == [0.5, 0.25] and v.tolist() == [1.0, 2.0]
        for bad in (np.nan, np.inf, 0.0, -1.0):
            with pytest.raises(bspa.InvalidArgumentError, match=r"k_scales\[1\].*layer 1"):
                pool.set_kv_scales(1, [0.5, bad], [1.0, 1.0])
        with pytest.raises(bspa.InvalidArgumentError, match="n = 3"):
            pool.set_kv_scales(1, [1, 1, 1], [1, 1, 1])
        with pytest.raises(bspa.OutOfRangeError):
            pool.set_kv_scales(2, [1, 1], [1, 1])
        assert pool.kv_scales(1)[0].tolist() == [0.5, 0.25]  # unchanged by the failures
        assert pool.info().kv_scales_layers == 1
    with bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, num_pages=4, dtype="bf16") as other:
        with pytest.raises(bspa.InvalidStateError, match="fp8_e4m3"):
            other.set_kv_scales(0, [1, 1], [1, 1])


def test_capacity_doubles():
    budget = 1 << 20
    with make_pool(num_pages=0, memory_bytes=budget) as f8, \
            bspa.Pool(num_kv_heads=HKV, head_dim=D, page_size=PAGE, memory_bytes=budget, dtype="bf16") as b16:
        assert f8.info().page_bytes * 2 == b16.info().page_bytes
        assert f8.num_pages == 2 * b16.num_pages
    assert "fp8_e4m3" in bspa.build_info()


def test_kv_write_quantizes_like_the_table():
    rng = np.random.default_rng(7)
    with make_pool() as pool:
        ks, vs = np.array([0.02, 0.3], np.float32), np.array([1.0, 1 / 448], np.float32)
        pool.set_kv_scales(0, ks, vs)
        seq = pool.sequence()
        seq.append(np.arange(40))
        k = (rng.standard_normal((40, HKV, D)) * 3).astype(np.float16)
        v = (rng.standard_normal((40, HKV, D)) * 3).astype(np.float16)
        k[0, 0, :4] = [np.inf, -np.inf, 1e4, 0.0]
        with pool.batch([seq], [40]) as b:
            pool.kv_write(b, 0, k, v)
        kp, vp = pool.kv(0)
        assert kp.dtype == np.uint8 or kp.dtype.name == "float8_e4m3fn"
        kp, vp = kp.view(np.uint8), vp.view(np.uint8)
        pages = seq.pages()
        for t in range(40):
            page, slot = pages[t // PAGE], t % PAGE
            for h in range(HKV):
                np.testing.assert_array_equal(kp[page, h, slot], nearest_e4m3(k[t, h].astype(np.float32) / ks[h]))
                np.testing.assert_array_equal(vp[page, h, slot], nearest_e4m3(v[t, h].astype(np.float32) / vs[h]))
        assert kp[pages[0], 0, 0, :4].tolist() == [0x7E, 0xFE, 0x7E, 0x00]


@pytest.mark.parametrize("kind", ["dense", "strided"])
def test_attention_over_fp8_pages(kind):
    rng = np.random.default_rng(11 if kind == "dense" else 12)
    if kind == "dense":
        layout, allowed = bspa.Layout.dense(HQ), (lambda h, qb, kb: kb <= qb)
    else:
        layout = bspa.Layout.strided(num_heads=HQ, block_size=BLOCK, local_blocks=2, vert_stride=3)
        allowed = functools.partial(strided_allowed, local_blocks=2, vert_stride=3, num_heads_total=HQ)
    n = 150
    q_all = rng.standard_normal((n, HQ, D)).astype(np.float16)
    k_all = rng.standard_normal((n, HKV, D)).astype(np.float16)
    v_all = rng.standard_normal((n, HKV, D)).astype(np.float16)
    ks = (np.abs(k_all).max(axis=(0, 2)) / 448).astype(np.float32)
    vs = (np.abs(v_all).max(axis=(0, 2)) / 448).astype(np.float32)
    with make_pool() as pool:
        pool.set_kv_scales(0, ks, vs)
        seq = pool.sequence()
        seq.append(np.arange(n))
        ctx = 0
        for q in (77, 1, 72):  # unaligned contexts, a decode row
            with pool.batch([seq], [q]) as b:
                pool.kv_write(b, 0, k_all[ctx:ctx + q], v_all[ctx:ctx + q])
                out = np.full((q, HQ, D), np.nan, np.float16)
                pool.prefill(b, 0, layout, q_all[ctx:ctx + q], out, scale=SCALE)
            seq.commit(ctx + q)
            kp, vp = (x.view(np.uint8) for x in pool.kv(0))
            pages = seq.pages()
            tok = np.arange(ctx + q)
            kd = bspa.fp8_e4m3_to_float32(kp[pages[tok // PAGE], :, tok % PAGE]) * ks[None, :, None]
            vd = bspa.fp8_e4m3_to_float32(vp[pages[tok // PAGE], :, tok % PAGE]) * vs[None, :, None]
            mask = token_mask(HQ, ctx, q, BLOCK, allowed)
            same, _ = attention(q_all[ctx:ctx + q], kd, vd, mask, SCALE)
            plain, _ = attention(q_all[ctx:ctx + q], k_all[:ctx + q], v_all[:ctx + q], mask, SCALE)
            assert not np.isnan(out).any()
            assert rel_l2(out, same) <= 1e-2
            assert rel_l2(out, plain) <= 0.1
            # bspa_prefill_paged over the same pages, given as uint8 with float32 scales.
            o2 = np.full_like(out, np.nan)
            bspa.prefill_paged(q_all[ctx:ctx + q], kp, vp, pages.reshape(1, -1), np.array([0, q], np.int32),
                               np.array([ctx], np.int32), layout, scale=SCALE, out=o2, k_scale=ks, v_scale=vs)
            np.testing.assert_array_equal(o2, out)
            ctx += q


def test_launch_without_scales_fails():
    with make_pool() as pool:
        seq = pool.sequence()
        seq.append(np.arange(4))
        k = np.zeros((4, HKV, D), np.float16)
        with pool.batch([seq], [4]) as b:
            with pytest.raises(bspa.InvalidStateError, match="no KV scales"):
                pool.kv_write(b, 0, k, k)
            pool.set_kv_scales(0, [1, 1], [1, 1])
            with pytest.raises(bspa.DtypeMismatchError, match="bfloat16 or float16"):
                pool.kv_write(b, 0, k.astype(np.float32), k.astype(np.float32))
            pool.kv_write(b, 0, k, k)


def test_torch_float8_pages():
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    rng = np.random.default_rng(3)
    pages = torch.from_numpy(rng.standard_normal((4, HKV, PAGE, D)).astype(np.float32)).to(torch.float8_e4m3fn)
    q = torch.from_numpy(rng.standard_normal((5, HQ, D)).astype(np.float32)).to(torch.bfloat16)
    scales = torch.tensor([0.5, 2.0], dtype=torch.float32)
    try:
        pages.__dlpack__()
    except (BufferError, RuntimeError, TypeError) as e:  # a torch whose DLPack export lacks float8
        pytest.skip(f"torch cannot export float8 through DLPack: {e}")
    out = bspa.prefill_paged(q, pages, pages, torch.tensor([[3, 1]], dtype=torch.int32),
                             torch.tensor([0, 5], dtype=torch.int32), torch.tensor([20], dtype=torch.int32),
                             bspa.Layout.dense(HQ), scale=SCALE, k_scale=scales, v_scale=scales)
    kd = pages.to(torch.float32).numpy() * scales.numpy()[None, :, None, None]
    tok = np.arange(25)
    bt = np.array([3, 1])
    kk = kd[bt[tok // PAGE], :, tok % PAGE]
    mask = token_mask(HQ, 20, 5, BLOCK, lambda h, qb, kb: kb <= qb)
    ref, _ = attention(q.to(torch.float32).numpy(), kk, kk, mask, SCALE)
    assert rel_l2(out.to(torch.float32).numpy(), ref) <= 1e-2
