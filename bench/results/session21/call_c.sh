#!/usr/bin/env bash
# Session 21's call C (issue 20, ~4 min): the decode prologue reading its first S - 1 tiles'
# block-table entries before any copy (hoist.so.3.xz) against the landed decode shape
# (final.so.3.xz). Checks on hoist (gpu_check full, fp8 check, memcheck + racecheck --tiny);
# bench_decode e4m3 (two rounds) and bf16 (one) alternating final / hoist at pages 64 and
# 16; then batch-1 launches of growing context (1 x 1023 / 4095 / 16383 / 32767, pages 64,
# both libraries, both dtypes): the fixed cost of a launch against its streaming.
# Prediction: e4m3 batch 1 -0.5..-1 us (two of three serial round trips to the block table
# gone at each CTA's start; bf16 one of two), large cases within noise (their CTAs start
# beside others' streaming).
set -uo pipefail
D=.device/s21; R=/tmp/resc; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in final hoist; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bh/bench && cp $D/bin/bench/* $D/bh/bench/ && cp /tmp/libhoist/* $D/bh/
B=$D/bin
save() { tar czf $OUT/resc.tgz -C /tmp resc; }
export LD_LIBRARY_PATH=/tmp/libhoist
t check; timeout 300 $B/bench/bench_gpu_check > $R/check_hoist.log 2>&1; echo "check rc=$? $(tail -1 $R/check_hoist.log)"; grep FAIL $R/check_hoist.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_hoist.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_hoist.log)"
t sanitize; OUT=$R/san timeout 200 bash scripts/gpu_sanitize.sh $D/bh memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=" $R/sanitize.txt | head -4
unset LD_LIBRARY_PATH
save
t "decode fp8 A/B"; OUT=$R TAG=fp8 ROUNDS=2 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libfinal /tmp/libhoist
save
t "decode bf16 A/B"; OUT=$R TAG=bf16 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16" CHECK=none bash bench/ab_libs.sh $B /tmp/libfinal /tmp/libhoist
save
for kv in fp8 bf16; do
  for ctx in 1023 4095 16383 32767; do
    for lib in final hoist; do
      LD_LIBRARY_PATH=/tmp/lib$lib timeout 60 $B/bench/bench_decode --kv $kv --pages 64 --case 1x$ctx --only 1x$ctx > $R/fixed_${kv}_${ctx}_$lib.log 2>&1
      echo "$kv 1x$ctx $lib: $(awk -v c=1x$ctx '$1==c {printf "%s %s | ", $3, $4}' $R/fixed_${kv}_${ctx}_$lib.log)"
    done
  done
done
save
t done
