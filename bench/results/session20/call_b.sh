#!/usr/bin/env bash
# Session 20's call B (issues 25 and 20, ~7 min): call A's grouped ring cost 64-token pages
# 2-7% (one 16 KB box a tile, more producer spills), so the grouped ring is now the
# page-box variant's only (var2.so.3.xz: kPageBoxes kernels take 5-D boxes of a page's
# 8-row groups of both halves; the one-box kernels are main's, SASS identical). Checks on
# var2 (gpu_check, fp8 check, memcheck and racecheck --tiny), then bench_prefill --quick
# alternating main / var2: pages 16 two rounds, 32, 16 shuffled, 64, 16/16/64 at 16, e4m3
# at 16 one round. Then main's decode checks and ratios (session 19's call H, shortened):
# bench_step --check, the demo's --graphs and --dtype fp8, bench_decode e4m3 and bf16 at
# pages 64 and 16, one round each.
# Prediction: p16 +10-17% and p32 +5-15% as in call A, p64 within noise (same SASS),
# e4m3 p16 within +-2%, D 64 p16 within +-2%.
set -uo pipefail
D=.device/s20; R=/tmp/resb; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main var2; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bvar/bench && cp $D/bin/bench/* $D/bvar/bench/ && cp /tmp/libvar2/* $D/bvar/
B=$D/bin
export LD_LIBRARY_PATH=/tmp/libvar2
t check; timeout 240 $B/bench/bench_gpu_check > $R/check_var2.log 2>&1; echo "check (var2) rc=$? $(tail -1 $R/check_var2.log)"; grep FAIL $R/check_var2.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_var2.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_var2.log)"
t sanitize; OUT=$R/san timeout 150 bash scripts/gpu_sanitize.sh $D/bvar memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|ERROR SUMMARY" $R/sanitize.txt | head -4
tar czf $OUT/resb.tgz -C /tmp resb
unset LD_LIBRARY_PATH
ab() { # tag rounds args...
  local tag=$1 rounds=$2; shift 2
  t "ab $tag"; OUT=$R TAG=$tag ROUNDS=$rounds BENCH_ARGS="--quick $*" CHECK=none bash bench/ab_libs.sh $B /tmp/libmain /tmp/libvar2
  tar czf $OUT/resb.tgz -C /tmp resb
}
ab p16 2 --page-size 16
ab p32 1 --page-size 32
ab p16s 1 --page-size 16 --shuffle-pages
ab p64 1 --page-size 64
ab d64p16 1 --shape 16/16/64 --page-size 16
ab fp8p16 1 --kv fp8 --page-size 16
export LD_LIBRARY_PATH=/tmp/libmain
t step-check; timeout 60 $B/bench/bench_step --check > $R/step_check_main.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check_main.log)"
t "demo graphs"; timeout 60 $B/bspa-demo --graphs > $R/demo_graphs.log 2>&1; echo "demo --graphs rc=$?"; grep -iE "verified|replay" $R/demo_graphs.log | head -3
t "demo fp8"; timeout 60 $B/bspa-demo --dtype fp8 > $R/demo_fp8.log 2>&1; echo "demo --dtype fp8 rc=$?"; grep -iE "verified" $R/demo_fp8.log | head -2
tar czf $OUT/resb.tgz -C /tmp resb
unset LD_LIBRARY_PATH
for kv in fp8 bf16; do
  t "decode $kv"; OUT=$R TAG=dec_$kv ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16 $( [ $kv = fp8 ] && echo --kv fp8 )" CHECK=none \
    bash bench/ab_libs.sh $B /tmp/libmain
  tar czf $OUT/resb.tgz -C /tmp resb
done
t done
