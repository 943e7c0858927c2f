#!/usr/bin/env bash
# Session 26's call I (~4 min; carry [".device/s26"]): the consumers' ping-pong at head dim
# 128 too (library pp128: kPingPong for every head dim) against main (a583557's library,
# whose head-dim-128 kernels are 28fe9ae's): bench_prefill --quick --no-sweep (Phi-3-small,
# bf16 pages) alternating, two rounds, and e4m3 pages once each; pp128's checks and
# compute-sanitizer memcheck, racecheck, synccheck.
set -uo pipefail
source bench/device_call.sh /tmp/res26j .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main; unpack_lib pp128
pf() {  # LIB TAG ARGS...
  local lib=$1 tag=$2; shift 2
  t "prefill $tag"
  LD_LIBRARY_PATH=/tmp/lib$lib timeout 120 $B/bench/bench_prefill --quick --no-sweep "$@" --json $R/$tag.json --commit $lib > $R/$tag.log 2>&1; echo "rc=$?"
}
for round in 1 2; do pf main main_$round; pf pp128 pp128_$round; done
pf main main_fp8 --kv fp8; pf pp128 pp128_fp8 --kv fp8
save
checks pp128
OUT=$R/san_pp128_sync timeout 120 bash scripts/gpu_sanitize.sh "$DC_LIBS/bundle_pp128" synccheck > $R/sanitize_sync_pp128.txt 2>&1; echo "synccheck rc=$?"; grep -E " rc=" $R/sanitize_sync_pp128.txt | head -2
save
cols() { sed -n '/^case/,$p' $1 | tail -n +2 | awk '{print $(NF-2), $NF}'; }
echo "case | main r1 | pp128 r1 | main r2 | pp128 r2 | main e4m3 | pp128 e4m3 (sparse / dense TFLOP/s)"
paste <(sed -n '/^case/,$p' $R/main_1.log | tail -n +2 | cut -c1-28) <(cols $R/main_1.log) <(cols $R/pp128_1.log) <(cols $R/main_2.log) <(cols $R/pp128_2.log) <(cols $R/main_fp8.log) <(cols $R/pp128_fp8.log)
t done
