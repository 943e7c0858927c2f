#!/usr/bin/env python3
"""Would FP8 tensor-core operands keep issue 20's accuracy contract? A numerical study, CPU only.

e4m3 pages run today with f16 operands: the producer widens every e4m3 tile into f16 stages
(prefill) or registers (decode), so the matrix products are exact in the codes and the only
error is the pages' own quantization. FP8 matrix instructions (wgmma / mma.sync with e4m3
operands) would skip the widening and halve the shared memory a stage needs, but both
operands must be e4m3: q for S = q K^T and P for O = P V. This script emulates, in float64,
what each operand choice computes for one KV head and compares it with the contract's
reference (fp32 attention over the same dequantized K/V, q unquantized):

  f16          today's kernels: q exact in f16 (a bf16 q shifted by a power of two), P rounded
               to f16, fp32 accumulation
  e4m3         q and P each one e4m3 operand (FlashAttention-3's fp8 path)
  split        q and P each as hi + lo, two e4m3 operands (hi = e4m3(x), lo = e4m3(x - hi)),
               so each product is two instructions; fp32 accumulation
  split/acc14  split, with the accumulation of the FP8 tensor core modelled as keeping 14
               mantissa bits at every k = 32 instruction (DeepSeek-V3 reports ~14 bits on
               Hopper), across D for S and across the whole key range for O (one level)
  split/2lvl   split/acc14, but O's tensor-core accumulator holds one step of 128 keys and
               is added to an fp32 O in registers after each (two-level accumulation)
  split-q      q split, P one e4m3 operand
  split-p      q one e4m3 operand, P split

q and P are scaled per row by a power of two before quantizing (q's largest |value| into
[256, 448], as the f16 path's shift does for f16; P <= 2^8 as under the kernels' lazy
rescale), so no operand saturates and small ones keep their range. K and V: N(0,1) values
quantized to e4m3 with a per-head scale (amax / 448, or 1.0 as vLLM's default).

    python3 bench/fp8_operand_accuracy.py [--rows 64] [--keys 512,8192,32768] [--seed 1]

Prints rel L2 and max error per case and operand choice against the reference. The contract
(issue 20) asks rel L2 <= 1e-2 against it on every path.
"""
import argparse

import numpy as np


def e4m3_values():
    """The 127 finite non-negative e4m3 values, ascending, and their codes (bias 7, no inf)."""
    vals, codes = [], []
    for code in range(0x7F):  # 0x7F is NaN
        e, m = code >> 3, code & 7
        v = (m / 8) * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        vals.append(v)
        codes.append(code)
    return np.array(vals), np.array(codes)


E4M3, E4M3_CODES = e4m3_values()


def to_e4m3(x):
    """Round to the nearest e4m3 value, ties to the even code, saturating at +-448."""
    a = np.minimum(np.abs(x), 448.0)
    i = np.clip(np.searchsorted(E4M3, a), 1, len(E4M3) - 1)
    lo, hi = E4M3[i - 1], E4M3[i]
    pick_hi = (a - lo > hi - a) | ((a - lo == hi - a) & (E4M3_CODES[i] % 2 == 0))
    return np.sign(x) * np.where(pick_hi, hi, lo)


def to_f16(x):
    return x.astype(np.float16).astype(np.float64)


def to_bf16(x):
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def row_pow2(x, top):
    """Per-row power of two bringing the row's largest |x| to [top / 2, top)."""
    m = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-30)
    return 2.0 ** (np.floor(np.log2(top / m)) - (np.log2(top / m) % 1 == 0))


def split(x):
    hi = to_e4m3(x)
    return hi, to_e4m3(x - hi)


def keep_bits(x, bits):
    """Truncate toward zero to `bits` mantissa bits (the model of the FP8 accumulator)."""
    e = np.floor(np.log2(np.maximum(np.abs(x), 1e-300)))
    q = 2.0 ** (e - bits)
    return np.trunc(x / q) * q


def matmul_acc(a, b, bits, promote=None):
    """a [m, k] @ b [k, n]; bits None: exact; else k = 32 chunks, accumulator kept to `bits`,
    and with `promote` every `promote` of k added to an exact (fp32) total and restarted."""
    if bits is None:
        return a @ b
    total = np.zeros((a.shape[0], b.shape[1]))
    acc = np.zeros_like(total)
    for c in range(0, a.shape[1], 32):
        acc = keep_bits(acc + a[:, c : c + 32] @ b[c : c + 32], bits)
        if promote and (c + 32) % promote == 0:
            total, acc = total + acc, np.zeros_like(acc)
    return total + acc


def attention(q, kc, vc, k_scale, v_scale, sm_scale, mode):
    """One head's rows q [m, D] over e4m3 codes' values kc, vc [n, D] (dequantized = scale x)."""
    bits = 14 if mode in ("split/acc14", "split/2lvl") else None
    promote = 128 if mode == "split/2lvl" else None
    if mode == "f16":
        qs = row_pow2(q, 2.0**15)
        q_ops = [to_f16(q * qs)]
    else:
        qs = row_pow2(q, 448.0)
        q_ops = list(split(q * qs)) if mode in ("split", "split/acc14", "split/2lvl", "split-q") else [to_e4m3(q * qs)]
    s = sum(matmul_acc(o, kc.T, bits) for o in q_ops) / qs * (k_scale * sm_scale)
    m = s.max(axis=1, keepdims=True)
    p = np.exp(s - m) * 2.0**8  # P <= 2^8, as under the lazy rescale
    l = p.sum(axis=1, keepdims=True)  # the kernels sum P in fp32 registers
    if mode == "f16":
        p_ops = [to_f16(p)]
    elif mode in ("split", "split/acc14", "split/2lvl", "split-p"):
        p_ops = list(split(p))
    else:
        p_ops = [to_e4m3(p)]
    o = sum(matmul_acc(o, vc, bits, promote) for o in p_ops)
    return o / l * v_scale


def reference(q, k, v, sm_scale):
    s = (q @ k.T) * sm_scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v) / p.sum(axis=1, keepdims=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--keys", default="512,8192,32768")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    D = args.head_dim
    modes = ["f16", "e4m3", "split", "split/acc14", "split/2lvl", "split-q", "split-p"]
    print(f"rows {args.rows}, head dim {D}; rel L2 (max abs error) against fp32 attention over the same e4m3 K/V")
    print(f"{'keys':>6} {'K/V scale':>10} {'softmax scale':>13} | " + " | ".join(f"{m:>19}" for m in modes))
    for n in [int(x) for x in args.keys.split(",")]:
        q = to_bf16(rng.standard_normal((args.rows, D)))
        k = rng.standard_normal((n, D))
        v = rng.standard_normal((n, D))
        for scale_kind in ("amax", "1.0"):
            ks = np.abs(k).max() / 448 if scale_kind == "amax" else 1.0
            vs = np.abs(v).max() / 448 if scale_kind == "amax" else 1.0
            kc, vc = to_e4m3(k / ks), to_e4m3(v / vs)
            for sm_scale in (D**-0.5, 1.0 / 16):
                ref = reference(q, kc * ks, vc * vs, sm_scale)
                cells = []
                for mode in modes:
                    out = attention(q, kc, vc, ks, vs, sm_scale, mode)
                    rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
                    cells.append(f"{rel:8.2e} ({np.abs(out - ref).max():7.1e})")
                print(f"{n:>6} {scale_kind:>10} {sm_scale:>13.4f} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
