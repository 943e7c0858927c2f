#!/usr/bin/env bash
# Session 27's call E (~3 min; carry [".device/s27"]): the landed library (`landed`: the
# commit's build, 80;90a) and its bench programs (bin/ of the same commit): bench_gpu_check
# --quick (with the new case: a 512-row e4m3 prefill over a 30001-token prefix at head dim
# 128), the fp8 check, the step check, demo --graphs, memcheck and racecheck.
set -uo pipefail
source bench/device_call.sh /tmp/res27e .device/s27
R=$DC_RESULTS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib landed
checks landed
grep -E "fp8 seqs 30001\+512" $R/check_landed.log
save
t done
