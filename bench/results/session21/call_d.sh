#!/usr/bin/env bash
# Session 21's call D (issue 20, ~4 min): multi-quad decode CTAs on per-quad named barriers
# (qsync.so.3.xz: a quad waits at each tile for its own four warps only; the quads had
# stepped together on the CTA's barrier) against the landed decode shape (final.so.3.xz).
# qsync also gives a grid alone on its SMs the most quads (three for e4m3 at <= 8 rows);
# under BSPA_CUDA_DECODE_QUADS=2 it runs two there (and no three-quad wave grid).
# Checks on qsync (gpu_check full, fp8 check, step check, memcheck + racecheck --tiny).
# Prediction: e4m3 batch 1 -5..-15% with two quads (call C: 1 us a tile a CTA, not the
# bandwidth: the quads' shared barrier), three quads a further few %; 64x8191 sparse
# (three quads) -2..-5%; bf16 batch 1 within +-2% (bandwidth bound); other cases unchanged
# (one-quad CTAs, same code).
set -uo pipefail
D=.device/s21; R=/tmp/resd; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in final qsync; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bq/bench && cp $D/bin/bench/* $D/bq/bench/ && cp /tmp/libqsync/* $D/bq/
B=$D/bin
save() { tar czf $OUT/resd.tgz -C /tmp resd; }
export LD_LIBRARY_PATH=/tmp/libqsync
t check; timeout 300 $B/bench/bench_gpu_check > $R/check_qsync.log 2>&1; echo "check rc=$? $(tail -1 $R/check_qsync.log)"; grep FAIL $R/check_qsync.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_qsync.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_qsync.log)"
t step; timeout 60 $B/bench/bench_step --check > $R/step_check_qsync.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check_qsync.log)"
t sanitize; OUT=$R/san timeout 200 bash scripts/gpu_sanitize.sh $D/bq memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=" $R/sanitize.txt | head -4
BSPA_CUDA_DECODE_QUADS=2 timeout 300 $B/bench/bench_gpu_check --quick > $R/check_qsync_quads2.log 2>&1; echo "check QUADS=2 --quick rc=$? $(tail -1 $R/check_qsync_quads2.log)"
unset LD_LIBRARY_PATH
save
t "decode fp8 A/B"; OUT=$R TAG=fp8 ROUNDS=2 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libfinal /tmp/libqsync
save
t "decode fp8 qsync QUADS=2"; BSPA_CUDA_DECODE_QUADS=2 OUT=$R TAG=fp8_quads2 ROUNDS=2 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8 --only 1x32767" CHECK=none bash bench/ab_libs.sh $B /tmp/libqsync
save
t "decode bf16 A/B"; OUT=$R TAG=bf16 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16" CHECK=none bash bench/ab_libs.sh $B /tmp/libfinal /tmp/libqsync
save
t done
