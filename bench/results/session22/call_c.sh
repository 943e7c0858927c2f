#!/usr/bin/env bash
# Session 22's call C (~8 min, issue 25; whatever card comes): a TMA box per 8-row group for
# 16-bit pages whose strides merge in no pair (token-major pages with K and V of a page in
# one block: FlashInfer's NHD [pages, 2, page, Hkv, D]), which since 718d313 take the
# cp.async gathers at pages under 64 tokens (session 20's known regression), now in a kernel
# variant of its own (kGroupBoxes) so the common page-box producer is untouched.
#   main  d371e3a's library (.device/s22/main.so.3.xz)
#   gb    wip/s22-group-boxes (2f059dc), built -DBSPA_CUDA_ARCHS=90a (gb.so.3.xz); its
#         bench_prefill has --kv-layout pool|token-major|interleaved (bin/bench/bench_prefill_gb)
# Checks on gb: gpu_check full (its interleaved cases: token- and head-major, in order and
# shuffled, D 128 and 64, pages of 8/16/32), fp8 check, memcheck + racecheck --tiny, then
# bench_prefill --quick --no-sweep at pages 16 and 32 with --kv-layout interleaved, main / gb
# alternating (two rounds), and pool-layout p16 / p64 main / gb one round (no change
# expected: the common kernels' SASS is main's).
# Prediction: interleaved p16 +60..+90% (gathers -> boxes: session 11 measured 236 -> 413
# sparse 8k when pool pages went from gathers to page boxes), p32 +40..+70%; pool layout
# within spread.
set -uo pipefail
D=.device/s22; R=/tmp/resc; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main gb; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bgb/bench && cp $D/bin/bench/* $D/bgb/bench/ && cp /tmp/libgb/* $D/bgb/
# The A/B's bench binary: gb's bench_prefill (the --kv-layout option) for both libraries.
mkdir -p $D/bin_gb/bench && cp $D/bin/bench/bench_prefill_gb $D/bin_gb/bench/bench_prefill
B=$D/bin
save() { tar czf $OUT/resc.tgz -C /tmp resc; }
export LD_LIBRARY_PATH=/tmp/libgb
t "check gb"; timeout 300 $B/bench/bench_gpu_check > $R/check_gb.log 2>&1; echo "check gb rc=$? $(tail -1 $R/check_gb.log)"; grep FAIL $R/check_gb.log | head -8
timeout 60 $B/bench/bench_fp8_check > $R/fp8check_gb.log 2>&1; echo "fp8 check gb rc=$? $(tail -1 $R/fp8check_gb.log)"
unset LD_LIBRARY_PATH
save
t sanitize; OUT=$R/san timeout 200 bash scripts/gpu_sanitize.sh $D/bgb memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|SUMMARY" $R/sanitize.txt | head -4
save
for ps in 16 32; do
  t "interleaved p$ps"; OUT=$R TAG=il_p$ps ROUNDS=2 BENCH_ARGS="--quick --page-size $ps --kv-layout interleaved" CHECK=none bash bench/ab_libs.sh $D/bin_gb /tmp/libmain /tmp/libgb
  save
done
for ps in 16 64; do
  t "pool p$ps"; OUT=$R TAG=pool_p$ps ROUNDS=1 BENCH_ARGS="--quick --page-size $ps" CHECK=none bash bench/ab_libs.sh $D/bin_gb /tmp/libmain /tmp/libgb
  save
done
t done
