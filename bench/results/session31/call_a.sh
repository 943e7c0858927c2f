#!/usr/bin/env bash
# Session 31's call A (carry [".device/s30"], rebuilt by ../session30/build_libs.sh with
# bench_decode's --only list; ~3 min). Issue 19's mixed rows over written contexts, and
# whether capping the mixed step's prefill grid (BSPA_CUDA_MIXED_PREFILL_CTAS; session 23's
# item 6 swept it over pool rows that read unwritten contexts) gains on honest data:
# 1. both mixed steps, paged and pool rows, at caps none (0), 124, 116, 108, 100, 92;
# 2. session 30's call H questions, one round: the paged chunk + 63 with block tables in
#    page order, with the tile listing off (BSPA_CUDA_LIST_TILES=0), both;
# 3. bench_step (its 32-layer step's contexts now written).
set -uo pipefail
source bench/device_call.sh /tmp/res31a .device/s30
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
mixed=chunk2048+63dec,8x512+120dec
t "the cap sweep"
for cap in 0 124 116 108 100 92; do
  BSPA_CUDA_MIXED_PREFILL_CTAS=$cap LD_LIBRARY_PATH=/tmp/libmain timeout 90 $B/bench/bench_decode --quick --pages 64 \
    --kv bf16 --only $mixed > $R/cap_$cap.log 2>&1
  echo "cap $cap:"; grep -E "^(chunk2048|8x512)" $R/cap_$cap.log
done | tee $R/cap_table.txt
save
t "the paged chunk + 63, three forms"
for form in in-order nolist in-order-nolist; do
  flags=() envs=()
  case $form in in-order*) flags=(--in-order-pages) ;; esac
  case $form in *nolist) envs=(BSPA_CUDA_LIST_TILES=0) ;; esac
  env "${envs[@]}" LD_LIBRARY_PATH=/tmp/libmain timeout 90 $B/bench/bench_decode --quick --pages 64 --kv bf16 \
    --only chunk2048+63dec "${flags[@]}" > $R/h_$form.log 2>&1
  echo "$form:"; grep -E "^chunk2048" $R/h_$form.log | head -2
done | tee $R/forms.txt
save
t "bench_step"
LD_LIBRARY_PATH=/tmp/libmain timeout 120 $B/bench/bench_step --reps 200 --json $R/step.json > $R/step.log 2>&1
echo "rc=$?"; grep -A9 "32-layer" $R/step.log
save
t done
