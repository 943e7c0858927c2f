#!/usr/bin/env bash
# Session 17's prepared call (run by a later session with a device; ~6 min):
#  1. the FP8 accumulation probe (issue 20: does an fp8 instruction keep fp32 or ~14 bits?);
#  2. checks of main's library (commit.txt): gpu_check, step --check, fp8 check, memcheck +
#     racecheck on --tiny (main's commits since c91e4ed have not run on a GPU);
#  3. the host profile of bspa_prefill (issue 19: is the 32k launch's time bspa's or the
#     driver's?) with the diagnostic library diag.so.3.xz (BSPA_HOST_PROFILE=1);
#  4. clock64 phase traces of one launch each of 256 x 512, 64 x 1024, 8k and 32k sparse
#     (issue 25: where a short item's time goes), read by bench/trace_phases.py 16.
# d/build holds main's build of commit.txt (1d07e43 as of session 18; rebuild it from main if main moved on: libbspa.so.3,
# bench/{bench_gpu_check,bench_step,bench_fp8_check,bench_prefill,bench_decode}, probe_fp8_mma, bspa-demo).
# The diagnostic library is main plus bench/results/session17/diag_trace_host_profile.diff.
set -uo pipefail
D=.device/s17; B=$D/d/build; R=/tmp/res; mkdir -p $R /tmp/libdiag
start=$(date +%s); t() { echo "[$(( $(date +%s) - start )) s] $*"; }
C=$(cat $D/commit.txt)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
t probe; timeout 30 $B/probe_fp8_mma > $R/probe_fp8_mma.txt 2>&1; echo "probe rc=$?"; cat $R/probe_fp8_mma.txt
tar czf $OUT/res.tgz -C /tmp res
export LD_LIBRARY_PATH=$PWD/$B
t check; timeout 200 $B/bench/bench_gpu_check > $R/check.log 2>&1; echo "check rc=$? $(tail -1 $R/check.log)"; grep -E "FAIL" $R/check.log | head -8
t step-check; timeout 60 $B/bench/bench_step --check > $R/step_check.log 2>&1; echo "step --check rc=$? $(tail -1 $R/step_check.log)"
t fp8check; timeout 60 $B/bench/bench_fp8_check > $R/fp8check.log 2>&1; echo "fp8 check rc=$? $(tail -1 $R/fp8check.log)"
t sanitize; OUT=$R/san timeout 150 bash scripts/gpu_sanitize.sh $B memcheck racecheck > $R/sanitize.txt 2>&1; echo "sanitize rc=$?"; grep -E " rc=|ERROR SUMMARY" $R/sanitize.txt | head
t "demo graphs"; timeout 100 $B/bspa-demo --launch fixed --graphs > $R/demo_graphs.log 2>&1; echo "demo rc=$?"; grep -E "verified|host time" $R/demo_graphs.log | head -3
tar czf $OUT/res.tgz -C /tmp res
xz -dc $D/diag.so.3.xz > /tmp/libdiag/libbspa.so.3; for l in libgomp.so.1 libxxhash.so.0 libsimdjson.so.14; do cp $B/$l /tmp/libdiag/; done
for r in 1 2; do t "host profile $r"; BSPA_HOST_PROFILE=1 LD_LIBRARY_PATH=/tmp/libdiag timeout 100 $B/bench/bench_step --reps 200 > $R/step_prof_$r.log 2> $R/step_prof_$r.err; echo "rc=$?"; grep -E "floor|32k|decode rows" $R/step_prof_$r.log; cat $R/step_prof_$r.err; done
t "step, main's library"; timeout 100 $B/bench/bench_step --reps 200 --json $R/bench_step.json --commit $C > $R/bench_step.log 2>&1; echo "rc=$?"; grep -E "floor|32k|decode rows" $R/bench_step.log
tar czf $OUT/res.tgz -C /tmp res
for c in "256 x 512" "64 x 1024" "8k C=0" "32k C=0"; do
  f=$R/trace_$(echo "$c" | tr -c 'a-zA-Z0-9\n' '_').bin
  t "trace $c"; BSPA_SM90_TRACE_FILE=$f LD_LIBRARY_PATH=/tmp/libdiag timeout 100 $B/bench/bench_prefill --quick --only "$c" > $f.log 2>&1; echo "rc=$?"; tail -2 $f.log
  python3 bench/trace_phases.py $f 16 > $f.txt 2>&1; cat $f.txt; xz -f $f
done
t done
tar czf $OUT/res.tgz -C /tmp res
