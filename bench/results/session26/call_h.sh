#!/usr/bin/env bash
# Session 26's call H (~4 min; carry [".device/s26"]): the D 64 consumers' ping-pong
# (wip/s26-pingpong-d64, library pp) against main: bench_prefill --quick --no-sweep
# --shape 16/16/64 alternating, two rounds, plus cuDNN at that shape in the same run;
# pp's checks (gpu_check --quick, fp8, step, demo --graphs) and compute-sanitizer
# memcheck, racecheck and synccheck.
set -uo pipefail
source bench/device_call.sh /tmp/res26i .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main; unpack_lib pp
for round in 1 2; do for lib in main pp; do
  t "prefill d64 $lib $round"
  LD_LIBRARY_PATH=/tmp/lib$lib timeout 120 $B/bench/bench_prefill --quick --no-sweep --shape 16/16/64 --json $R/d64_${lib}_$round.json --commit $lib > $R/d64_${lib}_$round.log 2>&1; echo "rc=$?"
done; done
save
t "torch"; timeout 120 python3 bench/compare_torch.py --shape 16/16/64 --cases "8k C=0,32k C=0" --budget 80 --json $R/torch_d64.json > $R/torch_d64.log 2>&1; echo "rc=$?"
save
checks pp
bundle=$DC_LIBS/bundle_pp
OUT=$R/san_pp_sync timeout 120 bash scripts/gpu_sanitize.sh "$bundle" synccheck > $R/sanitize_sync_pp.txt 2>&1; echo "synccheck rc=$?"; grep -E " rc=" $R/sanitize_sync_pp.txt | head -2
save
echo "case | main r1 | pp r1 | main r2 | pp r2 (sparse / dense TFLOP/s)"
paste <(sed -n '/^case/,$p' $R/d64_main_1.log | tail -n +2 | cut -c1-28) \
      <(sed -n '/^case/,$p' $R/d64_main_1.log | tail -n +2 | awk '{print $(NF-2), $NF}') \
      <(sed -n '/^case/,$p' $R/d64_pp_1.log | tail -n +2 | awk '{print $(NF-2), $NF}') \
      <(sed -n '/^case/,$p' $R/d64_main_2.log | tail -n +2 | awk '{print $(NF-2), $NF}') \
      <(sed -n '/^case/,$p' $R/d64_pp_2.log | tail -n +2 | awk '{print $(NF-2), $NF}')
tail -4 $R/torch_d64.log
t done
