#!/usr/bin/env bash
# Session 29's call A (~4 min; carry [".device/s29"]): the decode split merged inside a
# thread-block cluster (`clus`, Split::cluster) against `base` (main before it: 465ba19's
# kernels), and `clus` with BSPA_CUDA_DECODE_CLUSTER=0 (`clus0`: the same binary merging
# through global memory). e4m3 decode at 64-token pages, two rounds alternating; bf16 and
# 16-token pages one round; clus's checks, and gpu_check again with the cluster off.
set -uo pipefail
source bench/device_call.sh /tmp/res29a .device/s29
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $R/gpu.txt
for lib in base clus; do unpack_lib $lib; done
dec() {  # dec NAME KV PAGES TAG (NAME clus0: the clus library, cluster merge off)
  local lib=$1 env=()
  [ "$1" = clus0 ] && lib=clus env=(BSPA_CUDA_DECODE_CLUSTER=0)
  t "decode $1 $2 p$3 $4"
  env "${env[@]}" LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 $B/bench/bench_decode --quick --pages $3 --kv $2 \
    --json $R/decode_$1_$2_p$3_$4.json --commit $1 > $R/decode_$1_$2_p$3_$4.log 2>&1; echo "rc=$?"
}
for round in 1 2; do for lib in base clus clus0; do dec $lib fp8 64 $round; done; done
for lib in base clus clus0; do dec $lib bf16 64 1; dec $lib fp8 16 1; dec $lib bf16 16 1; done
save
dcol() { grep -E "^[0-9]+x[0-9]+ " $1 | awk '{print $4}'; }
dnames() { grep -E "^[0-9]+x[0-9]+ " $1 | awk '{print $1, $2, $3}'; }
for set in "fp8 64 1" "fp8 64 2" "bf16 64 1" "fp8 16 1" "bf16 16 1"; do
  read kv pg r <<< "$set"
  echo "== decode ms, $kv p$pg round $r: base clus clus0"
  paste <(dnames $R/decode_base_${kv}_p${pg}_$r.log) <(dcol $R/decode_base_${kv}_p${pg}_$r.log) \
    <(dcol $R/decode_clus_${kv}_p${pg}_$r.log) <(dcol $R/decode_clus0_${kv}_p${pg}_$r.log)
done
checks clus
t "gpu_check, cluster merge off"
BSPA_CUDA_DECODE_CLUSTER=0 LD_LIBRARY_PATH=/tmp/libclus timeout 300 $B/bench/bench_gpu_check --quick > $R/check_clus0.log 2>&1
echo "gpu_check (cluster off) rc=$? $(tail -1 $R/check_clus0.log)"
save
t done
