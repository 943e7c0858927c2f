#!/usr/bin/env bash
# Session 21's call I (~1 min): ncu's per-instruction stall samples (source page, SASS) of one
# batch-1 e4m3 decode launch (1 x 32767, 64-token pages, dense) on the final library: which
# code the instruction-fetch and wait stalls sit in (the tile loop or the once-run code).
set -uo pipefail
D=.device/s21; R=/tmp/resi; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt
mkdir -p /tmp/libmends; cp $D/sys/* /tmp/libmends/; xz -dc $D/mends.so.3.xz > /tmp/libmends/libbspa.so.3
export LD_LIBRARY_PATH=/tmp/libmends
timeout 200 ncu --target-processes all -k regex:decode_kernel --launch-skip 30 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o $R/b1 \
  $D/bin/bench/bench_decode --quick --pages 64 --kv fp8 --only 1x32767 > $R/ncu_run.txt 2>&1
echo "ncu rc=$?"
timeout 100 ncu -i $R/b1.ncu-rep --page source --csv --print-source sass > $R/b1_source.csv 2>$R/src_err.txt
echo "source rc=$? $(wc -l < $R/b1_source.csv) lines"; head -2 $R/b1_source.csv | cut -c1-400
xz -T4 $R/b1_source.csv; rm -f $R/b1.ncu-rep
tar czf $OUT/resi.tgz -C /tmp resi
