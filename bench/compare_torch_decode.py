#!/usr/bin/env python3
"""Torch baselines for bench_decode on the same GPU, same shapes, same run (Phi-3-small:
Hq 32, Hkv 8, D 128, bf16, one new token per sequence after `ctx` cached ones):

- SDPA dense decode: q [B, 32, 1, 128] over contiguous K/V [B, 8, S, 128] with
  enable_gqa=True (the anchor: a contiguous decode, no page table);
- FlexAttention's decoding path (q length 1) with the same mask bspa computes: dense, or
  the Phi-3-small strided rule on absolute 64-token blocks (local 16, stride 8,
  heterogeneous heads), as a BlockMask built by create_block_mask at 64-token KV blocks.

Each backend's output is checked against an fp32 reference with the token mask on the
first sequence before it is timed (rel L2 <= 1e-2); timings are triton.testing.do_bench
medians. "bytes" are the K/V the decode must read, as bench_decode counts them.

    python3 bench/compare_torch_decode.py --json out.json [--quick] [--budget SECONDS]
"""
import argparse
import datetime
import json
import time

HQ, HKV, D, B, LB, V = 32, 8, 128, 64, 16, 8
SCALE = 1.0 / 128
CASES = [("64x8191", 64, 8191), ("8x131071", 8, 131071), ("256x2047", 256, 2047), ("1x32767", 1, 32767),
         ("128x4095", 128, 4095), ("8x8191", 8, 8191), ("1x8191", 1, 8191)]


def kv_bytes(n, ctx, sparse):
    kv_len = ctx + 1
    group = HQ // HKV
    keys = 0
    qb = (kv_len - 1) // B
    for g in range(HKV):
        for kb in range((kv_len + B - 1) // B):
            vis = (not sparse) or any(qb - kb < LB or (kb + (g * group + hh) + 1) % V == 0 for hh in range(group))
            if vis:
                keys += min(B, kv_len - kb * B)
    return keys * n * D * 2 * 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget", type=float, default=240)
    args = ap.parse_args()
    import torch
    import triton.testing
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    import torch._dynamo
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.cache_size_limit = 64
    flex = torch.compile(flex_attention, dynamic=False)
    dev = "cuda"
    t_start = time.time()
    rows = []
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    print(f"{'case':10} {'layout':6} {'backend':6} {'ms':>9} {'GB':>7} {'GB/s':>7}  check")
    for name, n, ctx in CASES:
        if time.time() - t_start > args.budget:
            print("budget spent; stopping")
            break
        S = ctx + 1
        g = torch.Generator(device=dev).manual_seed(1)
        q = torch.randn(n, HQ, 1, D, device=dev, dtype=torch.bfloat16, generator=g)
        k = torch.randn(n, HKV, S, D, device=dev, dtype=torch.bfloat16, generator=g)
        v = torch.randn(n, HKV, S, D, device=dev, dtype=torch.bfloat16, generator=g)

        def ref(mask):  # fp32 reference of sequence 0: mask [H, S] bool
            kk = k[0].float().repeat_interleave(HQ // HKV, 0)
            vv = v[0].float().repeat_interleave(HQ // HKV, 0)
            s = (q[0].float() @ kk.transpose(-1, -2)) * SCALE  # [H, 1, S]
            s = s.masked_fill(~mask[:, None, :], float("-inf"))
            return torch.softmax(s, -1) @ vv

        kv = torch.arange(S, device=dev)
        h = torch.arange(HQ, device=dev)[:, None]
        qb, kb = ctx // B, kv // B
        sparse_mask = (kb[None, :] <= qb) & (((qb - kb[None, :]) < LB) | (((kb[None, :] + h + 1) % V) == 0))
        for layout in ("dense", "sparse"):
            sparse = layout == "sparse"
            nbytes = kv_bytes(n, ctx, sparse)
            mask = sparse_mask if sparse else torch.ones(HQ, S, dtype=torch.bool, device=dev)
            want = ref(mask)
            backends = []
            if not sparse:
                backends.append(("sdpa", lambda: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, scale=SCALE, enable_gqa=True)))

            def mask_mod(b, hh, q_idx, kv_idx, sparse=sparse, ctx=ctx):
                if not sparse:
                    return kv_idx <= ctx + q_idx
                qblk = (ctx + q_idx) // B
                kblk = kv_idx // B
                return (kv_idx <= ctx + q_idx) & (((qblk - kblk) < LB) | (((kblk + hh + 1) % V) == 0))
            try:
                bm = create_block_mask(mask_mod, None, HQ if sparse else None, 1, S, device=dev, BLOCK_SIZE=(128, 64))
                backends.append(("flex", lambda bm=bm: flex(q, k, v, block_mask=bm, scale=SCALE, enable_gqa=True)))
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"{name:10} {layout:6} flex   block mask failed: {type(e).__name__}: {e}")
            for bname, fn in backends:
                try:
                    got = fn()
                    err = ((got[0].float() - want).norm() / want.norm()).item()
                    ok = err <= 1e-2
                    ms = triton.testing.do_bench(fn, warmup=25, rep=100 if args.quick else 300) if ok else float("nan")
                except Exception as e:  # noqa: BLE001
                    print(f"{name:10} {layout:6} {bname:6} failed: {type(e).__name__}: {str(e)[:200]}")
                    continue
                print(f"{name:10} {layout:6} {bname:6} {ms:9.4f} {nbytes / 1e9:7.3f} {nbytes / (ms * 1e-3) / 1e9:7.0f}  "
                      f"rel_l2={err:.1e}{'' if ok else ' INVALID'}", flush=True)
                rows.append({"case": name, "layout": layout, "backend": bname, "ms": ms, "bytes": nbytes,
                             "gbps": nbytes / (ms * 1e-3) / 1e9, "rel_l2": err, "valid": ok})
        del q, k, v
        torch.cuda.empty_cache()
    # The read bandwidth of the same GPU in the same run: a 2 GB device-to-device copy
    # (bytes read + written) and a 2 GB read (sum), the floor's denominators.
    x = torch.empty(1 << 30, dtype=torch.bfloat16, device=dev).normal_()
    y = torch.empty_like(x)
    copy_ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=10, rep=200)
    read_ms = triton.testing.do_bench(lambda: x.sum(dtype=torch.float32), warmup=10, rep=200)
    bw = {"copy_gbps": 2 * x.numel() * 2 / (copy_ms * 1e-3) / 1e9, "read_gbps": x.numel() * 2 / (read_ms * 1e-3) / 1e9}
    print(f"copy {bw['copy_gbps']:.0f} GB/s (read + write), read (sum) {bw['read_gbps']:.0f} GB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "bandwidth": bw, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
