#!/usr/bin/env bash
# Session 19's prepared call H (for the next session, ~3 min, an H200 wanted: issue 20's
# card): the landed decode v29 (chains.so.3.xz, built from 397e4c6's kernels) against v27
# (.device/s18/main.so.3.xz, main before session 19), session 17's bench binaries. Checks on
# v29 first (gpu_check, fp8 check, step --check, memcheck and racecheck --tiny, the demo's
# graphs and fp8), then bench_decode e4m3 and bf16 at pages 64 and 16, alternating, two
# rounds. Carry [".device/s17", ".device/s18", ".device/s19"].
set -uo pipefail
D=.device/s17; B=$D/d/build; R=/tmp/resh; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main chains; do
  mkdir -p /tmp/lib$lib; for l in libgomp.so.1 libxxhash.so.0 libsimdjson.so.14; do cp $B/$l /tmp/lib$lib/; done
done
xz -dc .device/s18/main.so.3.xz > /tmp/libmain/libbspa.so.3
xz -dc .device/s19/chains.so.3.xz > /tmp/libchains/libbspa.so.3
export LD_LIBRARY_PATH=/tmp/libchains
t check; timeout 200 $B/bench/bench_gpu_check > $R/check_chains.log 2>&1; echo "check (chains) rc=$? $(tail -1 $R/check_chains.log)"; grep FAIL $R/check_chains.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_chains.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_chains.log)"
t step-check; timeout 60 $B/bench/bench_step --check > $R/step_check_chains.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check_chains.log)"
t sanitize; OUT=$R/san timeout 120 bash scripts/gpu_sanitize.sh $B memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|ERROR SUMMARY" $R/sanitize.txt | head -4
t "demo graphs"; timeout 60 $B/bspa-demo --graphs > $R/demo_graphs.log 2>&1; echo "demo --graphs rc=$?"; grep -iE "verified|replay" $R/demo_graphs.log | head -3
t "demo fp8"; timeout 60 $B/bspa-demo --dtype fp8 > $R/demo_fp8.log 2>&1; echo "demo --dtype fp8 rc=$?"; grep -iE "verified" $R/demo_fp8.log | head -2
tar czf $OUT/resh.tgz -C /tmp resh
# The A/B through bench/ab_libs.sh (decode, alternating, two rounds), e4m3 then bf16.
for kv in fp8 bf16; do
  OUT=$R TAG=$kv BENCH=decode BENCH_ARGS="--pages 64,16 $( [ $kv = fp8 ] && echo --kv fp8 )" CHECK=none \
    bash bench/ab_libs.sh $B /tmp/libmain /tmp/libchains
  tar czf $OUT/resh.tgz -C /tmp resh
done
t done
