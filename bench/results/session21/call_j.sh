#!/usr/bin/env bash
# Session 21's call J (~3 min): the decode loop reading the next tile's block-table entries
# before this tile's copies (prefetch.so.3.xz) against the final library (mends.so.3.xz).
# Checks on prefetch (gpu_check --quick, fp8 check, memcheck + racecheck --tiny), then
# bench_decode e4m3 (two rounds) and bf16 (one) alternating at pages 64 and 16.
# Prediction: batch 1 (one CTA an SM, nothing to cover the stall) e4m3 -3..-8%, bf16 -1..-4%;
# the large cases within +-1% (other CTAs cover it).
set -uo pipefail
D=.device/s21; R=/tmp/resj; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in mends prefetch; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bp/bench && cp $D/bin/bench/* $D/bp/bench/ && cp /tmp/libprefetch/* $D/bp/
B=$D/bin
save() { tar czf $OUT/resj.tgz -C /tmp resj; }
export LD_LIBRARY_PATH=/tmp/libprefetch
t check; timeout 200 $B/bench/bench_gpu_check --quick > $R/check_prefetch.log 2>&1; echo "check rc=$? $(tail -1 $R/check_prefetch.log)"; grep FAIL $R/check_prefetch.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check.log)"
t sanitize; OUT=$R/san timeout 150 bash scripts/gpu_sanitize.sh $D/bp memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=" $R/sanitize.txt | head -4
unset LD_LIBRARY_PATH
save
t "decode fp8 A/B"; OUT=$R TAG=fp8 ROUNDS=2 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libmends /tmp/libprefetch
save
t "decode bf16 A/B"; OUT=$R TAG=bf16 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16" CHECK=none bash bench/ab_libs.sh $B /tmp/libmends /tmp/libprefetch
save
t done
