#!/usr/bin/env bash
# Session 26's call D (~1.5 min; carry [".device/s26"]): bench_step with the rows that tell
# the first launch after a wait from the library's own cost (an empty kernel launched,
# untimed, between the wait and the timed call), twice, on main's library.
set -uo pipefail
source bench/device_call.sh /tmp/res26d .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
for i in 1 2; do
  t "bench_step $i"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_step_wait --reps 200 --json $R/step_$i.json --commit 3ec0db8+wait-rows > $R/step_$i.log 2>&1; echo "rc=$?"
  save
done
paste <(sed -n 2,34p $R/step_1.log | cut -c1-90) <(sed -n 2,34p $R/step_2.log | awk '{print $(NF-1), $NF}')
t done
