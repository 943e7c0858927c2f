#!/usr/bin/env bash
# Session 30's call C (~3 min on an H100, ~6 on an H200; carry [".device/s30"], built by
# build_libs.sh): main's library after the change to 8 key tiles a split, through every
# check; then, on an H200 only, issue 19's host rows (bench_step) and issue 20's e4m3 /
# bf16 decode ratios on it (no H200 has run main since session 26). Its second run
# (ONLY_H200=1) was for an H200 alone.
set -uo pipefail
source bench/device_call.sh /tmp/res30c .device/s30
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
# ONLY_H200=1: nothing on another GPU (its checks already ran there: call C's first run).
if [ "${ONLY_H200:-0}" = 1 ] && ! grep -q H200 $R/gpu.txt; then t "not an H200: nothing run"; exit 0; fi
unpack_lib main
checks main
save
if grep -q H200 $R/gpu.txt; then
  commit=$(cat .device/s30/commit 2>/dev/null || echo main)
  t "bench_step"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_step --reps 200 --json $R/step.json --commit $commit > $R/step.log 2>&1; echo "rc=$?"
  save
  for kv in bf16 fp8; do
    t "decode $kv"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_decode --pages 64,16 --kv $kv --json $R/decode_${kv}.json --commit $commit > $R/decode_${kv}.log 2>&1; echo "rc=$?"
  done
  save
  grep -E "^floor: (empty kernel launch|sm90a prefill's shape after 2.5 ms of GPU)|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable|kv_write \(reusable\)|allocations|eager: plan|graph: plan" $R/step.log
  paste <(awk '{print $1,$2,$3,$4}' $R/decode_fp8.log) <(awk '{print $4}' $R/decode_bf16.log) |
    awk '$4+0>0 && $5+0>0 {printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
  grep -A5 "mixed step" $R/decode_bf16.log | head -12
fi
t done
