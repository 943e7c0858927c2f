#!/usr/bin/env bash
# Session 25's call H (~40 s; carry [".device/s25g"]): where the host time of a replayed step
# goes (call G: the demo's host time per step 10 -> 19 us median with buckets of decode rows
# only, its step time 81 -> 75-78 us): bench_step's 32-layer step per bucket with the plan
# alone and the graph's launch alone; the demo before / after once more.
set -uo pipefail
source bench/device_call.sh /tmp/res25h .device/s25g
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
export LD_LIBRARY_PATH=/tmp/libmain
timeout 150 $B/bench/bench_step --reps 200 --json $R/step.json --commit session25 > $R/step.log 2>&1; echo "bench_step rc=$?"
grep -E "empty kernel launch  |eager|graph|alone" $R/step.log
for v in old new; do
  if [ $v = old ]; then demo=.device/s25g/old/bspa-demo; else demo=$B/bspa-demo; fi
  timeout 120 $demo --device cuda --graphs --json $R/demo_$v.json > $R/demo_$v.log 2>&1; echo "demo $v rc=$?"
  grep -E "^(step time|host time|result)" $R/demo_$v.log
done
save
t done
