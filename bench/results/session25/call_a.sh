#!/usr/bin/env bash
# Session 25's call A (~5 min; carry [".device/s24", ".device/s25"]; an H200 asked for).
#  1. the wgmma e4m3 decode-tile probe and its loop (bench/probes/wgmma_e4m3_decode_{tile,loop}.cu,
#     built here for sm_90a; seconds);
#  2. on main's library (.device/s24/main.so.3.xz, 4234f24, whose kernels are today's):
#     the step check (session 24's split bucket, not yet run on a GPU), bench_step (issue 19's
#     launch rows and the 32-layer step), bench_decode e4m3 and bf16 at pages 64 and 16
#     (issue 20's ratios; issue 19's mixed rows; the loop probe's comparison: 1 x 32767).
# Session 24's early-exit library (ee) is left for a later call: its predicted gain is small.
set -uo pipefail
source bench/device_call.sh /tmp/res25a .device/s24
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
timeout 60 .device/s25/probe_wgmma_e4m3_decode > $R/probe_tile.txt 2>&1; echo "tile probe rc=$?"; cat $R/probe_tile.txt
timeout 120 .device/s25/probe_wgmma_e4m3_loop > $R/probe_loop.txt 2>&1; echo "loop probe rc=$?"; cat $R/probe_loop.txt
save
unpack_lib main
LD_LIBRARY_PATH=/tmp/libmain timeout 120 $B/bench/bench_step --check > $R/step_check_main.log 2>&1
echo "step --check (main) rc=$? $(tail -1 $R/step_check_main.log)"; grep -E "^--|FAIL" $R/step_check_main.log | head -8
t "bench_step main"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_step --reps 200 --json $R/step_main.json --commit 4234f24 > $R/step_main.log 2>&1; echo "rc=$?"
save
for kv in fp8 bf16; do
  t "decode $kv (main)"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_decode --pages 64,16 --kv $kv --json $R/decode_$kv.json --commit 4234f24 > $R/decode_$kv.log 2>&1; echo "rc=$?"
done
save
t done
echo "== bench_step"; grep -E "sm90a prefill's shape after 2.5 ms of GPU|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable\)  |allocations|eager: plan|graph: plan" $R/step_main.log
echo "== decode e4m3 / bf16 (ms)"; paste <(sed -n 3,22p $R/decode_fp8.log | awk '{print $1,$2,$3,$4}') <(sed -n 3,22p $R/decode_bf16.log | awk '{print $4}') | awk '{printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
grep -A5 "CUDA pool" $R/decode_bf16.log | tail -4
