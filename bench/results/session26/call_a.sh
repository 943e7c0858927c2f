#!/usr/bin/env bash
# Session 26's call A (~3 min; carry [".device/s26"]): main's build (a583557's code) checked
# (bench_gpu_check --quick, fp8 check, step check, demo --graphs, memcheck, racecheck), then
# issue 19's figures (bench_step; bench_decode's mixed rows, bf16, pages 64 and 16, twice)
# and issue 20's e4m3 / bf16 decode ratios.
set -uo pipefail
source bench/device_call.sh /tmp/res26a .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
checks main
save
t "bench_step"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_step --reps 200 --json $R/step.json --commit a583557 > $R/step.log 2>&1; echo "rc=$?"
save
for kv in bf16 fp8 bf16; do
  t "decode $kv"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_decode --pages 64,16 --kv $kv --json $R/decode_${kv}_$SECONDS.json --commit a583557 > $R/decode_${kv}_$SECONDS.log 2>&1; echo "rc=$?"
done
save
grep -E "^floor: (empty kernel launch|sm90a prefill's shape after 2.5 ms of GPU)|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable|kv_write \(reusable\)|allocations|eager: plan|graph: plan" $R/step.log
f8=$(ls $R/decode_fp8_*.log | head -1); b16=$(ls $R/decode_bf16_*.log | head -1)
paste <(sed -n 3,22p $f8 | awk '{print $1,$2,$3,$4}') <(sed -n 3,22p $b16 | awk '{print $4}') | awk '{printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
for f in $R/decode_bf16_*.log; do grep -A5 "mixed step" $f | head -12; done
t done
