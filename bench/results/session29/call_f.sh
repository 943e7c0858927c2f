#!/usr/bin/env bash
# Session 29's call F (~2.5 min; carry [".device/s29"]): splits of at least 8 key tiles
# instead of 16 (`plan8`: kMinSplitTiles 8) against `clus` (the same kernels, 16), short
# batch-1 and batch-2 contexts where that bound decides the splits, and 1 x 32767 where it
# does not; e4m3 and bf16, 64-token pages, three rounds alternating; plan8's quick GPU sweep.
set -uo pipefail
source bench/device_call.sh /tmp/res29f .device/s29
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
for lib in clus plan8; do unpack_lib $lib; done
for r in 1 2 3; do for kv in fp8 bf16; do for c in 1x1023 1x2047 1x4095 1x8191 2x2047 1x32767; do
  for lib in clus plan8; do decode_case $lib $c $kv r$r; done
done; done; done | tee $R/table.txt
save
t "gpu_check (plan8)"
LD_LIBRARY_PATH=/tmp/libplan8 timeout 300 $B/bench/bench_gpu_check --quick > $R/check_plan8.log 2>&1
echo "gpu_check rc=$? $(tail -1 $R/check_plan8.log)"
save
t done
