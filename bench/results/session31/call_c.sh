#!/usr/bin/env bash
# Session 31's call C (carry [".device/s31"], built by build_libs.sh; ~5 min): the mixed
# share (wip/s31-mixed-share: a pool batch's mixed launch caps its prefill grid by the
# plan's estimate) against main, both mixed steps of bench_decode, two rounds alternating;
# then the checks on the branch's library (bench_gpu_check --quick with its mixed batches,
# the fp8 check, bench_step --check, demo --graphs, memcheck + racecheck).
set -uo pipefail
source bench/device_call.sh /tmp/res31c .device/s31
R=$DC_RESULTS
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
unpack_lib share
mixed_ab 2 main share
checks share
save
t done
