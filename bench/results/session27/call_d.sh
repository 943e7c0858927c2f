#!/usr/bin/env bash
# Session 27's call D (~6 min; carry [".device/s27"]). Issue 20: fk6b (the landing candidate:
# fk with six V staging slots and q split through f16 pairs, cheaper at an item's start)
# against main and fk6 (call C's best, q split through floats) on e4m3 pages:
#  1. fk6b's checks first (bench_gpu_check --quick, the fp8 check); stops on a failure;
#  2. bench_prefill --quick --no-sweep --kv fp8, main / fk6 / fk6b alternating, two rounds
#     at 64-token pages; main / fk6b at 16 and 32; main's bf16 rate at 64 beside;
#  3. fk6b's remaining checks (step check, demo --graphs, memcheck, racecheck).
set -uo pipefail
source bench/device_call.sh /tmp/res27d .device/s27
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for l in main fk6 fk6b; do unpack_lib $l; done
t "gpu_check fk6b"
LD_LIBRARY_PATH=/tmp/libfk6b timeout 300 $B/bench/bench_gpu_check --quick > $R/check_fk6b.log 2>&1; rc1=$?
echo "gpu_check rc=$rc1 $(tail -1 $R/check_fk6b.log)"; grep FAIL $R/check_fk6b.log | head -12
LD_LIBRARY_PATH=/tmp/libfk6b timeout 60 $B/bench/bench_fp8_check > $R/fp8check_fk6b.log 2>&1; rc2=$?
echo "fp8 check rc=$rc2 $(tail -1 $R/fp8check_fk6b.log)"; grep -iE "FAIL" $R/fp8check_fk6b.log | head -12
save
if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then t "checks failed: no bench"; exit 1; fi
run() {  # run LIB TAG PAGE KV
  t "prefill $4 $1 $2 p$3"
  LD_LIBRARY_PATH=/tmp/lib$1 timeout 100 $B/bench/bench_prefill --quick --no-sweep --kv $4 --page-size $3 --json $R/${1}_$4_p$3_$2.json --commit $1 > $R/${1}_$4_p$3_$2.log 2>&1; echo "rc=$?"
}
for round in 1 2; do for lib in main fk6 fk6b; do run $lib $round 64 fp8; done; done
for pg in 16 32; do for lib in main fk6b; do run $lib 1 $pg fp8; done; done
run main 1 64 bf16
save
cols() { sed -n '/^case/,$p' $1 | tail -n +2 | awk '{print $(NF-2), $NF}'; }
names() { sed -n '/^case/,$p' $1 | tail -n +2 | cut -c1-28; }
echo "== e4m3 p64: main r1 | fk6 r1 | fk6b r1 | main r2 | fk6 r2 | fk6b r2 | bf16 main (sparse dense TFLOP/s)"
paste <(names $R/main_fp8_p64_1.log) <(cols $R/main_fp8_p64_1.log) <(cols $R/fk6_fp8_p64_1.log) <(cols $R/fk6b_fp8_p64_1.log) <(cols $R/main_fp8_p64_2.log) <(cols $R/fk6_fp8_p64_2.log) <(cols $R/fk6b_fp8_p64_2.log) <(cols $R/main_bf16_p64_1.log)
echo "== e4m3 p16: main | fk6b || p32: main | fk6b"
paste <(names $R/main_fp8_p16_1.log) <(cols $R/main_fp8_p16_1.log) <(cols $R/fk6b_fp8_p16_1.log) <(cols $R/main_fp8_p32_1.log) <(cols $R/fk6b_fp8_p32_1.log)
checks fk6b
save
t done
