# Helpers for a session's device-call scripts (bench/results/sessionN/call_*.sh), which run on
# the lent GPU machine in the repository root over carried, git-ignored library folders.
# Sourced, never run:
#   source bench/device_call.sh RESULTS LIBS
# RESULTS: the folder under /tmp the call writes (it comes back as $OUT/<its name>.tgz);
# LIBS: the carried folder that holds NAME.so.3.xz (libbspa.so.3 of one build, xz'd), bin/
# (bench programs and bspa-demo of the same ABI) and sys/ (shared libraries the device image
# lacks: libgomp, libxxhash, libsimdjson). Gives:
#   t MSG               prints MSG after the seconds since the call began
#   unpack_lib NAME     LIBS/NAME.so.3.xz and LIBS/sys/* into /tmp/libNAME
#   checks NAME         with /tmp/libNAME: bench_gpu_check --quick, the fp8 check, the step
#                       check, the demo with --graphs, then memcheck + racecheck
#                       (scripts/gpu_sanitize.sh); logs RESULTS/*_NAME.*, a line each
#   save                RESULTS into $OUT/<its name>.tgz (call it after each phase, so a
#                       call cut off at its time limit still returns what it finished)
#   decode_case LIB CASE KV TAG
#                       with /tmp/libLIB: bench_decode --quick --pages 64 --kv KV of one case
#                       (one of its own, or SEQSxCTX added by --case); log RESULTS/f_LIB_CASE_KV_TAG.log,
#                       prints "CASE KV TAG LIB: dense MS; sparse MS;"
#   issue_figures LIB COMMIT PAGES
#                       with /tmp/libLIB: issue 19's host rows (bench_step) and bench_decode bf16
#                       and e4m3 at PAGES (e.g. 64,16; JSON tagged COMMIT), then prints the
#                       launch rows, each case's e4m3 / bf16 and the mixed rows
#   mixed_ab ROUNDS LIB...
#                       bench_decode's two mixed steps (bf16, 64-token pages) with each
#                       /tmp/libLIB in turn, ROUNDS rounds alternating; logs RESULTS/ab_LIB_R.log,
#                       their rows in RESULTS/ab_table.txt
DC_RESULTS=$1
DC_LIBS=$2
DC_BIN=$DC_LIBS/bin
DC_START=$(date +%s)
mkdir -p "$DC_RESULTS"

t() { echo "[$(($(date +%s) - DC_START)) s] $*"; }

unpack_lib() {
  mkdir -p "/tmp/lib$1"
  cp "$DC_LIBS"/sys/* "/tmp/lib$1/"
  xz -dc "$DC_LIBS/$1.so.3.xz" > "/tmp/lib$1/libbspa.so.3"
}

checks() {
  local name=$1 r=$DC_RESULTS bundle=$DC_LIBS/bundle_$1
  t "checks ($name)"
  (
    export LD_LIBRARY_PATH=/tmp/lib$name
    timeout 300 "$DC_BIN"/bench/bench_gpu_check --quick > "$r/check_$name.log" 2>&1
    echo "gpu_check rc=$? $(tail -1 "$r/check_$name.log")"
    grep FAIL "$r/check_$name.log" | head -8
    timeout 60 "$DC_BIN"/bench/bench_fp8_check > "$r/fp8check_$name.log" 2>&1
    echo "fp8 check rc=$? $(tail -1 "$r/fp8check_$name.log")"
    timeout 90 "$DC_BIN"/bench/bench_step --check > "$r/step_check_$name.log" 2>&1
    echo "step --check rc=$? $(tail -1 "$r/step_check_$name.log")"
    timeout 60 "$DC_BIN"/bspa-demo --graphs > "$r/demo_graphs_$name.log" 2>&1
    echo "demo --graphs rc=$?"
    grep -iE "^graphs|^result" "$r/demo_graphs_$name.log" | head -2
  )
  # gpu_sanitize.sh takes a build folder: the programs beside the library.
  mkdir -p "$bundle/bench" && cp "$DC_BIN"/bench/* "$bundle/bench/" && cp "/tmp/lib$name"/* "$bundle/"
  OUT=$r/san_$name timeout 200 bash scripts/gpu_sanitize.sh "$bundle" memcheck racecheck > "$r/sanitize_$name.txt" 2>&1
  echo "sanitize rc=$?"
  grep -E " rc=" "$r/sanitize_$name.txt" | head -4
}

save() { tar czf "$OUT/$(basename "$DC_RESULTS").tgz" -C "$(dirname "$DC_RESULTS")" "$(basename "$DC_RESULTS")"; }

decode_case() {
  local lib=$1 c=$2 kv=$3 tag=$4 extra=() log=$DC_RESULTS/f_$1_$2_$3_$4.log
  case " 64x8191 8x131071 256x2047 1x32767 128x4095 8x8191 1x8191 " in
    *" $c "*) ;;
    *) extra=(--case "$c") ;;
  esac
  LD_LIBRARY_PATH=/tmp/lib$lib timeout 60 "$DC_BIN"/bench/bench_decode --quick --pages 64 --kv "$kv" "${extra[@]}" \
    --only "$c" > "$log" 2>&1
  echo "$c $kv $tag $lib: $(grep -E "^$c " "$log" | awk '{printf "%s %s; ", $3, $4}')"
}

issue_figures() {
  local lib=$1 commit=$2 pages=$3 r=$DC_RESULTS
  t "bench_step ($lib)"
  LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 "$DC_BIN"/bench/bench_step --reps 200 --json "$r/step.json" \
    --commit "$commit" > "$r/step.log" 2>&1
  echo "rc=$?"
  save
  for kv in bf16 fp8; do
    t "decode $kv ($lib)"
    LD_LIBRARY_PATH=/tmp/lib$lib timeout 150 "$DC_BIN"/bench/bench_decode --pages "$pages" --kv $kv \
      --json "$r/decode_$kv.json" --commit "$commit" > "$r/decode_$kv.log" 2>&1
    echo "rc=$?"
  done
  save
  grep -E "^floor: (empty kernel launch|sm90a prefill's shape after 2.5 ms of GPU)|one 32k prefill\)  |decode rows\)  |batch_plan \(reusable|kv_write \(reusable\)|allocations|eager: plan|graph: plan" "$r/step.log"
  paste <(awk '{print $1,$2,$3,$4}' "$r/decode_fp8.log") <(awk '{print $4}' "$r/decode_bf16.log") |
    awk '$4+0>0 && $5+0>0 {printf "%s %s %s %s %s %.3f\n",$1,$2,$3,$4,$5,$4/$5}'
  grep -A5 "mixed step" "$r/decode_bf16.log" | head -12
}

mixed_ab() {
  local rounds=$1 r lib
  shift
  for r in $(seq "$rounds"); do
    for lib in "$@"; do
      LD_LIBRARY_PATH=/tmp/lib$lib timeout 90 "$DC_BIN"/bench/bench_decode --pages 64 --kv bf16 \
        --only chunk2048+63dec,8x512+120dec > "$DC_RESULTS/ab_${lib}_$r.log" 2>&1
      echo "r$r $lib:"
      grep -E "^(chunk2048|8x512)" "$DC_RESULTS/ab_${lib}_$r.log"
    done
    save
  done | tee "$DC_RESULTS/ab_table.txt"
}
