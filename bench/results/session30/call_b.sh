#!/usr/bin/env bash
# Session 30's call B (~20 s, right after call A on the same warm H100; carry [".device/s29"]):
# every bench_decode case at 64- and 16-token pages, e4m3 and bf16, --quick, clus (main)
# and plan8 (kMinSplitTiles 8) one after the other, then the change per case.
set -uo pipefail
source bench/device_call.sh /tmp/res30b .device/s29
R=$DC_RESULTS B=$DC_BIN
for lib in clus plan8; do unpack_lib $lib; done
for kv in fp8 bf16; do for lib in clus plan8; do
  t "$lib $kv"; LD_LIBRARY_PATH=/tmp/lib$lib timeout 100 $B/bench/bench_decode --quick --pages 64,16 --kv $kv > $R/full_${lib}_$kv.log 2>&1; echo rc=$?
done; done
save
for kv in fp8 bf16; do
  paste <(awk '{print $1,$2,$3,$4}' $R/full_clus_$kv.log) <(awk '{print $4}' $R/full_plan8_$kv.log) |
    awk -v kv=$kv '$4+0>0 && $5+0>0 {printf "%s %s %s %s %s %s %+.1f%%\n",kv,$1,$2,$3,$4,$5,100*($5/$4-1)}'
done
