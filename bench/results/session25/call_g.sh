#!/usr/bin/env bash
# Session 25's call G (~1 min; carry [".device/s25g"]): the demo's buckets of decode rows only
# (max_query_len 1) on CUDA: --graphs and --launch fixed verified and printing the same token
# digest (examples/demo/compare_digests.sh), then --graphs twice each with the demo before
# (5516a24's, old/) and after, for the summary's step and host times; the step check.
set -uo pipefail
source bench/device_call.sh /tmp/res25g .device/s25g
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
export LD_LIBRARY_PATH=/tmp/libmain
timeout 200 sh examples/demo/compare_digests.sh $B/bspa-demo "fixed graphs" --device cuda > $R/digests.log 2>&1; echo "compare_digests rc=$?"; cat $R/digests.log
for i in 1 2; do
  for v in old new; do
    if [ $v = old ]; then demo=.device/s25g/old/bspa-demo; else demo=$B/bspa-demo; fi
    timeout 120 $demo --device cuda --graphs --json $R/demo_${v}_$i.json > $R/demo_${v}_$i.log 2>&1; echo "demo $v $i rc=$?"
    grep -E "^(launches|graphs|step time|host time|throughput|result)" $R/demo_${v}_$i.log | head -12
  done
done
timeout 120 $B/bench/bench_step --check > $R/step_check.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check.log)"
save
t done
