#!/usr/bin/env bash
# Session 26's call F (~1 min; carry [".device/s26"]): bench_step (with the "an empty kernel
# first" rows) under --schedule auto and spin, alternating, two rounds, on main's library:
# whether a host that spins while it waits for the GPU pays the first launch after a wait.
set -uo pipefail
source bench/device_call.sh /tmp/res26f .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
for i in 1 2; do for s in auto spin; do
  t "bench_step $s $i"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_step_wait3 --schedule $s --reps 200 --json $R/step_${s}_$i.json --commit 3ec0db8+wait-rows > $R/step_${s}_$i.log 2>&1; echo "rc=$?"
  save
done; done
for f in $R/step_*_[12].log; do echo "== $(basename $f)"; grep -E "empty kernel launch|after 2.5 ms|decode rows|32k prefill|eager|graph" $f; done
t done
