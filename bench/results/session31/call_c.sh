#!/usr/bin/env bash
# Session 31's call C (carry [".device/s31"], built by build_libs.sh; ~5 min): the mixed
# share (wip/s31-mixed-share: a pool batch's mixed launch caps its prefill grid by the
# plan's estimate) against main, both mixed steps of bench_decode, two rounds alternating;
# then the checks on the branch's library (bench_gpu_check --quick with its mixed batches,
# the fp8 check, bench_step --check, demo --graphs, memcheck + racecheck).
set -uo pipefail
source bench/device_call.sh /tmp/res31c .device/s31
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
unpack_lib share
for r in 1 2; do
  for lib in main share; do
    LD_LIBRARY_PATH=/tmp/lib$lib timeout 90 $B/bench/bench_decode --pages 64 --kv bf16 \
      --only chunk2048+63dec,8x512+120dec > $R/ab_${lib}_$r.log 2>&1
    echo "r$r $lib:"; grep -E "^(chunk2048|8x512)" $R/ab_${lib}_$r.log
  done
done | tee $R/ab_table.txt
save
checks share
save
t done
