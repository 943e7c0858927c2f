#!/usr/bin/env bash
# Session 31's call A (carry [".device/s30"], rebuilt by ../session30/build_libs.sh; ~4 min):
# session 30's call H (../session30/call_h.sh: the paged chunk + 63 four ways, the pool
# rows over written contexts, bench_step), then the mixed steps' prefill grid capped
# (BSPA_CUDA_MIXED_PREFILL_CTAS, session 23's item 6 sweep, whose pool rows read unwritten
# contexts) over written ones: does a cap still gain, and where, on the honest data?
set -uo pipefail
bash bench/results/session30/call_h.sh
source bench/device_call.sh /tmp/res31a .device/s30
R=$DC_RESULTS B=$DC_BIN
t "the cap sweep"
for cap in 0 124 116 112 104 96 88; do
  for row in chunk2048+63dec 8x512+120dec; do
    BSPA_CUDA_MIXED_PREFILL_CTAS=$cap LD_LIBRARY_PATH=/tmp/libmain timeout 90 $B/bench/bench_decode --pages 64 \
      --kv bf16 --only $row > $R/cap_${cap}_$row.log 2>&1
    echo "cap $cap:"; grep -E "^$row" $R/cap_${cap}_$row.log
  done
done | tee $R/cap_table.txt
save
t done
