#!/usr/bin/env bash
# Session 21's call E (issue 20, ~3 min): where batch-1 e4m3 decode's time goes. ncu on the
# landed library (final.so.3.xz): one decode_kernel launch each of 1 x 32767 e4m3 and bf16
# (16 splits of two quads, one CTA an SM) and of 64 x 8191 e4m3 dense (3 one-quad CTAs an
# SM), sections: speed of light, occupancy, scheduler and warp-state statistics, memory
# workload, instruction statistics, source counters (stall reasons). No timing.
set -uo pipefail
D=.device/s21; R=/tmp/rese; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
mkdir -p /tmp/libfinal; cp $D/sys/* /tmp/libfinal/; xz -dc $D/final.so.3.xz > /tmp/libfinal/libbspa.so.3
export LD_LIBRARY_PATH=/tmp/libfinal
B=$D/bin
save() { tar czf $OUT/rese.tgz -C /tmp rese; }
prof() { # tag bench args...
  local tag=$1; shift
  t "ncu $tag"
  timeout 150 ncu --target-processes all -k regex:decode_kernel --launch-skip 30 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats \
    $B/bench/bench_decode --quick "$@" > $R/ncu_$tag.txt 2>&1
  echo "$tag rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Stall|Block Limit|Registers Per" $R/ncu_$tag.txt | head -24
  save
}
prof e4m3_b1 --kv fp8 --pages 64 --only 1x32767
prof bf16_b1 --pages 64 --only 1x32767
prof e4m3_64x8k --kv fp8 --pages 64 --only 64x8191
t done
