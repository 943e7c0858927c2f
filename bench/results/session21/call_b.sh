#!/usr/bin/env bash
# Session 21's call B (issue 20, ~3 min): the landed rule (final.so.3.xz: two quads for a
# grid alone on its SMs as before, three quads only where one-quad CTAs would leave the last
# wave mostly idle, gain > 0.2) against main (main.so.3.xz); gpu_check on final; bench_decode
# e4m3 main / final and bf16 final (ratios on this lease); batch-1 diagnostics on final
# (one-quad CTAs two or three an SM: QUADS=1 with 32 / 48 splits; two quads with 8).
# Prediction: 64x8191 sparse -8..-12% (call A), every other case within noise of main.
set -uo pipefail
D=.device/s21; R=/tmp/resb; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main final; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
B=$D/bin
save() { tar czf $OUT/resb.tgz -C /tmp resb; }
t check; LD_LIBRARY_PATH=/tmp/libfinal timeout 300 $B/bench/bench_gpu_check > $R/check_final.log 2>&1; echo "check rc=$? $(tail -1 $R/check_final.log)"; grep FAIL $R/check_final.log | head -8
save
t "decode fp8 A/B"; OUT=$R TAG=fp8 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libmain /tmp/libfinal
save
t "decode bf16"; OUT=$R TAG=bf16 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16" CHECK=none bash bench/ab_libs.sh $B /tmp/libfinal
save
for kv in fp8 bf16; do
  for cfg in "2 0" "1 32" "1 48" "2 8"; do
    set -- $cfg
    BSPA_CUDA_DECODE_QUADS=$1 BSPA_DECODE_SPLITS=$2 LD_LIBRARY_PATH=/tmp/libfinal timeout 60 $B/bench/bench_decode --kv $kv --pages 64 --only 1x32767 > $R/b1_${kv}_q$1_s$2.log 2>&1
    echo "$kv quads<=$1 splits $2: $(awk '$1=="1x32767" {printf "%s %s %s | ", $2, $3, $4}' $R/b1_${kv}_q$1_s$2.log)"
  done
done
save
t done
