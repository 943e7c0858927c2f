#!/usr/bin/env bash
# Session 20's call E (issue 25, ~2.5 min): call D's run boxes spilled (ptxas: 204/784
# bytes in the D 128 page-box kernels, against 20/40) and lost; fb.so.3.xz keeps only its
# other half: page strides that do not merge (K and V of a page interleaved, token-major)
# take a 5-D box per 8-row group instead of the gathers (a loop over maps.group_boxes, one
# where the strides merge; spills 24/44). Checks on fb (gpu_check with the interleaved
# cases, memcheck and racecheck), then bench_prefill --quick p16 in order and shuffled and
# p32, one round each, against var2 (the landed 718d313).
# Prediction: within +-2% of var2 (one more loop trip test per page box).
set -uo pipefail
D=.device/s20; R=/tmp/rese; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in var2 fb; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bfb/bench && cp $D/bin/bench/* $D/bfb/bench/ && cp /tmp/libfb/* $D/bfb/
B=$D/bin
export LD_LIBRARY_PATH=/tmp/libfb
t check; timeout 240 $B/bench/bench_gpu_check > $R/check_fb.log 2>&1; echo "check (fb) rc=$? $(tail -1 $R/check_fb.log)"; grep -E "FAIL" $R/check_fb.log | head -12
t sanitize; OUT=$R/san timeout 150 bash scripts/gpu_sanitize.sh $D/bfb memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|ERROR SUMMARY" $R/sanitize.txt | head -4
tar czf $OUT/rese.tgz -C /tmp rese
unset LD_LIBRARY_PATH
ab() { # tag rounds args...
  local tag=$1 rounds=$2; shift 2
  t "ab $tag"; OUT=$R TAG=$tag ROUNDS=$rounds BENCH_ARGS="--quick $*" CHECK=none bash bench/ab_libs.sh $B /tmp/libvar2 /tmp/libfb
  tar czf $OUT/rese.tgz -C /tmp rese
}
ab p16 1 --page-size 16
ab p16s 1 --page-size 16 --shuffle-pages
ab p32 1 --page-size 32
t done
