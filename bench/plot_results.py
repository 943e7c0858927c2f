#!/usr/bin/env python3
"""PNG of a bench_prefill JSON (and optionally compare_torch JSON): left, attention time of
the 16 sparse + 16 dense layer stack against the prefix hit rate (8k and 32k, aligned and
unaligned contexts); right, useful TFLOP/s per case, sparse and dense, with torch SDPA
(cuDNN) beside the dense rows.
    python3 bench/plot_results.py bench/results/h200_7f0a740_bench_prefill.json \
        [--torch bench/results/h200_7f0a740_compare_torch.json] --out /tmp/h200.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--torch")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    b = json.load(open(a.bench))
    t = json.load(open(a.torch)) if a.torch else None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    for S in (8192, 32768):
        for aligned, style in ((True, "-o"), (False, "--x")):
            rows = [r for r in b["sweep"] if r["S"] == S and r["aligned"] == aligned]
            ax1.plot([r["hit"] for r in rows], [r["stack_ms"] for r in rows], style,
                     label=f"{S // 1024}k, {'aligned' if aligned else 'unaligned'} C")
    ax1.set_yscale("log")
    ax1.set_xlabel("prefix cache hit rate (%)")
    ax1.set_ylabel("attention ms per step (16 sparse + 16 dense layers)")
    ax1.set_title("Phi-3-small layer stack vs prefix hit rate")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()
    names = [c["name"] for c in b["cases"] if c["layout"] == "sparse"]
    sp = {c["name"]: c["useful_tflops"] for c in b["cases"] if c["layout"] == "sparse"}
    de = {c["name"]: c["useful_tflops"] for c in b["cases"] if c["layout"] == "dense"}
    x = range(len(names))
    w = 0.21

    def valid_tflops(key):
        """Only rows the script verified against its fp32 reference (no "valid": older
        files, which did not check; their FlexAttention rows are known wrong, so dropped)."""
        out = {}
        for c in t["cases"]:
            r = c.get(key)
            if isinstance(r, dict) and r.get("useful_tflops") and (r.get("valid") or ("valid" not in r and key != "flex")):
                out[c["name"]] = r["useful_tflops"]
        return out
    who = b.get("backend", "bspa")  # "bspa auto" (kernel family by compute capability), "bspa sm80", ...
    ax2.bar([i - 1.5 * w for i in x], [sp[n] for n in names], w, label=f"{who} sparse")
    if t:
        fx = valid_tflops("flex") or valid_tflops("flex_partial_only")
        ax2.bar([i - 0.5 * w for i in x], [fx.get(n) or 0 for n in names], w,
                label=f"FlexAttention sparse (torch {t.get('torch', '?')}, checked)")
    ax2.bar([i + 0.5 * w for i in x], [de[n] for n in names], w, label=f"{who} dense")
    if t:
        cud = valid_tflops("sdpa_cudnn")
        ax2.bar([i + 1.5 * w for i in x], [cud.get(n) or 0 for n in names], w, label="torch SDPA cuDNN dense")
    ax2.axhline(370, color="k", ls=":", lw=1, label="milestone 370 (vLLM Triton 359)")
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    ax2.set_ylabel("useful TFLOP/s")
    ax2.set_title(f"{b['gpu']}, commit {b['commit']}")
    ax2.set_ylim(0, 1.35 * max(max(sp.values()), max(de.values())))  # room for the legend
    ax2.legend(fontsize=8, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
