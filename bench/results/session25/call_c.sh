#!/usr/bin/env bash
# Session 25's call C (~5 min; carry [".device/s25c"]): the split combine in chunk order
# (fix = main + prefill_sm90.cuh's fold, bench_step's lse diagnostics).
#  1. bench_step --check three times on fix (call B: 1-43 lse values a step differed in
#     their last bits between replay and eager, on main);
#  2. fix's checks (gpu_check --quick, fp8, step check, demo --graphs, memcheck + racecheck);
#  3. bench_step and bench_decode (bf16 and e4m3, pages 64 and 16) on fix: issue 19's rows
#     and mixed steps, issue 20's ratios, on whatever card came;
#  4. bench_prefill --quick --no-sweep main / fix, one round each (the fold only touches
#     split items: prediction within the run-to-run spread).
set -uo pipefail
source bench/device_call.sh /tmp/res25c .device/s25c
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main; unpack_lib fix
for i in 1 2 3; do
  LD_LIBRARY_PATH=/tmp/libfix timeout 120 $B/bench/bench_step --check > $R/step_check_fix_$i.log 2>&1
  echo "step --check (fix) $i rc=$? $(tail -1 $R/step_check_fix_$i.log)"; grep -E "FAIL|lse" $R/step_check_fix_$i.log | head -6
done
save
t "bench_step fix"; LD_LIBRARY_PATH=/tmp/libfix timeout 150 $B/bench/bench_step --reps 200 --json $R/step_fix.json --commit fix > $R/step_fix.log 2>&1; echo "rc=$?"
for kv in fp8 bf16; do
  t "decode $kv (fix)"; LD_LIBRARY_PATH=/tmp/libfix timeout 150 $B/bench/bench_decode --pages 64,16 --kv $kv --json $R/decode_$kv.json --commit fix > $R/decode_$kv.log 2>&1; echo "rc=$?"
done
save
echo "== bench_step"; grep -E "floor: sm90a prefill's shape after 2.5 ms of GPU|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable|allocations|kv_write \(reusable\)|eager: plan|graph: plan" $R/step_fix.log
echo "== decode e4m3 / bf16 (ms)"; paste <(sed -n 3,22p $R/decode_fp8.log | awk '{print $1,$2,$3,$4}') <(sed -n 3,22p $R/decode_bf16.log | awk '{print $4}') | awk '{printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
grep -A5 "mixed step" $R/decode_bf16.log | head -12
checks fix
save
for lib in main fix; do
  t "prefill $lib"; LD_LIBRARY_PATH=/tmp/lib$lib timeout 200 $B/bench/bench_prefill --quick --no-sweep --json $R/prefill_$lib.json --commit $lib > $R/prefill_$lib.log 2>&1; echo "rc=$?"
done
save
paste <(grep -E "^ *[0-9]+k|^mixed|x ?[0-9]" $R/prefill_main.log | head -30) <(grep -E "^ *[0-9]+k|^mixed|x ?[0-9]" $R/prefill_fix.log | head -30) | cut -c1-200
t done
