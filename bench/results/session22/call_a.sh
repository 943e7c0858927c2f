#!/usr/bin/env bash
# Session 22's call A (~3 min, issue 19): where an idle-GPU launch's extra time comes from.
# bench_step with the new rows (the empty kernel of the sm90a prefill's shape after 2.5 ms of
# GPU work waited for / host sleep / host spin; decode rows after GPU work; the 32k prefill
# with the host spinning first), main's library (298a271's code), the runtime's wait mode
# (auto) twice, then spin, blocking and yield.
set -uo pipefail
D=.device/s22; R=/tmp/resa; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
nproc | tee -a $R/gpu.txt; (cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo "no governor") | tee -a $R/gpu.txt
lscpu | grep -E "Model name|MHz" | tee -a $R/gpu.txt
mkdir -p /tmp/libmain; cp $D/sys/* /tmp/libmain/; xz -dc $D/main.so.3.xz > /tmp/libmain/libbspa.so.3
export LD_LIBRARY_PATH=/tmp/libmain
B=$D/bin/bench
save() { tar czf $OUT/resa.tgz -C /tmp resa; }
t "step check"; timeout 120 $B/bench_step --check > $R/step_check.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check.log)"
for run in auto1 auto2 spin blocking yield; do
  sched=${run%[0-9]}
  t "bench_step $run"; timeout 150 $B/bench_step --schedule $sched --reps 200 --json $R/step_$run.json --commit 298a271-bench > $R/step_$run.log 2>&1; echo "rc=$?"
  save
done
t done
for run in auto1 auto2 spin blocking yield; do echo "== $run"; grep -E "sm90a prefill's shape|one 32k prefill|decode rows|kv_write \(reusable\)" $R/step_$run.log; done
