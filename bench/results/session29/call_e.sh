#!/usr/bin/env bash
# Session 29's call E (~1 min; carry [".device/s29"]): does a split count whose clusters fit
# beat the plan's where the plan's do not? The `clus` library, e4m3 and bf16, 64-token
# pages, three rounds: 1 x 8191 (plan 8 splits, clusters of 8; forced 16, no cluster fits),
# 2 x 8191 (plan 8, 16 clusters of 8 and 15 fit; forced 4, clusters of 4), 4 x 8191 (plan 4,
# 32 clusters of 4 and 30 fit; forced 2, clusters of 2).
set -uo pipefail
source bench/device_call.sh /tmp/res29e .device/s29
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
unpack_lib clus
one() {  # one CASE KV SPLITS ROUND
  local env=() extra=()
  [ "$3" != plan ] && env=(BSPA_DECODE_SPLITS=$3)
  [ "$1" != 1x8191 ] && extra=(--case $1)  # 1x8191 is one of bench_decode's own cases
  env "${env[@]}" LD_LIBRARY_PATH=/tmp/libclus timeout 60 $B/bench/bench_decode --quick --pages 64 --kv $2 \
    "${extra[@]}" --only $1 > $R/e_$1_$2_$3_$4.log 2>&1
  echo "$1 $2 splits=$3 r$4: $(grep -E "^$1 " $R/e_$1_$2_$3_$4.log | awk '{printf "%s %s; ", $3, $4}')"
}
for r in 1 2 3; do for kv in fp8 bf16; do
  for s in plan 16; do one 1x8191 $kv $s $r; done
  for s in plan 4; do one 2x8191 $kv $s $r; done
  for s in plan 2; do one 4x8191 $kv $s $r; done
done; done | tee $R/table.txt
save
