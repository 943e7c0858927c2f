#!/usr/bin/env python3
"""Bar chart of a bench_decode run beside torch's decode baselines of the same run:
K/V read bandwidth (GB/s of the bytes a decode must read) per case, dense and sparse.
    python3 bench/plot_decode.py BENCH_DECODE.json TORCH_DECODE.json --out decode.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("torch")
    ap.add_argument("--out", default="decode.png")
    a = ap.parse_args()
    b = json.load(open(a.bench))
    t = json.load(open(a.torch))
    cases = []
    for r in b["results"]:
        if r["case"] not in cases:
            cases.append(r["case"])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, layout in zip(axes, ("dense", "sparse")):
        series = []
        for ps in sorted({r["page_size"] for r in b["results"]}):
            series.append((f"bspa, {ps}-token pages",
                           {r["case"]: r["gbps"] for r in b["results"] if r["layout"] == layout and r["page_size"] == ps}))
        for be, label in (("sdpa", "torch SDPA (contiguous)"), ("flex", "FlexAttention decoding")):
            vals = {r["case"]: r["gbps"] for r in t["results"] if r["layout"] == layout and r["backend"] == be and r["valid"]}
            if vals:
                series.append((label, vals))
        w = 0.8 / len(series)
        for i, (label, vals) in enumerate(series):
            ax.bar([c + i * w for c in range(len(cases))], [vals.get(c, 0) for c in cases], w, label=label)
        ax.axhline(t["bandwidth"]["read_gbps"], color="k", ls="--", lw=1, label="read bandwidth (sum of 2 GB)")
        ax.set_xticks([c + 0.4 - w / 2 for c in range(len(cases))])
        ax.set_xticklabels(cases)
        ax.set_title(f"{layout} decode (Phi-3-small, bf16, q = 1)")
        ax.set_ylabel("GB/s of K/V a decode must read")
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{b['gpu']}, bspa {b['commit']}, {b['date']}")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
