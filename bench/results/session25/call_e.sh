#!/usr/bin/env bash
# Session 25's call E (~1 min; carry [".device/s25d"]): issue 19's figures on main's kernels
# (ee = 5516a24's library) for an H200 if one comes: bench_step, then bench_decode bf16 (its
# mixed rows) and e4m3 (issue 20's ratios), pages 64 and 16.
set -uo pipefail
source bench/device_call.sh /tmp/res25e .device/s25d
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib ee
t "bench_step"; LD_LIBRARY_PATH=/tmp/libee timeout 150 $B/bench/bench_step --reps 200 --json $R/step.json --commit 5516a24 > $R/step.log 2>&1; echo "rc=$?"
for kv in bf16 fp8; do
  t "decode $kv"; LD_LIBRARY_PATH=/tmp/libee timeout 150 $B/bench/bench_decode --pages 64,16 --kv $kv --json $R/decode_$kv.json --commit 5516a24 > $R/decode_$kv.log 2>&1; echo "rc=$?"
done
save
grep -E "^floor: (empty kernel launch|sm90a prefill's shape after 2.5 ms of GPU)|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable|kv_write \(reusable\)|allocations|eager: plan|graph: plan" $R/step.log
paste <(sed -n 3,22p $R/decode_fp8.log | awk '{print $1,$2,$3,$4}') <(sed -n 3,22p $R/decode_bf16.log | awk '{print $4}') | awk '{printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
grep -A5 "mixed step" $R/decode_bf16.log | head -12
t done
