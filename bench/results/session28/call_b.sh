#!/usr/bin/env bash
# Session 28's call B (~9 min; carry [".device/s28"]): the streaming ceiling of a batch-1
# decode grid (bench/probes/decode_stream_ceiling.cu), then four libraries: main; s28 (main +
# land_k counting by `fetched` + a 6-stage e4m3 ring for two-quad decode CTAs); pf (main +
# land_k + an L2 prefetch 4 tiles past the ring in two-quad e4m3 decode CTAs); all (the
# three). e4m3 decode alternating two rounds with bf16 main beside, all's checks, e4m3
# prefill main / s28 one round each.
set -uo pipefail
source bench/device_call.sh /tmp/res28b .device/s28
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $R/gpu.txt
t probe
timeout 200 .device/s28/probe_decode_stream_ceiling > $R/probe_stream.log 2>&1; echo "rc=$?"
save
unpack_lib main; unpack_lib s28; unpack_lib pf; unpack_lib all
dec() {  # dec LIB KV TAG
  t "decode $1 $2 $3"
  LD_LIBRARY_PATH=/tmp/lib$1 timeout 150 $B/bench/bench_decode --quick --pages 64 --kv $2 --json $R/decode_$1_$2_$3.json --commit $1 > $R/decode_$1_$2_$3.log 2>&1; echo "rc=$?"
}
for round in 1 2; do for lib in main s28 pf all; do dec $lib fp8 $round; done; done
dec main bf16 1
for sp in 8 24 32; do  # batch 1's split count (16 by plan_splits)
  t "decode all fp8 1x32767 splits $sp"
  BSPA_DECODE_SPLITS=$sp LD_LIBRARY_PATH=/tmp/liball timeout 60 $B/bench/bench_decode --quick --pages 64 --kv fp8 --only 1x32767 > $R/decode_all_fp8_splits$sp.log 2>&1; echo "rc=$?"
done
save
checks all
save
pre() {  # pre LIB TAG
  t "prefill fp8 $1 $2"
  LD_LIBRARY_PATH=/tmp/lib$1 timeout 100 $B/bench/bench_prefill --quick --no-sweep --kv fp8 --json $R/prefill_$1_fp8_$2.json --commit $1 > $R/prefill_$1_fp8_$2.log 2>&1; echo "rc=$?"
}
pre main 1; pre s28 1
save
cat $R/probe_stream.log
dcol() { grep -E "^[0-9]+x[0-9]+ " $1 | awk '{print $4}'; }
dnames() { grep -E "^[0-9]+x[0-9]+ " $1 | awk '{print $1, $3}'; }
echo "== decode p64 ms: e4m3 main s28 pf all (r1) | main s28 pf all (r2) | bf16 main"
paste <(dnames $R/decode_main_fp8_1.log) <(for r in 1 2; do for l in main s28 pf all; do dcol $R/decode_${l}_fp8_$r.log > $R/col_${l}_$r; done; done; paste $R/col_main_1 $R/col_s28_1 $R/col_pf_1 $R/col_all_1 $R/col_main_2 $R/col_s28_2 $R/col_pf_2 $R/col_all_2) <(dcol $R/decode_main_bf16_1.log)
cols() { sed -n '/^case/,$p' $1 | tail -n +2 | awk '{print $(NF-2), $NF}'; }
names() { sed -n '/^case/,$p' $1 | tail -n +2 | cut -c1-28; }
echo "== prefill e4m3 p64: main | s28 (sparse dense TFLOP/s)"
paste <(names $R/prefill_main_fp8_1.log) <(cols $R/prefill_main_fp8_1.log) <(cols $R/prefill_s28_fp8_1.log)
for sp in 8 24 32; do echo "splits $sp:"; grep -E "^1x32767 " $R/decode_all_fp8_splits$sp.log; done
t done
