#!/usr/bin/env bash
# Session 19's call E (issue 20, ~9 min): the narrow decode tile (branch wip/s19-narrow:
# launches of at most 8 rows compute S^T = K Q^T and O^T = V^T P^T, the query rows as the
# mma's 8 N columns, so no mma or softmax work on the 8 padding rows of a 16-row M side;
# P^T's halves become B fragments by movmatrix): narrow.so.3.xz (8ed8498) and
# narrowx.so.3.xz (4d2ce27: + e4m3 V offsets as lane offset XOR column block) and q3.so.3.xz
# (8a2bfec: + three quads for a narrow e4m3 CTA alone on its SM, batch 1) against main's
# library (.device/s18/main.so.3.xz, the kernels of main 322fa4e), session 17's bench
# binaries. Checks on narrowx first (gpu_check, fp8 check, step --check, memcheck and
# racecheck --tiny, demo --graphs and --dtype fp8), then bench_decode e4m3 (main, narrow,
# narrowx) and bf16 (main, narrowx) at pages 64 and 16, two rounds.
# Prediction: e4m3 decode 6-12% faster, bf16 large cases within +-1%, bf16 batch 1 a few %;
# q3: e4m3 batch 1 a further 10-20% (12 warps an SM instead of 8 on a latency-bound tile).
set -uo pipefail
D=.device/s17; B=$D/d/build; R=/tmp/rese; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in main narrow narrowx q3; do
  mkdir -p /tmp/lib$lib; for l in libgomp.so.1 libxxhash.so.0 libsimdjson.so.14; do cp $B/$l /tmp/lib$lib/; done
done
xz -dc .device/s18/main.so.3.xz > /tmp/libmain/libbspa.so.3
xz -dc .device/s19/narrow.so.3.xz > /tmp/libnarrow/libbspa.so.3
xz -dc .device/s19/narrowx.so.3.xz > /tmp/libnarrowx/libbspa.so.3
xz -dc .device/s19/q3.so.3.xz > /tmp/libq3/libbspa.so.3
export LD_LIBRARY_PATH=/tmp/libnarrowx
t check; timeout 200 $B/bench/bench_gpu_check > $R/check_narrowx.log 2>&1; echo "check (narrowx) rc=$? $(tail -1 $R/check_narrowx.log)"; grep FAIL $R/check_narrowx.log | head -8
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check_narrowx.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check_narrowx.log)"
t step-check; timeout 60 $B/bench/bench_step --check > $R/step_check_narrowx.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check_narrowx.log)"
t sanitize; OUT=$R/san timeout 120 bash scripts/gpu_sanitize.sh $B memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|ERROR SUMMARY" $R/sanitize.txt | head -4
t "demo graphs"; timeout 60 $B/bspa-demo --graphs > $R/demo_graphs.log 2>&1; echo "demo --graphs rc=$?"; grep -iE "verified|replay" $R/demo_graphs.log | head -3
t "demo fp8"; timeout 60 $B/bspa-demo --dtype fp8 > $R/demo_fp8.log 2>&1; echo "demo --dtype fp8 rc=$?"; grep -iE "verified" $R/demo_fp8.log | head -2
tar czf $OUT/rese.tgz -C /tmp rese
for round in 1 2; do
  for kv in fp8 bf16; do
    libs="main narrow narrowx q3"; [ $kv = bf16 ] && libs="main narrowx"; [ $round = 2 ] && [ $kv = fp8 ] && libs="main narrowx q3"
    for lib in $libs; do
      log=$R/decode_${lib}_${kv}_r$round
      LD_LIBRARY_PATH=/tmp/lib$lib timeout 60 $B/bench/bench_decode --pages 64,16 $( [ $kv = fp8 ] && echo --kv fp8 ) --json $log.json > $log.log 2>&1
      echo "== decode $lib $kv r$round rc=$?"; awk '$2 ~ /^(64|16)$/ && ($3 == "sparse" || $3 == "dense") {printf "%s %s %s %s | ", $1, $2, $3, $4} END {print ""}' $log.log
    done
  done
  tar czf $OUT/rese.tgz -C /tmp rese
  t "round $round"
done
# q3's checks (its three-quad kernels run only in launches of one CTA an SM: batch-1-like)
LD_LIBRARY_PATH=/tmp/libq3 timeout 100 $B/bench/bench_gpu_check > $R/check_q3.log 2>&1; echo "check (q3) rc=$? $(tail -1 $R/check_q3.log)"; grep FAIL $R/check_q3.log | head -4
LD_LIBRARY_PATH=/tmp/libq3 timeout 40 $B/bench/bench_fp8_check > $R/fp8check_q3.log 2>&1; echo "fp8 check (q3) rc=$? $(tail -1 $R/fp8check_q3.log)"
tar czf $OUT/rese.tgz -C /tmp rese
t done
