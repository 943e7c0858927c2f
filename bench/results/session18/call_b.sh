#!/usr/bin/env bash
# Session 18's prepared call B (issue 20, ~8 min): session 13's "in place, trailing" e4m3
# prefill (bench/results/session13/h200_sm90_e4m3_inplace_trailing.diff, applied to main
# 1d07e43 unchanged, built -DBSPA_CUDA_ARCHS=90a: trail.so.3.xz) against main's library,
# alternating, e4m3 pages at 64 and 16 tokens plus a bf16 control; then the full GPU check
# and the fp8 check on the variant. Prediction (session 13): near 0.85x of bf16 at p64
# (in-place without the per-item drain keeps the 6-stage ring), against 0.69-0.78 today.
set -uo pipefail
D=.device/s17; B=$D/d/build; R=/tmp/resb; mkdir -p $R /tmp/libmain /tmp/libtrail
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for l in libgomp.so.1 libxxhash.so.0 libsimdjson.so.14; do cp $B/$l /tmp/libmain/; cp $B/$l /tmp/libtrail/; done
cp $B/libbspa.so.3 /tmp/libmain/; xz -dc $D/trail.so.3.xz > /tmp/libtrail/libbspa.so.3
for round in 1 2; do
  for ps in 64 16; do
    for lib in main trail; do
      log=$R/prefill_${lib}_fp8_p${ps}_r$round
      LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 $B/bench/bench_prefill --quick --no-sweep --kv fp8 --page-size $ps --json $log.json > $log.log 2>&1
      echo "== $lib fp8 p$ps r$round rc=$?"; grep -E "(sparse|dense) +S=" $log.log | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-1)} END {print ""}'
    done
  done
  tar czf $OUT/resb.tgz -C /tmp resb
done
for lib in main trail; do
  log=$R/prefill_${lib}_bf16_p64
  LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 $B/bench/bench_prefill --quick --no-sweep --page-size 64 --json $log.json > $log.log 2>&1
  echo "== $lib bf16 p64 rc=$?"; grep -E "(sparse|dense) +S=" $log.log | awk '{printf "%s %s %s %s | ", $1, $2, $3, $(NF-1)} END {print ""}'
done
tar czf $OUT/resb.tgz -C /tmp resb
t check; LD_LIBRARY_PATH=/tmp/libtrail timeout 200 $B/bench/bench_gpu_check > $R/check_trail.log 2>&1; echo "check (trail) rc=$? $(tail -1 $R/check_trail.log)"; grep FAIL $R/check_trail.log | head -5
t fp8check; LD_LIBRARY_PATH=/tmp/libtrail timeout 60 $B/bench/bench_fp8_check > $R/fp8check_trail.log 2>&1; echo "fp8 check (trail) rc=$? $(tail -1 $R/fp8check_trail.log)"
t done
tar czf $OUT/resb.tgz -C /tmp resb
