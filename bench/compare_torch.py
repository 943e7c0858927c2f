#!/usr/bin/env python3
"""Side-by-side baselines for bench_prefill on the same GPU, same shapes, same run:
torch SDPA (cuDNN and flash backends; dense causal, lower-right aligned when C > 0) and
FlexAttention with the Phi-3-small block-sparse mask. Every backend's output is checked
against an fp32 reference with the token-level mask (all rows for the small gate shapes,
a fixed subset of 256 query rows for the timed shapes) BEFORE it is timed; a backend that
fails (rel L2 > 1e-2) is reported invalid and not timed. Timings: triton.testing.do_bench
medians.

FlexAttention's mask: BlockMask.from_kv_blocks at 64-token blocks (Q_LEN = new tokens,
KV_LEN = context + new). Query block i holds new tokens [64i, 64i + 63], i.e. absolute
positions C + 64i ..., which straddle two absolute 64-blocks when C % 64 != 0; its key
blocks are the union of what the strided rule allows for the absolute blocks it touches,
"full" (no mask_mod) only where every row of the block sees every key of the key block
(allowed for both absolute blocks and entirely at or below the block's first position).
The mask_mod is the exact token rule (query index relative to the new tokens, key index
absolute), so partial blocks are right whatever they cover. --selftest checks this
construction against the token mask with numpy alone (no torch, no GPU).

    python3 bench/compare_torch.py --json out.json [--quick] [--cases NAME,...] [--shape HQ/HKV/D]
    python3 bench/compare_torch.py --selftest

--shape takes bench_prefill's other shapes (e.g. 16/16/64), the softmax scale staying 1/128
as there; the strided layout's heads follow HQ as bench_prefill's do.
"""
import argparse
import datetime
import json
import sys
import time

import numpy as np

HQ, HKV, D, B, LB, V = 32, 8, 128, 64, 16, 8
SCALE = 1.0 / 128
TOL = 1e-2  # rel L2 against the fp32 reference (bf16 storage)
CASES = [
    ("8k C=0", 8192, 0),
    ("32k C=0", 32768, 0),
    ("32k C=16k", 32768, 16384),
    ("32k C=24k", 32768, 24576),
    ("32k C=30k", 32768, 30720),
    ("32768 C=30000 (unaligned)", 32768, 30000),
    ("128k C=0", 131072, 0),
    ("128k C=96k", 131072, 98304),
    ("131072 C=100000 (unaligned)", 131072, 100000),
]
QUICK = ("8k C=0", "32k C=0", "32k C=24k", "32768 C=30000 (unaligned)", "128k C=96k", "131072 C=100000 (unaligned)")
GATE = ((2048, 0), (2048, 1000), (4096, 1536))  # small shapes, all rows checked
SELFTEST = GATE + ((1000, 0), (3000, 2900), (8192, 6000), (8192, 8000), (5000, 4990), (640, 0))


def set_shape(text):
    """HQ/HKV/D from "HQ/HKV/D" (bench_prefill's --shape): HKV must divide HQ."""
    global HQ, HKV, D
    try:
        hq, hkv, d = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shape {text!r}: want HQ/HKV/D, e.g. 16/16/64")
    if hq < 1 or hkv < 1 or hq % hkv or d not in (64, 128):
        raise SystemExit(f"--shape {text!r}: KV heads must divide query heads, head dim 64 or 128")
    HQ, HKV, D = hq, hkv, d


