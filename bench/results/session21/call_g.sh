#!/usr/bin/env bash
# Session 21's call G (~3 min): the final review's mends (mends.so.3.xz: the three-quad grid
# only where the one-quad grid runs more than one wave; the alone-on-its-SMs test with the
# grid's CTAs; bench_gpu_check's third three-quad case, head dim 64 with a 70001-key
# sequence). Checks on mends (gpu_check full, fp8 check, step check, demo fp8, memcheck +
# racecheck --tiny), then bench_decode e4m3 final / mends one round (no case should change).
set -uo pipefail
D=.device/s21; R=/tmp/resg; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in final mends; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bm/bench && cp $D/bin/bench/* $D/bm/bench/ && cp /tmp/libmends/* $D/bm/
B=$D/bin
save() { tar czf $OUT/resg.tgz -C /tmp resg; }
export LD_LIBRARY_PATH=/tmp/libmends
t check; timeout 300 $B/bench/bench_gpu_check > $R/check_mends.log 2>&1; echo "check rc=$? $(tail -1 $R/check_mends.log)"; grep FAIL $R/check_mends.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_mends.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_mends.log)"
t step; timeout 60 $B/bench/bench_step --check > $R/step_check_mends.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check_mends.log)"
t demo; timeout 60 $B/bspa-demo --dtype fp8 > $R/demo_fp8.log 2>&1; echo "demo fp8 rc=$?"; grep -iE "verified" $R/demo_fp8.log | head -2
t "demo graphs"; timeout 60 $B/bspa-demo --graphs > $R/demo_graphs.log 2>&1; echo "demo --graphs rc=$?"; grep -iE "verified|replay" $R/demo_graphs.log | head -2
t sanitize; OUT=$R/san timeout 200 bash scripts/gpu_sanitize.sh $D/bm memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=" $R/sanitize.txt | head -4
unset LD_LIBRARY_PATH
save
t "decode fp8 A/B"; OUT=$R TAG=fp8 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $B /tmp/libfinal /tmp/libmends
save
t done
