#!/usr/bin/env bash
# Session 26's call B (run twice: the first hint library faulted, see NOTES; ~3 min; carry [".device/s26"]): the decode grid's K/V copies marked
# L2 evict-first (hint) against main: bench_decode bf16 --pages 64 (its mixed rows), main /
# hint alternating, two rounds, plus main with BSPA_CUDA_OVERLAP=0 (the two grids serial);
# e4m3 and bf16 decode at pages 64 and 16 once each; hint's checks.
set -uo pipefail
source bench/device_call.sh /tmp/res26b .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main; unpack_lib hint
dec() {  # NAME TAG ARGS...: bench_decode with /tmp/libNAME into decode_TAG.{log,json}
  local name=$1 tag=$2; shift 2
  t "decode $tag"
  LD_LIBRARY_PATH=/tmp/lib$name timeout 150 $B/bench/bench_decode "$@" --json $R/decode_$tag.json --commit $name > $R/decode_$tag.log 2>&1
  echo "rc=$?"
}
for round in 1 2; do
  dec main main_r$round --pages 64 --kv bf16
  dec hint hint_r$round --pages 64 --kv bf16
done
BSPA_CUDA_OVERLAP=0 dec main main_serial --pages 64 --kv bf16
save
for lib in main hint; do for kv in fp8 bf16; do dec $lib ${lib}_$kv --pages 64,16 --kv $kv; done; done
save
checks hint
save
for f in $R/decode_main_r1 $R/decode_hint_r1 $R/decode_main_r2 $R/decode_hint_r2 $R/decode_main_serial; do
  echo "== $(basename $f)"; grep -A5 "CUDA pool" $f.log | head -5
done
for lib in main hint; do
  echo "== $lib e4m3 / bf16"
  paste <(sed -n 3,22p $R/decode_${lib}_fp8.log | awk '{print $1,$2,$3,$4}') <(sed -n 3,22p $R/decode_${lib}_bf16.log | awk '{print $4}') | awk '{printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
done
t done