def head_step():
    return max(1, V // HQ)


def allowed_blocks(nqb, nkb):
    """[H, nqb, nkb] bool: the strided rule on absolute blocks."""
    qb = np.arange(nqb)[None, :, None]
    kb = np.arange(nkb)[None, None, :]
    h = np.arange(HQ)[:, None, None]
    return (kb <= qb) & (((qb - kb) < LB) | (((kb + h * head_step() + 1) % V) == 0))


def visible_pairs(S, C, sparse):
    """Visible (q, k) pairs summed over heads for the new tokens [C, S)."""
    total = 0.0
    nb = (S + B - 1) // B
    allow = allowed_blocks(nb, nb) if sparse else None
    for qb in range(C // B, nb):
        r0, r1 = max(C, qb * B), min(S - 1, qb * B + B - 1)
        rows = r1 - r0 + 1
        if sparse:
            full = allow[:, qb, :qb].sum()
        else:
            full = HQ * qb
        total += rows * B * full + HQ * (r0 - qb * B + 1 + r1 - qb * B + 1) * rows / 2
    return total


def token_mask_np(S, C, rows=None):
    """[H, R, S] bool: the token rule for new-token rows `rows` (default all)."""
    t = np.arange(S - C) if rows is None else np.asarray(rows)
    p = (C + t)[None, :, None]
    j = np.arange(S)[None, None, :]
    h = np.arange(HQ)[:, None, None]
    qb, kb = p // B, j // B
    return (j <= p) & (((qb - kb) < LB) | (((kb + h * head_step() + 1) % V) == 0))


def flex_blocks(S, C):
    """(partial, full): [H, nqb, nkb] bool over query blocks of the new tokens."""
    T = S - C
    nqb, nkb = (T + B - 1) // B, (S + B - 1) // B
    allow = allowed_blocks(nkb, nkb)  # absolute query block x key block
    i = np.arange(nqb)
    p0 = C + i * B
    p1 = np.minimum(S - 1, p0 + B - 1)
    a0, a1 = p0 // B, p1 // B  # a1 <= a0 + 1
    any_ = allow[:, a0, :] | allow[:, a1, :]
    all_ = allow[:, a0, :] & allow[:, a1, :]
    kend = np.minimum(np.arange(nkb) * B + B - 1, S - 1)
    full = all_ & (kend[None, None, :] <= p0[None, :, None])
    return any_ & ~full, full


def selftest():
    """The block lists against the token mask: every visible pair lies in a listed block,
    and a full block has every pair of its (valid) rows and keys visible."""
    n = 0
    for S, C in SELFTEST:
        part, full = flex_blocks(S, C)
        tok = token_mask_np(S, C)
        T = S - C
        nqb, nkb = part.shape[1:]
        pad = np.zeros((HQ, nqb * B, nkb * B), bool)
        pad[:, :T, :S] = tok
        blk = pad.reshape(HQ, nqb, B, nkb, B)
        some = blk.any(axis=(2, 4))
        valid = np.zeros((nqb * B, nkb * B), bool)
        valid[:T, :S] = True
        vb = valid.reshape(nqb, B, nkb, B)
        every = (blk | ~vb[None]).all(axis=(2, 4))
        assert not (part & full).any(), (S, C, "block both partial and full")
        assert not (some & ~(part | full)).any(), (S, C, "visible pair in an unlisted block")
        assert not (full & ~every).any(), (S, C, "full block with a masked pair")
        assert (full == (every & some)).all(), (S, C, "a fully visible block is not marked full")
        n += 1
    # visible_pairs (the useful-FLOP count) against the token mask
    for S, C in ((2048, 0), (2048, 1000), (3000, 2900)):
        assert visible_pairs(S, C, True) == token_mask_np(S, C).sum(), (S, C)
        assert visible_pairs(S, C, False) == HQ * sum(C + t + 1 for t in range(S - C)), (S, C)
    print(f"selftest: {n} shapes, block lists and FLOP counts match the token mask")
    return 0


# ---------------------------------------------------------------------------- torch part

def bench(fn):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def check_rows(T):
    """The query rows compared against the reference: all of a small problem, else the
    first and last 64 and 128 spread between (fixed, so every backend sees the same)."""
    if T <= 4096:
        return np.arange(T)
    rng = np.random.default_rng(1)
    mid = rng.choice(np.arange(64, T - 64), 128, replace=False)
    return np.unique(np.concatenate([np.arange(64), mid, np.arange(T - 64, T)]))


def reference_rows(q, k, v, S, C, rows, sparse):
    """fp32 attention for new-token rows `rows` with the token mask; q [1, HQ, T, D],
    k/v [1, Hk, S, D] with any Hk dividing HQ. Returns [HQ, R, D]."""
    import torch
    dev = q.device
    r = torch.as_tensor(rows, device=dev)
    grp = HQ // k.shape[1]
    p = (C + r)[:, None]
    j = torch.arange(S, device=dev)[None, :]
    out = []
    for h0 in range(0, HQ, 8):
        h1 = min(h0 + 8, HQ)  # heads a chunk (28 query heads: the last chunk holds 4)
        hs = torch.arange(h0, h1, device=dev)
        qq = q[0, h0:h1][:, r].float()
        kk = k[0, hs // grp].float()
        vv = v[0, hs // grp].float()
        m = (j <= p)[None]
        if sparse:
            qb, kb = p // B, j // B
            m = m & (((qb - kb) < LB)[None] | (((kb[None] + hs[:, None, None] * head_step() + 1) % V) == 0))
        sc = torch.matmul(qq, kk.transpose(1, 2)) * SCALE
        sc = sc.masked_fill(~m, float("-inf"))
        out.append(torch.matmul(torch.softmax(sc, dim=-1), vv))
        del sc, m
    return torch.cat(out, 0)


def rel_l2(out, ref):
    import torch
    return (torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)).item()


def check_then_time(fn, q, k, v, S, C, sparse, time_it=True):
    """Runs fn once, compares with the fp32 reference, times it only when it is right."""
    import torch
    out = fn()
    torch.cuda.synchronize()
    rows = check_rows(S - C)
    ref = reference_rows(q, k, v, S, C, rows, sparse)
    err = rel_l2(out[0][:, torch.as_tensor(rows, device=out.device)], ref)
    del out, ref
    res = {"rel_l2": err, "valid": err <= TOL, "rows_checked": int(len(rows))}
    if res["valid"] and time_it:
        res["ms"] = bench(fn)
    elif not res["valid"]:
        res["error"] = f"invalid: rel L2 {err:.3g} > {TOL} against the fp32 token-mask reference (not timed)"
    return res


def sdpa_case(S, C, backend, time_it=True):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    T = S - C
    g = torch.Generator(device="cuda").manual_seed(S * 7 + C)
    q = torch.randn(1, HQ, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, HQ, S, D, device="cuda", dtype=torch.bfloat16, generator=g)  # GQA expanded outside the timing
    v = torch.randn(1, HQ, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    if C == 0:
        def fn():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=SCALE)
    else:
        from torch.nn.attention.bias import causal_lower_right
        bias = causal_lower_right(T, S)

        def fn():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=SCALE)
    return check_then_time(fn, q, k, v, S, C, sparse=False, time_it=time_it)


_flex = None


def flex_case(S, C, full_blocks=True, time_it=True, torch_mask=False):
    """FlexAttention with the block lists of flex_blocks(); full_blocks=False lists every
    block as partial (the mask_mod runs everywhere: slower, and immune to a wrong "full");
    torch_mask=True lets torch build the BlockMask from the mask_mod (create_block_mask,
    small shapes only: a known-good construction to pin a failure on)."""
    global _flex
    import torch
    import torch._dynamo
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
    torch._dynamo.config.recompile_limit = 256  # one compile per shape and context (docs/design.md §10)
    torch._dynamo.config.cache_size_limit = 256
    if _flex is None:
        _flex = torch.compile(flex_attention, dynamic=False)
    T = S - C
    part, full = flex_blocks(S, C)
    if not full_blocks:
        part, full = part | full, None

    def to_blocks(m):
        cnt = m.sum(-1).astype(np.int32)
        idx = np.argsort(~m, axis=-1, kind="stable").astype(np.int32)  # listed blocks first, ascending
        return (torch.from_numpy(np.ascontiguousarray(cnt))[None].cuda(),
                torch.from_numpy(np.ascontiguousarray(idx))[None].cuda())

    kv_num, kv_idx = to_blocks(part)
    full_num, full_idx = to_blocks(full) if full is not None else (None, None)
    hs_ = head_step()
    ctx = C

    def mask_mod(b, h, q_idx, kv_idx):
        p = q_idx + ctx  # q_idx counts new tokens; kv_idx is absolute
        qb = p // B
        kb = kv_idx // B
        ok = ((qb - kb) < LB) | (((kb + h * hs_ + 1) % V) == 0)
        return (kv_idx <= p) & ok

    if torch_mask:
        from torch.nn.attention.flex_attention import create_block_mask
        bm = create_block_mask(mask_mod, 1, HQ, T, S, device="cuda", BLOCK_SIZE=B)
    else:
        bm = BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=B, mask_mod=mask_mod,
                                      seq_lengths=(T, S))
    g = torch.Generator(device="cuda").manual_seed(S * 7 + C)
    q = torch.randn(1, HQ, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, HKV, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, HKV, S, D, device="cuda", dtype=torch.bfloat16, generator=g)
    opts = {"BLOCK_M": 64, "BLOCK_N": 64}

    def fn():
        return _flex(q, k, v, block_mask=bm, scale=SCALE, enable_gqa=True, kernel_options=opts)
    res = check_then_time(fn, q, k, v, S, C, sparse=True, time_it=time_it)
    res["blocks"] = {"partial": int(part.sum()), "full": int(full.sum()) if full is not None else 0}
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="compare_torch.json")
    ap.add_argument("--quick", action="store_true", help="only " + ", ".join(QUICK))
    ap.add_argument("--cases", help="comma-separated case names")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds; later cases are skipped past it")
    ap.add_argument("--shape", default=f"{HQ}/{HKV}/{D}",
                    help="query heads / KV heads / head dim, as bench_prefill's --shape (default: Phi-3-small)")
    ap.add_argument("--selftest", action="store_true", help="check the block lists with numpy and exit")
    args = ap.parse_args()
    set_shape(args.shape)
    if args.selftest:
        return selftest()
    import torch
    start = time.time()
    cases = CASES
    if args.quick:
        cases = [c for c in CASES if c[0] in QUICK]
    if args.cases:
        want = args.cases.split(",")
        cases = [c for c in CASES if c[0] in want]
    # Gate: every backend on small shapes, all rows, not timed. FlexAttention with full
    # blocks and with every block partial, so a wrong result can be pinned on the lists.
    gate = {}
    for S, C in GATE:
        for key, f in (("sdpa_cudnn", lambda: sdpa_case(S, C, "cudnn", False)),
                       ("sdpa_flash", lambda: sdpa_case(S, C, "flash", False)),
                       ("flex", lambda: flex_case(S, C, True, False)),
                       ("flex_partial_only", lambda: flex_case(S, C, False, False)),
                       ("flex_create_block_mask", lambda: flex_case(S, C, True, False, torch_mask=True))):
            try:
                r = f()
                gate[f"S={S} C={C} {key}"] = r["rel_l2"]
            except Exception as e:
                gate[f"S={S} C={C} {key}"] = f"{type(e).__name__}: {str(e)[:200]}"
    print("gate rel L2 vs fp32 token-mask reference:", json.dumps(gate, indent=0), flush=True)
    flex_full_ok = all(isinstance(gate.get(f"S={S} C={C} flex"), float) and gate[f"S={S} C={C} flex"] <= TOL
                       for S, C in GATE)
    rows = []
    for name, S, C in cases:
        sparse_flops = 4 * D * visible_pairs(S, C, True)
        dense_flops = 4 * D * visible_pairs(S, C, False)
        row = {"name": name, "S": S, "C": C}
        flex_fn = (lambda: flex_case(S, C, True)) if flex_full_ok else (lambda: flex_case(S, C, False))
        for key, f in (("sdpa_cudnn", lambda: sdpa_case(S, C, "cudnn")), ("sdpa_flash", lambda: sdpa_case(S, C, "flash")),
                       ("flex" if flex_full_ok else "flex_partial_only", flex_fn)):
            if time.time() - start > args.budget:
                row[key] = {"error": "skipped: time budget"}
                continue
            try:
                r = f()
                if "ms" in r:
                    flops = sparse_flops if key.startswith("flex") else dense_flops
                    r.update({"useful_tflops": flops / r["ms"] / 1e9, "sparse_job_tflops": sparse_flops / r["ms"] / 1e9})
                row[key] = r
            except Exception as e:  # a backend that cannot run a shape is reported, not fatal
                row[key] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "shape": f"{HQ}/{HKV}/{D}",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "tolerance_rel_l2": TOL, "gate_rel_l2": gate, "flex_full_blocks_valid": flex_full_ok, "cases": rows}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    fk = "flex" if flex_full_ok else "flex_partial_only"
    print(f"\n{'case':26} {'cudnn ms':>9} {'flash ms':>9} {fk + ' ms':>12} {'TF':>6}  (nan: invalid or skipped)")
    for r in rows:
        def g(k, f="ms"):
            return r[k].get(f, float("nan")) if isinstance(r.get(k), dict) else float("nan")
        print(f"{r['name']:26} {g('sdpa_cudnn'):9.3f} {g('sdpa_flash'):9.3f} {g(fk):12.3f} {g(fk, 'useful_tflops'):6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
