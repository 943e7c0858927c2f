#!/usr/bin/env bash
# Session 25's call F (~30 s; carry [".device/s25f"]): bench_step with the decode-only bucket
# (max_query_len 1) beside the mixed one, on main's kernels (5516a24's library; bench_step of
# this commit), twice: what a decode step's replay costs when its bucket holds no prefill
# grid (the header's advice under fixed_launch_shape).
set -uo pipefail
source bench/device_call.sh /tmp/res25f .device/s25f
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
for i in 1 2; do
  t "bench_step $i"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_step --reps 200 --json $R/step_$i.json --commit 5516a24 > $R/step_$i.log 2>&1; echo "rc=$?"
  grep -E "empty kernel launch  |eager|graph" $R/step_$i.log
done
LD_LIBRARY_PATH=/tmp/libmain timeout 120 $B/bench/bench_step --check > $R/step_check.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check.log)"
save
t done
