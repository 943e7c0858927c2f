#!/usr/bin/env bash
# Session 30's call C (~3 min on an H100, ~6 on an H200; carry [".device/s30"], built by
# build_libs.sh): main's library after the change to 8 key tiles a split, through every
# check; then, on an H200 only, issue 19's host rows (bench_step) and issue 20's e4m3 /
# bf16 decode ratios on it (no H200 has run main since session 26). Its second run
# (ONLY_H200=1) was for an H200 alone.
set -uo pipefail
source bench/device_call.sh /tmp/res30c .device/s30
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
# ONLY_H200=1: nothing on another GPU (its checks already ran there: call C's first run).
if [ "${ONLY_H200:-0}" = 1 ] && ! grep -q H200 $R/gpu.txt; then t "not an H200: nothing run"; exit 0; fi
unpack_lib main
checks main
save
grep -q H200 $R/gpu.txt && issue_figures main "$(cat .device/s30/commit 2>/dev/null || echo main)" 64,16
t done
