#!/usr/bin/env bash
# Session 27's call E (~4 min; carry [".device/s27"]): the landed library (`landed`: the
# commit's build, 80;90a) and its bench programs (bin/ of the same commit): bench_gpu_check
# --quick (with the new case: a 512-row e4m3 prefill over a 30001-token prefix at head dim
# 128), the fp8 check, the step check, demo --graphs, memcheck and racecheck; then e4m3
# pages, main / landed alternating, two rounds at 64-token pages, and main's bf16 beside.
set -uo pipefail
source bench/device_call.sh /tmp/res27e .device/s27
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib landed; unpack_lib main
checks landed
grep -E "fp8 seqs 30001\+512" $R/check_landed.log
save
run() {  # run LIB TAG KV
  t "prefill $3 $1 $2"
  LD_LIBRARY_PATH=/tmp/lib$1 timeout 100 $B/bench/bench_prefill --quick --no-sweep --kv $3 --json $R/${1}_$3_$2.json --commit $1 > $R/${1}_$3_$2.log 2>&1; echo "rc=$?"
}
for round in 1 2; do for lib in main landed; do run $lib $round fp8; done; done
run main 1 bf16
save
cols() { sed -n '/^case/,$p' $1 | tail -n +2 | awk '{print $(NF-2), $NF}'; }
names() { sed -n '/^case/,$p' $1 | tail -n +2 | cut -c1-28; }
echo "== e4m3 p64: main r1 | landed r1 | main r2 | landed r2 | bf16 main (sparse dense TFLOP/s)"
paste <(names $R/main_fp8_1.log) <(cols $R/main_fp8_1.log) <(cols $R/landed_fp8_1.log) <(cols $R/main_fp8_2.log) <(cols $R/landed_fp8_2.log) <(cols $R/main_bf16_1.log)
t done
