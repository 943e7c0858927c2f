#!/usr/bin/env bash
# Session 23's last call (~2 min; carry [".device/s23"]):
#   base  956f0d8 (.device/s23/base.so.3.xz)
#   gs    a5c5204 (.device/s23/gs.so.3.xz): the live work count (ce587e5) + group boxes spread
#   ee    main with CTAs of a fixed-shape prefill grid without a unit leaving before their
#         ring's set-up (.device/s23/ee.so.3.xz)
# Checks of ee: bench_gpu_check --quick, fp8 check, step check, the demo with --graphs,
# memcheck + racecheck. Timings: bench_step gs / ee, one run each; bench_prefill
# --quick base / ee at pool pages 16, one round (the first call's one round of base /
# live had single cases 3-7% apart either way).
# Prediction: the 32-layer graph step -1..-3 us a layer against gs (3528 us on this session's
# H100); every other row within spread; prefill base / ee within one round's spread (±4%).
set -uo pipefail
D=.device/s23; R=/tmp/rese; mkdir -p $R
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
for lib in base gs ee; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done
mkdir -p $D/bee/bench && cp $D/bin/bench/* $D/bee/bench/ && cp /tmp/libee/* $D/bee/
B=$D/bin
save() { tar czf $OUT/rese.tgz -C /tmp rese; }
export LD_LIBRARY_PATH=/tmp/libee
t "checks (ee)"
timeout 300 $B/bench/bench_gpu_check --quick > $R/check.log 2>&1; echo "gpu_check rc=$? $(tail -1 $R/check.log)"; grep FAIL $R/check.log | head -8
timeout 60 $B/bench/bench_fp8_check > $R/fp8check.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check.log)"
timeout 90 $B/bench/bench_step --check > $R/step_check.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check.log)"
timeout 60 $B/bspa-demo --graphs > $R/demo_graphs.log 2>&1; echo "demo --graphs rc=$?"; grep -iE "^graphs|^result" $R/demo_graphs.log | head -2
unset LD_LIBRARY_PATH
OUT=$R/san timeout 200 bash scripts/gpu_sanitize.sh $D/bee memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=" $R/sanitize.txt | head -4
save
for round in 1; do for lib in gs ee; do
  t "bench_step $lib $round"; LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 $B/bench/bench_step --reps 200 --json $R/step_${lib}_$round.json --commit $lib > $R/step_${lib}_$round.log 2>&1; echo "rc=$?"
done; done
save
for ps in 16; do
  t "prefill pool p$ps"; OUT=$R TAG=pool_p$ps ROUNDS=1 BENCH_ARGS="--quick --page-size $ps" CHECK=none bash bench/ab_libs.sh $B /tmp/libbase /tmp/libee > /dev/null
done
save
t done
echo "== bench_step"; for f in $R/step_*_?.log; do echo "-- $f"; grep -E "one 32k prefill\)  |decode rows\)  |eager: plan|graph: plan" $f; done
