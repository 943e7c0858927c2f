#!/usr/bin/env bash
# Session 30's call A (~7 min; ~10 on an H200; carry [".device/s29"], built by
# bench/results/session29/build_libs.sh): session 29's call F as prepared (plan8 against
# clus, then plan8's quick GPU sweep), then main's library (clus: d6a8be3's code, whose
# host-side mends no GPU had run) through every check; on an H200 also issue 19's host rows
# (bench_step) and issue 20's e4m3 / bf16 decode ratios on main.
set -uo pipefail
bash bench/results/session29/call_f.sh
source bench/device_call.sh /tmp/res30a .device/s29
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
checks clus
save
if grep -q H200 $R/gpu.txt; then
  t "bench_step"; LD_LIBRARY_PATH=/tmp/libclus timeout 150 $B/bench/bench_step --reps 200 --json $R/step.json --commit d6a8be3 > $R/step.log 2>&1; echo "rc=$?"
  save
  for kv in bf16 fp8; do
    t "decode $kv"; LD_LIBRARY_PATH=/tmp/libclus timeout 150 $B/bench/bench_decode --pages 64 --kv $kv --json $R/decode_${kv}.json --commit d6a8be3 > $R/decode_${kv}.log 2>&1; echo "rc=$?"
  done
  save
  grep -E "^floor: (empty kernel launch|sm90a prefill's shape after 2.5 ms of GPU)|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable|kv_write \(reusable\)|allocations|eager: plan|graph: plan" $R/step.log
  paste <(sed -n 3,30p $R/decode_fp8.log | awk '{print $1,$2,$3,$4}') <(sed -n 3,30p $R/decode_bf16.log | awk '{print $4}') | awk 'NF==5 && $5>0 {printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
  grep -A5 "mixed step" $R/decode_bf16.log | head -12
fi
t done
