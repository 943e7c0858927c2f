#!/usr/bin/env python3
"""Per-item phases of the sm90a prefill kernel from a clock64 trace.

The trace comes from a diagnostic build (not part of the library): for the current kernel
bench/results/session17/diag_trace_host_profile.diff (16 words per slot: pass 16), for the
session-4 kernel bench/results/h200_sm90_trace_instrumentation.patch at commit 0c66ae2, made
against bf8eba1: each consumer warpgroup's first warp stamps
an item's start, Q landed, first S done, first softmax done, key loop done and epilogue
done, counts its steps and masked steps, and stamps the phases of its sixth step; the
producer stamps the start and the end of its fills. The launch function writes one launch
(BSPA_SM90_TRACE_LAUNCH, default the fourth) to BSPA_SM90_TRACE_FILE.
    python3 bench/trace_phases.py TRACE.bin [16]   (16: the build with per-step stamps)
Prints the mean cycles per phase, a least-squares fit of item cycles on (steps, masked
steps), and the per-step phases. Cycles are SM clocks (clock64), not time.
"""
import sys

import numpy as np

d = np.fromfile(sys.argv[1], dtype=np.uint64)
W = int(sys.argv[2]) if len(sys.argv) > 2 else 8  # 64-bit words per (CTA, round, slot)
ctas, units, items, gx, gy, gz, TC, TR = d[:8].astype(np.int64)
a = d[8:].reshape(TC, TR, 3, W).astype(np.int64)

rows = []
for b in range(ctas):
    for r in range(TR):
        c = a[b, r]
        if c[0, 0] == 0:
            continue
        for cg in range(2):
            t = c[cg]
            rows.append((b, r, cg, *t[:6], t[6] & 0xFFFF, (t[6] >> 16) & 0xFFFF, c[2, 0], c[2, 1]))
R = np.array(rows)
b, r, cg, t0, t1, t2, t3, t4, t5, steps, masked, p0, p1 = R.T
print(f"CTAs {ctas}, units {units}, items {items}; traced (item, warpgroup) pairs {len(R)}")
span = np.array([t5[b == x].max() - t0[b == x].min() for x in range(ctas)])
print(f"CTA span: min {span.min()} median {np.median(span):.0f} max {span.max()} cycles (max/mean {span.max() / span.mean():.3f})")
print(f"steps per item {steps.mean():.2f}, masked steps {masked.mean():.2f}")
dur = t5 - t0
for name, v in [("start -> Q landed", t1 - t0), ("Q -> first S done", t2 - t1), ("first softmax", t3 - t2),
                ("key loop", t4 - t3), ("epilogue", t5 - t4)]:
    print(f"  {name:20s} mean {v.mean():8.0f} cycles  {v.sum() / dur.sum() * 100:5.1f}%")
ok = steps > 1
print(f"  loop cycles per step (items of 2+ steps): mean {((t4 - t3)[ok] / (steps[ok] - 1)).mean():.0f}")
X = np.stack([np.ones(len(dur)), steps, masked], 1)
coef, *_ = np.linalg.lstsq(X, dur, rcond=None)
print(f"  item cycles ~ {coef[0]:.0f} + {coef[1]:.0f} * steps + {coef[2]:.0f} * masked steps")
gaps = []
for x in range(ctas):
    for g in range(2):
        m = (b == x) & (cg == g)
        o = np.argsort(r[m])
        gaps += list(t0[m][o][1:] - t5[m][o][:-1])
print(f"  gap between a warpgroup's items {np.mean(gaps):.0f}; |warpgroup 1 - warpgroup 2| at item start "
      f"{np.abs(t0[cg == 0] - t0[cg == 1]).mean():.0f}")
print(f"  the producer starts an item {(t0 - p0)[cg == 0].mean():.0f} cycles before the consumers")
if W == 16:
    st = np.array([a[x, y, g, 8:16] for x in range(ctas) for y in range(TR) for g in range(2)
                   if a[x, y, g, 8] != 0 and (a[x, y, g, 8:16] != 0).all()])
    if len(st) == 0:
        print("  no traced item had a sixth step (short items): no per-step phases")
        sys.exit(0)
    names = ["take_step (K landed)", "fences, issue S", "wait V", "issue PV", "wait S", "softmax", "wait PV"]
    dif = np.diff(st, axis=1)
    print(f"  phases of the sixth step ({len(st)} samples):")
    for i, nm in enumerate(names):
        print(f"    {nm:22s} median {np.median(dif[:, i]):6.0f}  mean {dif[:, i].mean():6.0f}  p90 {np.percentile(dif[:, i], 90):6.0f}")
    print(f"    total median {np.median(st[:, 7] - st[:, 0]):.0f}")
