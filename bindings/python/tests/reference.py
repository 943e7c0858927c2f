"""A float64 reference of bspa's attention, built from the token-level mask of the
whole ctx + q sequence (docs/design.md §2), independent of the library's layouts."""

from __future__ import annotations

import numpy as np


def strided_allowed(h: int, qb: int, kb: int, *, local_blocks: int, vert_stride: int, num_heads_total: int,
                    homo_head: bool = False) -> bool:
    s = 0 if homo_head else max(1, vert_stride // num_heads_total)
    return kb <= qb and (qb - kb < local_blocks or (kb + h * s + 1) % vert_stride == 0)


def token_mask(num_heads: int, ctx: int, q: int, block_size: int, allowed) -> np.ndarray:
    """mask[h, i, j]: new token i (absolute position ctx + i) sees key j of the ctx + q."""
    mask = np.zeros((num_heads, q, ctx + q), dtype=bool)
    for h in range(num_heads):
        for i in range(q):
            p = ctx + i
            for j in range(p + 1):
                mask[h, i, j] = allowed(h, p // block_size, j // block_size)
    return mask


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float):
    """q [Tq, Hq, D] (the new tokens); k, v [ctx + Tq, Hkv, D]; mask [Hq, Tq, ctx + Tq].
    Returns (out [Tq, Hq, D], lse [Hq, Tq]) in float64."""
    hq, hkv = q.shape[1], k.shape[1]
    group = hq // hkv
    out = np.empty(q.shape, dtype=np.float64)
    lse = np.empty((hq, q.shape[0]), dtype=np.float64)
    for h in range(hq):
        kh = k[:, h // group, :].astype(np.float64)
        vh = v[:, h // group, :].astype(np.float64)
        logits = scale * (q[:, h, :].astype(np.float64) @ kh.T)
        logits = np.where(mask[h], logits, -np.inf)
        m = logits.max(axis=1, keepdims=True)
        p = np.exp(logits - m)
        denom = p.sum(axis=1, keepdims=True)
        out[:, h, :] = (p / denom) @ vh
        lse[h] = (np.log(denom) + m)[:, 0]
    return out, lse


def rel_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return float(np.linalg.norm(a - e) / np.linalg.norm(e))
