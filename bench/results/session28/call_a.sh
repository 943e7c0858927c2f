#!/usr/bin/env bash
# Session 28's call A (~3 min; carry [".device/s28"]): the streaming ceiling of a batch-1
# decode grid (bench/probes/decode_stream_ceiling.cu, built for sm_90a into .device/s28),
# then main's bench_decode at 64-token pages, e4m3 and bf16, on the same lease.
set -uo pipefail
source bench/device_call.sh /tmp/res28a .device/s28
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $R/gpu.txt
t probe
timeout 200 .device/s28/probe_decode_stream_ceiling 2>&1 | tee $R/probe_stream.log
save
unpack_lib main
for kv in fp8 bf16; do
  t "decode $kv"
  LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_decode --quick --pages 64 --kv $kv --json $R/decode_main_$kv.json --commit main > $R/decode_main_$kv.log 2>&1; echo "rc=$?"
  save
done
for kv in fp8 bf16; do tail -n 25 $R/decode_main_$kv.log; done
t done
