#!/usr/bin/env bash
# Session 21's call F (~1 min): call E's three launches again, the warp stall reasons only
# (ncu's smsp__average_warps_issue_stalled_*_per_issue_active ratios: cycles a warp waits
# on each reason per instruction issued).
set -uo pipefail
D=.device/s21; R=/tmp/resf; mkdir -p $R
mkdir -p /tmp/libfinal; cp $D/sys/* /tmp/libfinal/; xz -dc $D/final.so.3.xz > /tmp/libfinal/libbspa.so.3
export LD_LIBRARY_PATH=/tmp/libfinal
B=$D/bin
for args in "e4m3_b1 --kv fp8 --only 1x32767" "bf16_b1 --only 1x32767" "e4m3_64x8k --kv fp8 --only 64x8191"; do
  set -- $args; tag=$1; shift
  timeout 120 ncu --target-processes all -k regex:decode_kernel --launch-skip 30 --launch-count 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    $B/bench/bench_decode --quick --pages 64 "$@" > $R/stall_$tag.txt 2>&1
  echo "== $tag rc=$?"
  grep -E "stalled" $R/stall_$tag.txt | awk '{v=$NF; gsub(",","",v); if (v+0 >= 0.05) print $1, v}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | sort -k2 -n -r | head -12 | tr '\n' ';'; echo
done
tar czf $OUT/resf.tgz -C /tmp resf
