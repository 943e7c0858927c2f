#!/usr/bin/env bash
# Session 27's call A (~5 min; carry [".device/s27"]). Issue 20, the e4m3 prefill:
#  1. session 26's call J, run at last: main (the landed ping-pong for e4m3 pages) against
#     `old` (a583557's kernels, before it), e4m3 pages, two rounds alternating;
#  2. the ceiling of an e4m3 path without the producer's widening: `skipk` / `skipkv`
#     (wip/s27-diag-widen: the widening of K, of K and V, skipped once the ring's first pass
#     holds widened tiles) against main, e4m3 pages, two rounds; main's bf16 rate beside.
# bench_prefill --quick --no-sweep, 64-token pages, Phi-3-small shapes.
set -uo pipefail
source bench/device_call.sh /tmp/res27a .device/s27
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for l in main old skipk skipkv; do unpack_lib $l; done
run() {  # run LIB TAG KV
  t "prefill $3 $1 $2"
  LD_LIBRARY_PATH=/tmp/lib$1 timeout 100 $B/bench/bench_prefill --quick --no-sweep --kv $3 --json $R/${1}_$3_$2.json --commit $1 > $R/${1}_$3_$2.log 2>&1; echo "rc=$?"
}
for round in 1 2; do for lib in old main; do run $lib $round fp8; done; done
save
for round in 1 2; do for lib in main skipk skipkv; do run $lib d$round fp8; done; done
run main 1 bf16
save
cols() { sed -n '/^case/,$p' $1 | tail -n +2 | awk '{print $(NF-2), $NF}'; }
names() { sed -n '/^case/,$p' $1 | tail -n +2 | cut -c1-28; }
echo "== e4m3: old r1 | main r1 | old r2 | main r2 (sparse dense TFLOP/s)"
paste <(names $R/main_fp8_1.log) <(cols $R/old_fp8_1.log) <(cols $R/main_fp8_1.log) <(cols $R/old_fp8_2.log) <(cols $R/main_fp8_2.log)
echo "== bf16 main | e4m3 main d1 | skipk d1 | skipkv d1 | main d2 | skipk d2 | skipkv d2"
paste <(names $R/main_bf16_1.log) <(cols $R/main_bf16_1.log) <(cols $R/main_fp8_d1.log) <(cols $R/skipk_fp8_d1.log) <(cols $R/skipkv_fp8_d1.log) <(cols $R/main_fp8_d2.log) <(cols $R/skipk_fp8_d2.log) <(cols $R/skipkv_fp8_d2.log)
t done
