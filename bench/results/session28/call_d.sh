#!/usr/bin/env bash
# Session 28's call D (~3 min; carry [".device/s28"], rebuilt by build_libs.sh; ordered for a
# short budget: what decides first, each phase saved). Against `landed` (main's kernels):
# `lateq` (e4m3 decode CTAs that keep Q's fragments in registers store Q after issuing their
# first K/V copies), `mrel` (the decode split's count by one acquire-release atomic instead
# of fence, atomic, fence) and `both`: e4m3 decode at 64-token pages, two rounds
# alternating, bf16 landed and both beside; batch 1's phase stamps (the `stamp` library,
# read by stamps.py); both's checks.
set -uo pipefail
source bench/device_call.sh /tmp/res28d .device/s28
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $R/gpu.txt
for lib in landed lateq mrel both stamp; do unpack_lib $lib; done
dec() {  # dec LIB KV PAGES TAG
  t "decode $1 $2 p$3 $4"
  LD_LIBRARY_PATH=/tmp/lib$1 timeout 150 $B/bench/bench_decode --quick --pages $3 --kv $2 --json $R/decode_$1_$2_p$3_$4.json --commit $1 > $R/decode_$1_$2_p$3_$4.log 2>&1; echo "rc=$?"
}
for round in 1 2; do for lib in landed lateq mrel both; do dec $lib fp8 64 $round; done; done
dec landed bf16 64 1; dec both bf16 64 1
dcol() { grep -E "^[0-9]+x[0-9]+ " $1 | awk '{print $4}'; }
dnames() { grep -E "^[0-9]+x[0-9]+ " $1 | awk '{print $1, $2, $3}'; }
echo "== decode ms: e4m3 p64 landed lateq mrel both (r1) | the same (r2) | bf16 landed both"
cols=()
for r in 1 2; do for l in landed lateq mrel both; do dcol $R/decode_${l}_fp8_p64_$r.log > $R/col_${l}_$r; cols+=($R/col_${l}_$r); done; done
for l in landed both; do dcol $R/decode_${l}_bf16_p64_1.log > $R/col_${l}_bf16; cols+=($R/col_${l}_bf16); done
paste <(dnames $R/decode_landed_fp8_p64_1.log) "${cols[@]}"
save
for kv in fp8 bf16; do
  t "stamps $kv"
  LD_LIBRARY_PATH=/tmp/libstamp timeout 60 $B/bench/bench_decode --quick --pages 64 --kv $kv --only 1x32767 > $R/decode_stamp_$kv.log 2>&1; echo "rc=$?"
done
python3 bench/results/session28/stamps.py $R/decode_stamp_fp8.log $R/decode_stamp_bf16.log
save
checks both
save
t done
