#!/usr/bin/env bash
# Session 25's call I (~20 s; carry [".device/s25g"]): bench_step with both 32-layer buckets
# told that decode rows are one token (max_decode_query_len 1: the same decode tile), so the
# two rows differ by the idle prefill grid alone (the review of the session's change: the
# mixed bucket's decode tile was sized for 8 tokens in calls F and H).
set -uo pipefail
source bench/device_call.sh /tmp/res25i .device/s25g
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
export LD_LIBRARY_PATH=/tmp/libmain
timeout 100 $B/bench/bench_step --reps 200 --json $R/step.json --commit session25 > $R/step.log 2>&1; echo "bench_step rc=$?"
grep -E "empty kernel launch  |eager|graph|alone" $R/step.log
save
