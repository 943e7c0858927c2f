#!/usr/bin/env bash
# Session 20's call D (issue 25, ~4 min): run boxes (run.so.3.xz: a tile over pages of
# 8..32 tokens whose ids are consecutive is one TMA box a tensor; pages whose strides do not
# merge take a box per 8-row group instead of gathers) against the landed page boxes
# (var2.so.3.xz, 718d313) and main before them (main.so.3.xz, 549d0be). Checks on run
# first with the new bench_gpu_check (interleaved K/V pages, token- and head-major, in order
# and shuffled), fp8 check, memcheck and racecheck; then bench_prefill --quick at pages 16
# (in order, two rounds; shuffled one round) and 32, alternating.
# Prediction: p16 in order dense 0.85-0.89 -> ~0.95 of p64, sparse +3-5%; shuffled within
# +-2% of var2 (the run test is two warp votes a tensor); p32 +2-3%.
set -uo pipefail
D=.device/s20; R=/tmp/resd; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main var2 run; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/brun/bench && cp $D/bin/bench/* $D/brun/bench/ && cp /tmp/librun/* $D/brun/
B=$D/bin
export LD_LIBRARY_PATH=/tmp/librun
t check; timeout 240 $B/bench/bench_gpu_check > $R/check_run.log 2>&1; echo "check (run) rc=$? $(tail -1 $R/check_run.log)"; grep -E "FAIL|interleaved" $R/check_run.log | head -12
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_run.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_run.log)"
t sanitize; OUT=$R/san timeout 150 bash scripts/gpu_sanitize.sh $D/brun memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|ERROR SUMMARY" $R/sanitize.txt | head -4
tar czf $OUT/resd.tgz -C /tmp resd
unset LD_LIBRARY_PATH
ab() { # tag rounds args...
  local tag=$1 rounds=$2; shift 2
  t "ab $tag"; OUT=$R TAG=$tag ROUNDS=$rounds BENCH_ARGS="--quick $*" CHECK=none bash bench/ab_libs.sh $B /tmp/libmain /tmp/libvar2 /tmp/librun
  tar czf $OUT/resd.tgz -C /tmp resd
}
ab p16 2 --page-size 16
ab p16s 1 --page-size 16 --shuffle-pages
ab p32 1 --page-size 32
t done
