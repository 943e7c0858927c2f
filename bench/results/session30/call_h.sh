#!/usr/bin/env bash
# Session 30's call H, prepared, not run (no device time left; ~2 min; carry
# [".device/s30"], rebuilt by build_libs.sh with bench_decode's --in-order-pages): why the
# chunk 2048 over a 30000-token prefix runs 1.68 ms through bspa_prefill_paged and 1.43
# through a pool batch on the H200 (NOTES, "Session 30", item 6), and whether the paged
# mixed step's whole/parts (1.013-1.025) follows it. The chunk + 63 mixed rows, bf16,
# 64-token pages, two rounds of four forms: as now (random block tables, the device's tile
# listing), block tables in page order, the listing off (BSPA_CUDA_LIST_TILES=0), both.
# The bench's pool rows now write every cached context's K/V (f52d5f3: they read unwritten
# pages before), so the pool rows here are the first honest ones; then every mixed row
# once more (bench_decode --pages 64, bf16, all cases); then bench_step, whose 32-layer
# decode step now reads written contexts too.
set -uo pipefail
source bench/device_call.sh /tmp/res30h .device/s30
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
for r in 1 2; do
  for form in random in-order random-nolist in-order-nolist; do
    flags=() envs=()
    case $form in in-order*) flags=(--in-order-pages) ;; esac
    case $form in *nolist) envs=(BSPA_CUDA_LIST_TILES=0) ;; esac
    env "${envs[@]}" LD_LIBRARY_PATH=/tmp/libmain timeout 90 $B/bench/bench_decode --pages 64 --kv bf16 \
      --only chunk2048+63dec "${flags[@]}" > $R/h_${form}_$r.log 2>&1
    echo "r$r $form:"; grep -E "^chunk2048" $R/h_${form}_$r.log
  done
done | tee $R/table.txt
save
t "all bf16 cases and both mixed steps"
LD_LIBRARY_PATH=/tmp/libmain timeout 120 $B/bench/bench_decode --pages 64 --kv bf16 --json $R/decode_bf16.json \
  > $R/decode_bf16.log 2>&1
grep -A5 "mixed step" $R/decode_bf16.log
save
t "bench_step (its 32-layer step's contexts now written, as the pool rows')"
LD_LIBRARY_PATH=/tmp/libmain timeout 120 $B/bench/bench_step --reps 200 --json $R/step.json > $R/step.log 2>&1
echo "rc=$?"; grep -A9 "32-layer" $R/step.log
save
t done
