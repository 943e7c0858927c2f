#!/usr/bin/env bash
# Session 27's call B (~6 min; carry [".device/s27"]). Issue 20: the e4m3 prefill's S GEMM on
# FP8 wgmma over K's bytes as they land (library `fk`, wip/s27-fp8-keys: K's ring of e4m3
# rows, q split hi + lo, only V staged and widened; D 128) against main.
#  1. fk's checks first (bench_gpu_check --quick, the fp8 check); stops there on a failure;
#  2. e4m3 pages: bench_prefill --quick --no-sweep alternating main / fk, two rounds at
#     64-token pages, one at 16;
#  3. fk's remaining checks (step check, demo --graphs, memcheck, racecheck).
set -uo pipefail
source bench/device_call.sh /tmp/res27b .device/s27
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for l in main fk; do unpack_lib $l; done
t "gpu_check fk"
LD_LIBRARY_PATH=/tmp/libfk timeout 300 $B/bench/bench_gpu_check --quick > $R/check_fk.log 2>&1; rc1=$?
echo "gpu_check rc=$rc1 $(tail -1 $R/check_fk.log)"; grep -E "FAIL|e4m3|fp8" $R/check_fk.log | grep -E "FAIL" | head -12
LD_LIBRARY_PATH=/tmp/libfk timeout 60 $B/bench/bench_fp8_check > $R/fp8check_fk.log 2>&1; rc2=$?
echo "fp8 check rc=$rc2 $(tail -1 $R/fp8check_fk.log)"; grep -iE "FAIL|rel" $R/fp8check_fk.log | head -20
save
if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then t "checks failed: no bench"; exit 1; fi
run() {  # run LIB TAG PAGE
  t "prefill e4m3 $1 $2 p$3"
  LD_LIBRARY_PATH=/tmp/lib$1 timeout 100 $B/bench/bench_prefill --quick --no-sweep --kv fp8 --page-size $3 --json $R/${1}_p$3_$2.json --commit $1 > $R/${1}_p$3_$2.log 2>&1; echo "rc=$?"
}
for round in 1 2; do for lib in main fk; do run $lib $round 64; done; done
for lib in main fk; do run $lib 1 16; done
save
cols() { sed -n '/^case/,$p' $1 | tail -n +2 | awk '{print $(NF-2), $NF}'; }
names() { sed -n '/^case/,$p' $1 | tail -n +2 | cut -c1-28; }
echo "== e4m3 p64: main r1 | fk r1 | main r2 | fk r2 || p16: main | fk (sparse dense TFLOP/s)"
paste <(names $R/main_p64_1.log) <(cols $R/main_p64_1.log) <(cols $R/fk_p64_1.log) <(cols $R/main_p64_2.log) <(cols $R/fk_p64_2.log) <(cols $R/main_p16_1.log) <(cols $R/fk_p16_1.log)
checks fk
save
t done
