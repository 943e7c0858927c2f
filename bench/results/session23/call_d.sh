#!/usr/bin/env bash
# Session 23's call D (~10 min; asked for an H200, ran on an H100: whatever card comes; carry [".device/s23", ".device/s22"]).
# Libraries (git-ignored; bench/results/session23/README.md says how to rebuild them):
#   old   d371e3a (.device/s22/main.so.3.xz): before this session's merges
#   base  956f0d8 (.device/s23/base.so.3.xz): main after the merges (c8acd83: e4m3 decode
#         kernels know their page class; 956f0d8: group boxes for interleaved 16-bit pages)
#   live  the change under test (.device/s23/live.so.3.xz): a fixed-shape batch's prefill
#         grid walks only the step's own work items (a device count written with the plan),
#         and takes the persistent sm90a kernel whatever its max_query_len (ce587e5)
#   gs    live + group boxes spread over the producer threads (a box a thread whatever the
#         page size; the common kernels' SASS is live's)
# Checks of live: bench_gpu_check (full), fp8 check, step check (a new bucket of
# max_query_len 64), the demo with --graphs and with --dtype fp8, memcheck + racecheck.
# Timings: bench_step base / live alternating, two rounds (issue 19: launch rows after
# waits, the 32-layer decode step eager and as a graph); bench_decode e4m3 old / live two
# rounds and bf16 old / live one (issue 20 on an H200, with the mixed-step rows);
# bench_prefill --quick base / live at pool pages 64 and 16, one round, and live alone at 32
# (issue 25). Checks of gs: bench_gpu_check (full), memcheck + racecheck.
# Mixed steps (bench_decode --pages 64, live) with the prefill grid capped at 0 (one CTA an
# SM), 112, 96, 80, 66, 48 CTAs (BSPA_CUDA_MIXED_PREFILL_CTAS).
# Interleaved pages (bench_prefill --kv-layout interleaved) live / gs at 32 and 16.
# Predictions: the graph row of the 32-layer decode step 64 x 1k drops by ~20 us a layer
# (the H200's 3160 us -> ~2600-2700, near its eager 2540); eager rows, decode and prefill
# within spread; some cap below 132 brings chunk + 63 decode under 0.95 of its parts
# (the decode grid streams K/V beside the compute-bound chunk instead of after it); e4m3
# decode at 16-token pages -1..-3% against old (c8acd83); gs
# brings interleaved 32-token pages up to 16-token ones (+3..+6%), 16-token ones 0..+2%.
set -uo pipefail
D=.device/s23; R=/tmp/res23; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in old base live gs; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; done
xz -dc .device/s22/main.so.3.xz > /tmp/libold/libbspa.so.3
xz -dc $D/base.so.3.xz > /tmp/libbase/libbspa.so.3
xz -dc $D/live.so.3.xz > /tmp/liblive/libbspa.so.3
xz -dc $D/gs.so.3.xz > /tmp/libgs/libbspa.so.3
mkdir -p $D/bgs/bench && cp $D/bin/bench/* $D/bgs/bench/ && cp /tmp/libgs/* $D/bgs/
mkdir -p $D/blive/bench && cp $D/bin/bench/* $D/blive/bench/ && cp /tmp/liblive/* $D/blive/
B=$D/bin
save() { tar czf $OUT/res23.tgz -C /tmp res23; }
export LD_LIBRARY_PATH=/tmp/liblive
t "checks (live)"
timeout 300 $B/bench/bench_gpu_check > $R/check.log 2>&1; echo "gpu_check rc=$? $(tail -1 $R/check.log)"; grep FAIL $R/check.log | head -8
BSPA_CUDA_MIXED_PREFILL_CTAS=66 timeout 200 $B/bench/bench_gpu_check --quick > $R/check_cap66.log 2>&1; echo "gpu_check --quick, mixed prefill grid capped at 66 rc=$? $(tail -1 $R/check_cap66.log)"
timeout 60 $B/bench/bench_fp8_check > $R/fp8check.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check.log)"
timeout 90 $B/bench/bench_step --check > $R/step_check.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check.log)"; grep -E "^--|FAIL" $R/step_check.log | head -8
timeout 60 $B/bspa-demo --graphs > $R/demo_graphs.log 2>&1; echo "demo --graphs rc=$?"; grep -iE "^graphs|^result" $R/demo_graphs.log | head -2
timeout 60 $B/bspa-demo --dtype fp8 > $R/demo_fp8.log 2>&1; echo "demo fp8 rc=$?"; grep -iE "^result" $R/demo_fp8.log | head -1
save
unset LD_LIBRARY_PATH
t sanitize; OUT=$R/san timeout 200 bash scripts/gpu_sanitize.sh $D/blive memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=" $R/sanitize.txt | head -4
t "checks (gs)"; LD_LIBRARY_PATH=/tmp/libgs timeout 300 $B/bench/bench_gpu_check > $R/check_gs.log 2>&1; echo "gpu_check gs rc=$? $(tail -1 $R/check_gs.log)"; grep FAIL $R/check_gs.log | head -4
OUT=$R/san_gs timeout 200 bash scripts/gpu_sanitize.sh $D/bgs memcheck racecheck > $R/sanitize_gs.txt 2>&1; echo "sanitize gs rc=$?"; grep -E " rc=" $R/sanitize_gs.txt | head -4
save
for round in 1 2; do for lib in base live; do
  t "bench_step $lib $round"; LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 $B/bench/bench_step --reps 200 --json $R/step_${lib}_$round.json --commit $lib > $R/step_${lib}_$round.log 2>&1; echo "rc=$?"
done; done
save
t "decode fp8 A/B"; OUT=$R TAG=fp8 ROUNDS=2 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libold /tmp/liblive
save
t "decode bf16 A/B"; OUT=$R TAG=bf16 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16" CHECK=none bash bench/ab_libs.sh $B /tmp/libold /tmp/liblive
save
# Mixed steps with the prefill grid capped (BSPA_CUDA_MIXED_PREFILL_CTAS, a diagnostic; 0 =
# one CTA an SM, today's): does the decode grid beside it from the start beat its parts?
for cap in 0 112 96 80 66 48; do
  t "mixed cap $cap"; BSPA_CUDA_MIXED_PREFILL_CTAS=$cap LD_LIBRARY_PATH=/tmp/liblive timeout 60 $B/bench/bench_decode --pages 64 > $R/mixed_cap_$cap.log 2>&1; echo "rc=$?"
done
save
for ps in 64 16; do
  t "prefill pool p$ps"; OUT=$R TAG=pool_p$ps ROUNDS=1 BENCH_ARGS="--quick --page-size $ps" CHECK=none bash bench/ab_libs.sh $B /tmp/libbase /tmp/liblive
done
t "prefill pool p32 (live)"
OUT=$R TAG=pool_p32 ROUNDS=1 BENCH_ARGS="--quick --page-size 32" CHECK=none bash bench/ab_libs.sh $B /tmp/liblive
for ps in 32 16; do
  t "prefill interleaved p$ps live / gs"; OUT=$R TAG=il_p$ps ROUNDS=1 BENCH_ARGS="--quick --page-size $ps --kv-layout interleaved" CHECK=none bash bench/ab_libs.sh $B /tmp/liblive /tmp/libgs
done
save
t done
echo "== bench_step"; for f in $R/step_*_?.log; do echo "-- $f"; grep -E "sm90a prefill's shape after 2.5 ms of GPU|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable\)  |allocations|eager: plan|graph: plan" $f; done
echo "== mixed (pool)"; for f in $R/ab_bf16_*.log; do echo "-- $f"; grep -A5 "CUDA pool" $f | tail -4; done
echo "== mixed, prefill grid capped"; for cap in 0 112 96 80 66 48; do echo "-- cap $cap"; grep -E "^(chunk|8x512)" $R/mixed_cap_$cap.log; done
