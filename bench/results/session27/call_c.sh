#!/usr/bin/env bash
# Session 27's call C (~2.5 min; carry [".device/s27"]). Issue 20: fk's variants against main
# and fk on e4m3 pages (bench_prefill --quick --no-sweep, 64-token pages, two rounds
# alternating): fk6 (six V staging slots instead of four), fknp (fk without the consumers'
# ping-pong), fk6np (both).
set -uo pipefail
source bench/device_call.sh /tmp/res27c .device/s27
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
libs="main fk fk6 fknp fk6np"
for l in $libs; do unpack_lib $l; done
for round in 1 2; do for lib in $libs; do
  t "prefill e4m3 $lib $round"
  LD_LIBRARY_PATH=/tmp/lib$lib timeout 100 $B/bench/bench_prefill --quick --no-sweep --kv fp8 --json $R/${lib}_$round.json --commit $lib > $R/${lib}_$round.log 2>&1; echo "rc=$?"
done; done
save
cols() { sed -n '/^case/,$p' $1 | tail -n +2 | awk '{print $(NF-2), $NF}'; }
names() { sed -n '/^case/,$p' $1 | tail -n +2 | cut -c1-28; }
for round in 1 2; do
  echo "== round $round: main | fk | fk6 | fknp | fk6np (e4m3 p64, sparse dense TFLOP/s)"
  paste <(names $R/main_$round.log) <(cols $R/main_$round.log) <(cols $R/fk_$round.log) <(cols $R/fk6_$round.log) <(cols $R/fknp_$round.log) <(cols $R/fk6np_$round.log)
done
t done
