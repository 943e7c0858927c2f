#!/usr/bin/env bash
# Session 26's call E (~1 min; carry [".device/s26"]): which runtime call of a launch pays
# the first call after a 2.5 ms wait (bench_step's rows "after 2.5 ms of GPU work: ..." and
# "... first"), three runs of bench_step on main's library.
set -uo pipefail
source bench/device_call.sh /tmp/res26e .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
for i in 1 2 3; do
  t "bench_step $i"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_step_wait2 --reps 200 --json $R/step_$i.json --commit 3ec0db8+wait-rows > $R/step_$i.log 2>&1; echo "rc=$?"
  save
done
for i in 1 2 3; do echo "== run $i"; grep -E "empty kernel launch|after 2.5 ms|decode rows|32k prefill|back to back" $R/step_$i.log; done
t done
