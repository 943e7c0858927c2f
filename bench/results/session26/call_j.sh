#!/usr/bin/env bash
# Session 26's call J (~1.5 min; carry [".device/s26"]): the landed rule (ping-pong at head
# dim 64 and for e4m3 pages; library ppe, whose e4m3 kernels' SASS is call I's pp128's and
# whose 16-bit head-dim-128 kernels' is main's) against main on e4m3 pages, bench_prefill
# --quick --no-sweep --kv fp8 alternating, two rounds.
set -uo pipefail
source bench/device_call.sh /tmp/res26k .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main; unpack_lib ppe
for round in 1 2; do for lib in main ppe; do
  t "prefill e4m3 $lib $round"
  LD_LIBRARY_PATH=/tmp/lib$lib timeout 100 $B/bench/bench_prefill --quick --no-sweep --kv fp8 --json $R/${lib}_$round.json --commit $lib > $R/${lib}_$round.log 2>&1; echo "rc=$?"
done; done
save
cols() { sed -n '/^case/,$p' $1 | tail -n +2 | awk '{print $(NF-2), $NF}'; }
echo "case | main r1 | ppe r1 | main r2 | ppe r2 (e4m3 pages, sparse / dense TFLOP/s)"
paste <(sed -n '/^case/,$p' $R/main_1.log | tail -n +2 | cut -c1-28) <(cols $R/main_1.log) <(cols $R/ppe_1.log) <(cols $R/main_2.log) <(cols $R/ppe_2.log)
t done
