#!/usr/bin/env python3
"""Reads call D's stamp logs (bench_decode --only 1x32767 with the `stamp` library): the
STAMP lines of thread 0 of every two-quad decode CTA, grouped into launches, and prints per
layout the medians over launches of where a batch-1 launch's time goes.
  python3 stamps.py res28d/decode_stamp_fp8.log [...]"""
import statistics as st
import sys

PHASES = ["metadata", "Q", "listing+first copies", "first tile landed", "tile loop",
          "key-group merge+unit", "count (atomic)"]


def launches(lines):
    rows = []
    for ln in lines:
        f = ln.split()
        x, y, gt0, gt1, last = int(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5])
        c = [int(v) for v in f[6:]]
        rows.append((gt0, gt1, last, c, (x, y)))
    rows.sort()
    n = len({r[4] for r in rows})  # CTAs a launch
    return [rows[i:i + n] for i in range(0, len(rows) - n + 1, n)], n


def report(name, lines):
    groups, n = launches(lines)
    if not groups:
        return
    ghz = st.median(r[3][-1] / max(r[1] - r[0], 1) for g in groups for r in g)
    span, start_spread, loop_end_p50, loop_end_max = [], [], [], []
    phase = [[] for _ in PHASES]
    merge_last, exit_other = [], []
    for g in groups:
        t0 = min(r[0] for r in g)
        span.append((max(r[1] for r in g) - t0) / 1e3)
        start_spread.append((max(r[0] for r in g) - t0) / 1e3)
        ends = [(r[0] - t0) / 1e3 + r[3][4] / ghz / 1e3 for r in g]  # loop end, us after the first start
        loop_end_p50.append(st.median(ends))
        loop_end_max.append(max(ends))
        for r in g:
            c, last = r[3], r[2]
            marks = c[:6] + ([c[6]] if last != -1 else [])
            prev = 0
            for i, m in enumerate(marks):
                phase[i].append((m - prev) / ghz / 1e3)
                prev = m
            (merge_last if last == 1 else exit_other).append((c[7] - prev) / ghz / 1e3)
    print(f"== {name}: {len(groups)} launches of {n} CTAs, SM clock ~{ghz:.2f} GHz (clock64 / globaltimer)")
    print(f"  first CTA start -> last CTA exit  {st.median(span):6.2f} us (median over launches)")
    print(f"  CTA start spread                  {st.median(start_spread):6.2f} us")
    print(f"  loop end: median CTA {st.median(loop_end_p50):6.2f} us, last CTA {st.median(loop_end_max):6.2f} us")
    print("  per CTA, median (p90) us:")
    for name_, vals in list(zip(PHASES, phase)) + [("exit (not the last CTA)", exit_other),
                                                   ("merge (the item's last CTA)", merge_last)]:
        if vals:
            s = sorted(vals)
            print(f"    {name_:28s} {st.median(s):6.2f} ({s[int(0.9 * (len(s) - 1))]:6.2f})")


def main():
    for path in sys.argv[1:]:
        block = []
        for ln in open(path, errors="replace"):
            if ln.startswith("STAMP"):
                block.append(ln)
            elif ln.startswith("1x32767"):
                f = ln.split()
                report(f"{path}: {f[2]} ({f[3]} ms)", block)
                block = []


if __name__ == "__main__":
    main()
