#!/usr/bin/env bash
# Session 31's call B (carry [".device/s30"]; ~2.5 min): call A's cap sweep again without
# --quick, two rounds alternating, caps none (0), 120, 112, 108, 104, 100, 96.
set -uo pipefail
source bench/device_call.sh /tmp/res31b .device/s30
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
for r in 1 2; do
  for cap in 0 120 112 108 104 100 96; do
    BSPA_CUDA_MIXED_PREFILL_CTAS=$cap LD_LIBRARY_PATH=/tmp/libmain timeout 90 $B/bench/bench_decode --pages 64 \
      --kv bf16 --only chunk2048+63dec,8x512+120dec > $R/cap_${cap}_$r.log 2>&1
    echo "r$r cap $cap:"; grep -E "^(chunk2048|8x512)" $R/cap_${cap}_$r.log
  done
  save
done > $R/cap_table.txt
save
t done
