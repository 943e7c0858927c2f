#!/usr/bin/env bash
# Session 20's call A (issue 25, ~9 min): the ring in 8-row groups of both halves
# (var.so.3.xz: a 64-token tile is one 5-D TMA box per tensor, a 16-token page's part one
# box, where half-major stages took a box per page and half) against main (main.so.3.xz,
# 549d0be's kernels), main's bench binaries. Checks on var first (gpu_check, fp8 check,
# memcheck and racecheck --tiny), then bench_prefill --quick alternating: pages 16 and 64
# two rounds, 32, 16 shuffled, 16/16/64 at 64 and e4m3 at 64 one round.
# Prediction: p16 sparse/dense 8-10% faster (half the boxes: p32's box count today), p32
# +3-5%, p64 and e4m3 within +-1%, D 64 within +-1% (same layout, a 5-D box).
set -uo pipefail
D=.device/s20; R=/tmp/resa; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main var; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bvar/bench && cp $D/bin/bench/* $D/bvar/bench/ && cp /tmp/libvar/* $D/bvar/
B=$D/bin
export LD_LIBRARY_PATH=/tmp/libvar
t check; timeout 240 $B/bench/bench_gpu_check > $R/check_var.log 2>&1; echo "check (var) rc=$? $(tail -1 $R/check_var.log)"; grep FAIL $R/check_var.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_var.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_var.log)"
tar czf $OUT/resa.tgz -C /tmp resa
ab() { # tag rounds args...
  local tag=$1 rounds=$2; shift 2
  t "ab $tag"; OUT=$R TAG=$tag ROUNDS=$rounds BENCH_ARGS="--quick $*" CHECK=none bash bench/ab_libs.sh $B /tmp/libmain /tmp/libvar
  tar czf $OUT/resa.tgz -C /tmp resa
}
unset LD_LIBRARY_PATH
ab p16 2 --page-size 16
ab p64 2 --page-size 64
ab p32 1 --page-size 32
ab p16s 1 --page-size 16 --shuffle-pages
ab d64 1 --shape 16/16/64
ab fp8 1 --kv fp8
t sanitize; OUT=$R/san timeout 150 bash scripts/gpu_sanitize.sh $D/bvar memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|ERROR SUMMARY" $R/sanitize.txt | head -4
tar czf $OUT/resa.tgz -C /tmp resa
t done
