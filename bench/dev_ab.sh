# Ad-hoc device iteration: correctness of the sm90 path, then sm90 vs sm80 timings in one call.
set -u
B=${B:-build-gpu}
export LD_LIBRARY_PATH=$PWD/$B
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
BSPA_CUDA_PATH=sm90 timeout 30 $B/bench/bench_gpu_check --tiny > $OUT/tiny_sm90.log 2>&1; rc=$?
echo "tiny sm90 rc=$rc $(tail -1 $OUT/tiny_sm90.log)"; grep FAIL $OUT/tiny_sm90.log | head
[ $rc = 0 ] || exit 1
BSPA_CUDA_PATH=sm90 timeout 200 $B/bench/bench_gpu_check > $OUT/check_sm90.log 2>&1; echo "check sm90 rc=$? $(tail -1 $OUT/check_sm90.log)"
grep FAIL $OUT/check_sm90.log | head
for path in ${PATHS:-sm90 sm80}; do
  BSPA_CUDA_PATH=$path timeout 120 $B/bench/bench_prefill --no-sweep ${ONLY:+--only "$ONLY"} --json $OUT/b_$path.json > $OUT/b_$path.log 2>&1
  echo "== $path rc=$?"; grep -E "C=|mixed" $OUT/b_$path.log | head -20
done
