#!/usr/bin/env bash
# Session 24's call A (~8 min; carry [".device/s24"]; an H200 asked for, whatever card comes).
# Libraries (git-ignored, bench/results/session24/README.md says how to rebuild them) and the
# programs of 4234f24 (bin/, bench_step with its new split bucket):
#   main  4234f24 (kernels of cc7bf00, session 23's last code)
#   ee    main + the early exit (wip/s24-ee, 33d9071 = session 23's aa9ea8a): CTAs of a
#         fixed-shape prefill grid without a unit leave before their ring's set-up
# Checks of ee (bench/device_call.sh's `checks`) and main's step check (its new bucket: a
# padded work list the sm90a walk splits, live items inside the split). Timings: bench_step
# main / ee alternating, two rounds (issue 19's launch rows; the 32-layer decode step eager
# and as a graph); bench_decode e4m3 and bf16 (pages 64, 16) on main, one round each
# (issue 20's ratios, issue 19's mixed rows).
# Prediction: ee's graph step -1..-3 us a layer against main (3528 us on session 23's
# H100), every other row within spread.
set -uo pipefail
source bench/device_call.sh /tmp/res24a .device/s24
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main; unpack_lib ee
# Most wanted first (a call cut short by the device time left keeps what it saved).
LD_LIBRARY_PATH=/tmp/libmain timeout 120 $B/bench/bench_step --check > $R/step_check_main.log 2>&1
echo "step --check (main) rc=$? $(tail -1 $R/step_check_main.log)"; grep -E "^--|FAIL" $R/step_check_main.log | head -8
step() { t "bench_step $1 $2"; LD_LIBRARY_PATH=/tmp/lib$1 timeout 150 $B/bench/bench_step --reps 200 --json $R/step_$1_$2.json --commit $1 > $R/step_$1_$2.log 2>&1; echo "rc=$?"; }
step main 1
save
for kv in fp8 bf16; do
  t "decode $kv (main)"; LD_LIBRARY_PATH=/tmp/libmain timeout 150 $B/bench/bench_decode --pages 64,16 --kv $kv --json $R/decode_$kv.json --commit 4234f24 > $R/decode_$kv.log 2>&1; echo "rc=$?"
done
save
step ee 1
save
checks ee
save
step main 2; step ee 2
save
t done
echo "== bench_step"; for f in $R/step_*_?.log; do echo "-- $f"; grep -E "sm90a prefill's shape after 2.5 ms of GPU|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable\)  |allocations|eager: plan|graph: plan" $f; done
echo "== decode e4m3 / bf16 (ms)"; paste <(sed -n 3,22p $R/decode_fp8.log | awk '{print $1,$2,$3,$4}') <(sed -n 3,22p $R/decode_bf16.log | awk '{print $4}') | awk '{printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
grep -A5 "CUDA pool" $R/decode_bf16.log | tail -4
