#!/usr/bin/env bash
# Session 22's call B (~8 min, issue 20; whatever card comes). Libraries (git-ignored
# .device/s22/*.so.3.xz; rebuild as bench/results/session22/README says):
#   main  d371e3a: decode's variant choice in one place (decode_variant; SASS of all 143
#         kernels identical to 298a271's, host dispatch changed: needs this GPU check)
#   pc    wip/s22-decode-pageclass (cf82b8b): e4m3 decode kernels know their page class at
#         compile time (strided = pages of 64+ tokens, consecutive = smaller), the other
#         class's copies leave the loop: loops 895 -> 675 (strided) and 986 -> 859 (one-quad
#         consecutive, whose 24-byte stack frame goes) static instructions
#   ph    wip/s22-decode-hoist (2 commits): pc + multi-quad e4m3 CTAs keep their copies'
#         page-relative 64-bit bases in registers (-21 instructions a 64-token tile)
# Checks: main (gpu_check full, step check, fp8 check, demo --graphs and fp8), pc and ph
# (gpu_check full, fp8 check), ph memcheck + racecheck --tiny. Then bench_decode e4m3 at
# pages 64 and 16, main / pc / ph alternating, two rounds; bf16 main / ph one round (its
# kernels are main's: the control of the ratio).
# Prediction: pc e4m3 -1..-5% (batch 1 and the p16 sparse cases most: smaller loop, no
# stack in the one-quad p16 kernel), ph a further -1..-4% on the multi-quad cases (batch 1,
# 64 x 8191 sparse); bf16 unchanged.
set -uo pipefail
D=.device/s22; R=/tmp/resb; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main pc ph; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bph/bench && cp $D/bin/bench/* $D/bph/bench/ && cp /tmp/libph/* $D/bph/
B=$D/bin
save() { tar czf $OUT/resb.tgz -C /tmp resb; }
for lib in main pc ph; do
  export LD_LIBRARY_PATH=/tmp/lib$lib
  t "check $lib"; timeout 300 $B/bench/bench_gpu_check > $R/check_$lib.log 2>&1; echo "check $lib rc=$? $(tail -1 $R/check_$lib.log)"; grep FAIL $R/check_$lib.log | head -8
  timeout 60 $B/bench/bench_fp8_check > $R/fp8check_$lib.log 2>&1; echo "fp8 check $lib rc=$? $(tail -1 $R/fp8check_$lib.log)"
  if [ $lib = main ]; then
    timeout 60 $B/bench/bench_step --check > $R/step_check_main.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check_main.log)"
    timeout 60 $B/bspa-demo --graphs > $R/demo_graphs.log 2>&1; echo "demo --graphs rc=$?"; grep -iE "verified|replay" $R/demo_graphs.log | head -2
    timeout 60 $B/bspa-demo --dtype fp8 > $R/demo_fp8.log 2>&1; echo "demo fp8 rc=$?"; grep -iE "verified" $R/demo_fp8.log | head -2
  fi
  save
done
unset LD_LIBRARY_PATH
t sanitize; OUT=$R/san timeout 200 bash scripts/gpu_sanitize.sh $D/bph memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|SUMMARY" $R/sanitize.txt | head -4
save
t "decode fp8 A/B"; OUT=$R TAG=fp8 ROUNDS=2 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libmain /tmp/libpc /tmp/libph
save
t "decode bf16 A/B"; OUT=$R TAG=bf16 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16" CHECK=none bash bench/ab_libs.sh $B /tmp/libmain /tmp/libph
save
t done
