#!/usr/bin/env bash
# Session 25's call D (~3 min; carry [".device/s25d"]), the last of the session's device time:
#  1. the early exit (ee = wip/s25-ee: session 23's aa9ea8a on 6740f18, CTAs of a
#     fixed-shape prefill grid without a unit return before their ring's set-up) against
#     fix (6740f18): bench_step alternating, two rounds (prediction: the graph row -1..-3 us
#     a layer, i.e. -32..-96 us on the 32-layer step; every other row within spread);
#  2. ee's checks (gpu_check --quick, fp8, step check, demo --graphs, memcheck + racecheck);
#  3. bench_decode bf16 and e4m3 at pages 64 and 16 on fix (issue 19's mixed rows and issue
#     20's ratios on whatever card came: an H200 would settle issue 19's figures).
set -uo pipefail
source bench/device_call.sh /tmp/res25d .device/s25d
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib fix; unpack_lib ee
for round in 1 2; do
  for lib in fix ee; do
    t "bench_step $lib $round"; LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 $B/bench/bench_step --reps 200 --json $R/step_${lib}_$round.json --commit $lib > $R/step_${lib}_$round.log 2>&1; echo "rc=$?"
  done
done
save
echo "== bench_step (median p90 us)"; for f in $R/step_*_?.log; do echo "-- $(basename $f)"; grep -E "after 2.5 ms of GPU work|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable\)  |kv_write \(reusable\)|allocations|eager: plan|graph: plan" $f; done
for kv in bf16 fp8; do
  t "decode $kv (fix)"; LD_LIBRARY_PATH=/tmp/libfix timeout 150 $B/bench/bench_decode --pages 64,16 --kv $kv --json $R/decode_$kv.json --commit 6740f18 > $R/decode_$kv.log 2>&1; echo "rc=$?"
done
save
echo "== decode e4m3 / bf16 (ms)"; paste <(sed -n 3,22p $R/decode_fp8.log | awk '{print $1,$2,$3,$4}') <(sed -n 3,22p $R/decode_bf16.log | awk '{print $4}') | awk '{printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
grep -A5 "mixed step" $R/decode_bf16.log | head -12
checks ee
save
t done
