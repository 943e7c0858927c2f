#!/usr/bin/env bash
# Session 31's call D (carry [".device/s31"], rebuilt by build_libs.sh from main after
# bc9bd0c: the mixed share under dense layouts over 16-bit pages; ~2.5 min): the share against main, both mixed steps of bench_decode, three
# rounds alternating (the sparse rows, uncapped in both, are the control); then
# bench_gpu_check --quick and bench_step --check on the share's library; bench_step's host rows on main's.
set -uo pipefail
source bench/device_call.sh /tmp/res31d .device/s31
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
unpack_lib share
mixed_ab 3 main share
t "checks"
LD_LIBRARY_PATH=/tmp/libshare timeout 300 $B/bench/bench_gpu_check --quick > $R/check_share.log 2>&1
echo "gpu_check rc=$? $(tail -1 $R/check_share.log)"
LD_LIBRARY_PATH=/tmp/libshare timeout 90 $B/bench/bench_step --check > $R/step_check_share.log 2>&1
echo "step --check rc=$? $(tail -1 $R/step_check_share.log)"
save
t "bench_step (main)"
LD_LIBRARY_PATH=/tmp/libmain timeout 120 $B/bench/bench_step --reps 200 --json $R/step.json > $R/step.log 2>&1
echo "rc=$?"; grep -E "floor|plan|kv_write|prefill|alloc" $R/step.log | head -12
save
t done
