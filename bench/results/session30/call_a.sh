#!/usr/bin/env bash
# Session 30's call A (~7 min; ~10 on an H200; carry [".device/s29"], built by
# bench/results/session29/build_libs.sh). Most wanted first, saved after each phase:
# 1. main's library (clus: d6a8be3's code, whose host-side mends no GPU had run) through
#    every check (bench/device_call.sh's `checks`);
# 2. session 29's call F, two rounds: plan8 (kMinSplitTiles 8, branch wip/s29-min-split-8)
#    against clus on 1 x 1k-8k, 2 x 2k and 1 x 32k, e4m3 and bf16, 64-token pages; then
#    plan8's quick GPU sweep;
# 3. on an H200 only: issue 19's host rows (bench_step) and issue 20's e4m3 / bf16 decode
#    ratios on main.
set -uo pipefail
source bench/device_call.sh /tmp/res30a .device/s29
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in clus plan8; do unpack_lib $lib; done
checks clus
save
t "call F: plan8 against clus"
for r in 1 2; do for kv in fp8 bf16; do for c in 1x1023 1x2047 1x4095 1x8191 2x2047 1x32767; do
  for lib in clus plan8; do decode_case $lib $c $kv r$r; done
done; done; done | tee $R/table.txt
save
t "gpu_check (plan8)"
LD_LIBRARY_PATH=/tmp/libplan8 timeout 300 $B/bench/bench_gpu_check --quick > $R/check_plan8.log 2>&1
echo "gpu_check rc=$? $(tail -1 $R/check_plan8.log)"
save
grep -q H200 $R/gpu.txt && issue_figures clus d6a8be3 64
t done
