#!/usr/bin/env bash
# Session 21's call A (issue 20, ~7 min, whatever card comes): the three-quad decode CTA for
# e4m3 pages (q3.so.3.xz, 2441806) against main's decode (main.so.3.xz: 718d313's library,
# whose decode code is HEAD's). Checks on q3 (gpu_check full, fp8 check, step check, demo fp8,
# memcheck + racecheck --tiny), then bench_decode e4m3 at pages 64 and 16 alternating main /
# q3 (two rounds), q3 under BSPA_CUDA_DECODE_QUADS=2 (main's grid choice, same process
# family), batch-1 splits 16/24/32 on q3, and bf16 main / q3 one round (unchanged: ratios).
# Prediction: e4m3 batch 1 -15..-30% (three quads hide the dependent chain a third better);
# 64x8191 / 128x4095 / 256x2047 sparse -5..-20% (one wave of 97% instead of 65-86%, less
# the non-overlapped per-CTA start); dense and 8x131071 unchanged (same grid).
set -uo pipefail
D=.device/s21; R=/tmp/resa; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main q3; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bq3/bench && cp $D/bin/bench/* $D/bq3/bench/ && cp /tmp/libq3/* $D/bq3/
B=$D/bin
save() { tar czf $OUT/resa.tgz -C /tmp resa; }
export LD_LIBRARY_PATH=/tmp/libq3
t check; timeout 300 $B/bench/bench_gpu_check > $R/check_q3.log 2>&1; echo "check rc=$? $(tail -1 $R/check_q3.log)"; grep FAIL $R/check_q3.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_q3.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_q3.log)"
t step; timeout 60 $B/bench/bench_step --check > $R/step_check_q3.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check_q3.log)"
t demo; timeout 60 $B/bspa-demo --dtype fp8 > $R/demo_fp8.log 2>&1; echo "demo fp8 rc=$?"; grep -iE "verified" $R/demo_fp8.log | head -2
save
t sanitize; OUT=$R/san timeout 200 bash scripts/gpu_sanitize.sh $D/bq3 memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|SUMMARY" $R/sanitize.txt | head -4
save
unset LD_LIBRARY_PATH
t "decode fp8 A/B"; OUT=$R TAG=fp8 ROUNDS=2 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libmain /tmp/libq3
save
t "decode fp8 q3 QUADS=2"; BSPA_CUDA_DECODE_QUADS=2 OUT=$R TAG=fp8_quads2 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libq3
save
for s in 16 24 32; do
  BSPA_DECODE_SPLITS=$s LD_LIBRARY_PATH=/tmp/libq3 timeout 60 $B/bench/bench_decode --kv fp8 --pages 64 --only 1x32767 > $R/b1_splits$s.log 2>&1
  echo "splits $s: $(awk '$1=="1x32767" {printf "%s %s %s | ", $2, $3, $4}' $R/b1_splits$s.log)"
done
save
t "decode bf16 A/B"; OUT=$R TAG=bf16 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16" CHECK=none bash bench/ab_libs.sh $B /tmp/libmain /tmp/libq3
save
t done
