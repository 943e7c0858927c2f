#!/usr/bin/env bash
# Session 25's call B (~4 min; carry [".device/s25"]):
#  1. bench_step --check with the lse diagnostics (replay vs eager vs a one-step batch,
#     the lse poisoned before each launch), twice: call A's FAIL (step 8 of the split
#     bucket: replay's lse != eager's, outputs equal) on main's library;
#  2. wg = wip/s25-wgmma-decode (e4m3 decode tile on wgmma, sm90a, D 128, <= 8 rows):
#     fp8 check, then bench_decode e4m3 main / wg alternating, two rounds, bf16 on wg once;
#  3. wg's checks (bench/device_call.sh: gpu_check --quick, fp8, step check, demo --graphs,
#     memcheck + racecheck).
set -uo pipefail
source bench/device_call.sh /tmp/res25b .device/s25
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main; unpack_lib wg
for i in 1 2; do
  LD_LIBRARY_PATH=/tmp/libmain timeout 120 $B/bench/bench_step --check > $R/step_check_main_$i.log 2>&1
  echo "step --check (main) $i rc=$? $(tail -1 $R/step_check_main_$i.log)"; grep -E "FAIL|lse" $R/step_check_main_$i.log | head -12
done
save
LD_LIBRARY_PATH=/tmp/libwg timeout 60 $B/bench/bench_fp8_check > $R/fp8check_wg_first.log 2>&1; echo "fp8 check (wg) rc=$? $(tail -1 $R/fp8check_wg_first.log)"
grep -iE "fail|decode" $R/fp8check_wg_first.log | head -8
for round in 1 2; do
  for lib in main wg; do
    t "decode fp8 $lib $round"; LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 $B/bench/bench_decode --pages 64,16 --kv fp8 --json $R/decode_fp8_${lib}_$round.json --commit $lib > $R/decode_fp8_${lib}_$round.log 2>&1; echo "rc=$?"
  done
done
t "decode bf16 wg"; LD_LIBRARY_PATH=/tmp/libwg timeout 150 $B/bench/bench_decode --pages 64,16 --kv bf16 --json $R/decode_bf16_wg.json --commit wg > $R/decode_bf16_wg.log 2>&1; echo "rc=$?"
save
echo "== decode e4m3 ms: main1 wg1 main2 wg2 bf16(wg) wg/bf16"
paste <(sed -n 3,22p $R/decode_fp8_main_1.log | awk '{print $1,$2,$3,$4}') <(sed -n 3,22p $R/decode_fp8_wg_1.log | awk '{print $4}') <(sed -n 3,22p $R/decode_fp8_main_2.log | awk '{print $4}') <(sed -n 3,22p $R/decode_fp8_wg_2.log | awk '{print $4}') <(sed -n 3,22p $R/decode_bf16_wg.log | awk '{print $4}') | awk '{printf "%s %s %s %s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$6,$7,$8,($5+$7)/2/$8}'
checks wg
save
t done
