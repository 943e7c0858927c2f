#!/usr/bin/env python3
"""Side-by-side baselines for bench_prefill on the same GPU, same shapes, same run:
torch SDPA (cuDNN and flash backends; dense causal, lower-right aligned when C > 0) and
FlexAttention with the Phi-3-small block-sparse mask (BlockMask.from_kv_blocks over
64-token blocks, partial diagonal blocks with a causal mask_mod offset by the context,
BLOCK_M/N 64, compiled once per shape). Timings: triton.testing.do_bench medians.

    python3 bench/compare_torch.py --json out.json [--quick]
"""
import argparse
import datetime
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HQ, HKV, D, B, LB, V = 32, 8, 128, 64, 16, 8
SCALE = 1.0 / 128
CASES = [
    ("8k C=0", 8192, 0),
    ("32k C=0", 32768, 0),
    ("32k C=16k", 32768, 16384),
    ("32k C=24k", 32768, 24576),
    ("32k C=30k", 32768, 30720),
    ("32768 C=30000 (unaligned)", 32768, 30000),
    ("128k C=0", 131072, 0),
    ("128k C=96k", 131072, 98304),
]


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


def bench(fn):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def sdpa_case(S, C, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    T = S - C
    q = torch.randn(1, HQ, T, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, HQ, S, D, device="cuda", dtype=torch.bfloat16)  # GQA expanded outside the timing
    v = torch.randn(1, HQ, S, D, device="cuda", dtype=torch.bfloat16)
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
    fn()
    torch.cuda.synchronize()
    return bench(fn)


_flex = None


def flex_case(S, C, check=False):
    global _flex
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
    import torch._dynamo
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.cache_size_limit = 64
    if _flex is None:
        _flex = torch.compile(flex_attention, dynamic=False)
    T = S - C
    nqb, nkb = (T + B - 1) // B, (S + B - 1) // B
    nab = nkb
    allow = allowed_blocks(nab, nkb)  # absolute blocks
    # q block i covers absolute positions [C + 64i, C + 64i + 63] (clipped): blocks a0..a1.
    i = np.arange(nqb)
    p0 = C + i * B
    p1 = np.minimum(S - 1, p0 + B - 1)
    a0, a1 = p0 // B, p1 // B
    any_ = allow[:, a0, :] | allow[:, a1, :]
    all_ = allow[:, a0, :] & allow[:, a1, :]
    kend = np.arange(nkb) * B + B - 1
    full = all_ & (kend[None, None, :] <= p0[None, :, None])
    partial = any_ & ~full

    def to_blocks(m):
        cnt = m.sum(-1).astype(np.int32)
        idx = np.argsort(~m, axis=-1, kind="stable").astype(np.int32)  # selected blocks first, ascending
        return (torch.from_numpy(cnt)[None].cuda(), torch.from_numpy(idx)[None].cuda())

    kv_num, kv_idx = to_blocks(partial)
    full_num, full_idx = to_blocks(full)
    hs = head_step()
    ctx = C

    def mask_mod(b, h, q_idx, kv_idx):
        p = q_idx + ctx
        qb = p // B
        kb = kv_idx // B
        ok = ((qb - kb) < LB) | (((kb + h * hs + 1) % V) == 0)
        return (kv_idx <= p) & ok

    bm = BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=B, mask_mod=mask_mod,
                                  seq_lengths=(T, S))
    q = torch.randn(1, HQ, T, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, HKV, S, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, HKV, S, D, device="cuda", dtype=torch.bfloat16)
    opts = {"BLOCK_M": 64, "BLOCK_N": 64}

    def fn():
        return _flex(q, k, v, block_mask=bm, scale=SCALE, enable_gqa=True, kernel_options=opts)
    out = fn()
    torch.cuda.synchronize()
    if check:  # the same mask built token by token, through SDPA's math path in fp32
        p = torch.arange(C, S, device="cuda")[:, None]
        j = torch.arange(S, device="cuda")[None, :]
        h = torch.arange(HQ, device="cuda")[:, None, None]
        qb, kb = p // B, j // B
        mask = (j <= p) & (((qb - kb) < LB) | (((kb + h * hs + 1) % V) == 0))
        kk = k.repeat_interleave(HQ // HKV, dim=1).float()
        vv = v.repeat_interleave(HQ // HKV, dim=1).float()
        ref = F.scaled_dot_product_attention(q.float(), kk, vv, attn_mask=mask[None], scale=SCALE)
        return (torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)).item()
    return bench(fn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="compare_torch.json")
    ap.add_argument("--quick", action="store_true", help="only the DESIGN.md table's five cases")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds; later cases are skipped past it")
    args = ap.parse_args()
    start = time.time()
    cases = CASES
    if args.quick:
        cases = [c for c in CASES if c[0] in ("8k C=0", "32k C=0", "32k C=24k", "128k C=0", "128k C=96k")]
    rows = []
    checks = {}
    for S, C in ((2048, 0), (2048, 1000), (4096, 1536)):  # is the FlexAttention mask right?
        try:
            checks[f"S={S} C={C}"] = flex_case(S, C, check=True)
        except Exception as e:
            checks[f"S={S} C={C}"] = f"{type(e).__name__}: {str(e)[:200]}"
    print("flex rel L2 vs token mask:", checks, flush=True)
    for name, S, C in cases:
        sparse_flops = 4 * D * visible_pairs(S, C, True)
        dense_flops = 4 * D * visible_pairs(S, C, False)
        row = {"name": name, "S": S, "C": C}
        for key, f in (("sdpa_cudnn", lambda: sdpa_case(S, C, "cudnn")), ("sdpa_flash", lambda: sdpa_case(S, C, "flash")),
                       ("flex", lambda: flex_case(S, C))):
            if time.time() - start > args.budget:
                row[key] = {"error": "skipped: time budget"}
                continue
            try:
                ms = f()
                flops = sparse_flops if key == "flex" else dense_flops
                row[key] = {"ms": ms, "useful_tflops": flops / ms / 1e9,
                            "sparse_job_tflops": sparse_flops / ms / 1e9}
            except Exception as e:  # a backend that cannot run a shape is reported, not fatal
                row[key] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "flex_check_rel_l2": checks, "cases": rows}
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\n{'case':26} {'cudnn ms':>9} {'flash ms':>9} {'flex ms':>9} {'flex TF':>8}")
    for r in rows:
        def g(k, f="ms"):
            return r[k].get(f, float("nan")) if isinstance(r.get(k), dict) else float("nan")
        print(f"{r['name']:26} {g('sdpa_cudnn'):9.3f} {g('sdpa_flash'):9.3f} {g('flex'):9.3f} {g('flex', 'useful_tflops'):8.1f}")


if __name__ == "__main__":
    sys.exit(main())
