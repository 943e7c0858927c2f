#!/usr/bin/env bash
# Session 28's call C (~1 min; carry [".device/s28"]): where batch 1's decode time goes.
# `stamp` = the landed library + decode_phase_stamps.diff (thread 0 of every two-quad
# decode CTA prints its globaltimer at entry and exit and clock64 at each phase); batch 1
# (1 x 32767, 64-token pages), e4m3 and bf16, main's timing beside.
set -uo pipefail
source bench/device_call.sh /tmp/res28c .device/s28
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $R/gpu.txt
unpack_lib landed; unpack_lib stamp
for kv in fp8 bf16; do
  for lib in landed stamp; do
    t "decode $lib $kv"
    LD_LIBRARY_PATH=/tmp/lib$lib timeout 60 $B/bench/bench_decode --quick --pages 64 --kv $kv --only 1x32767 > $R/decode_${lib}_$kv.log 2>&1; echo "rc=$?"
  done
done
save
for f in $R/decode_*.log; do echo "$f"; grep -E "^1x32767 " $f; grep -c STAMP $f; done
t done
