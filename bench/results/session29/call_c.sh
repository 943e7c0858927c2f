#!/usr/bin/env bash
# Session 29's call C (~2 min; carry [".device/s29"]): small batches that the cluster merge
# takes on 132 SMs (bench_decode's new cases: 8 x 8191, 64 items in 2 splits, clusters of
# 2; 1 x 8191, 8 items in 8, clusters of 8): `clus` against `clus0` (the same library, BSPA_CUDA_DECODE_CLUSTER=0)
# and `base`, e4m3 and bf16, 64- and 16-token pages, three rounds alternating.
set -uo pipefail
source bench/device_call.sh /tmp/res29c .device/s29
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
for lib in base clus; do unpack_lib $lib; done
one() {  # one NAME KV PAGES CASE ROUND
  local lib=$1 env=()
  [ "$1" = clus0 ] && lib=clus env=(BSPA_CUDA_DECODE_CLUSTER=0)
  env "${env[@]}" LD_LIBRARY_PATH=/tmp/lib$lib timeout 60 $B/bench/bench_decode --quick --pages $3 --kv $2 \
    --only $4 --json $R/c_$1_$2_p$3_$4_$5.json --commit $1 > $R/c_$1_$2_p$3_$4_$5.log 2>&1
  echo "$4 $2 p$3 r$5 $1: $(grep -E "^$4 " $R/c_$1_$2_p$3_$4_$5.log | awk '{printf "%s %s; ", $3, $4}')"
}
for r in 1 2 3; do for kv in fp8 bf16; do for pg in 64 16; do for c in 8x8191 1x8191; do for lib in base clus clus0; do
  one $lib $kv $pg $c $r
done; done; done; done; done | tee $R/table.txt
save
