#!/usr/bin/env bash
# Session 29's call B (~1 min; carry [".device/s29"]): clusters the device holds
# (probe_cluster_occupancy), and batch 1 (1 x 32767, e4m3 and bf16, 64-token pages) with
# the splits forced to 8 (clusters of 8 always fit) and at the plan's 16: `clus` against
# `clus0` (the same library, BSPA_CUDA_DECODE_CLUSTER=0) and `base`, three rounds.
set -uo pipefail
source bench/device_call.sh /tmp/res29b .device/s29
R=$DC_RESULTS B=$DC_BIN
.device/s29/probe_cluster_occupancy | tee $R/probe.txt
for lib in base clus; do unpack_lib $lib; done
one() {  # one NAME KV SPLITS ROUND
  local lib=$1 env=()
  [ "$1" = clus0 ] && lib=clus env=(BSPA_CUDA_DECODE_CLUSTER=0)
  [ "$3" != plan ] && env+=(BSPA_DECODE_SPLITS=$3)
  env "${env[@]}" LD_LIBRARY_PATH=/tmp/lib$lib timeout 60 $B/bench/bench_decode --quick --pages 64 --kv $2 \
    --only 1x32767 > $R/b1_$1_$2_$3_$4.log 2>&1
  echo "$1 $2 splits=$3 r$4: $(grep -E '^1x32767' $R/b1_$1_$2_$3_$4.log | awk '{printf "%s %s; ", $3, $4}')"
}
for r in 1 2 3; do for kv in fp8 bf16; do for s in 8 plan; do for lib in base clus clus0; do
  one $lib $kv $s $r
done; done; done; done | tee $R/table.txt
save
