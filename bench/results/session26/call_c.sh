#!/usr/bin/env bash
# Session 26's call C (~5 min; carry [".device/s26"]): issue 25's state on main's build
# (a583557's kernels): bench_prefill --quick --no-sweep at pages 64, 32 and 16, head_dim 64
# (16/16/64) at pages 64 and 16, then torch (cuDNN SDPA, FlexAttention) --quick in the same
# run.
set -uo pipefail
source bench/device_call.sh /tmp/res26c .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
pf() {  # TAG ARGS...
  local tag=$1; shift
  t "prefill $tag"
  LD_LIBRARY_PATH=/tmp/libmain timeout 200 $B/bench/bench_prefill --quick --no-sweep "$@" --json $R/prefill_$tag.json --commit a583557 > $R/prefill_$tag.log 2>&1
  echo "rc=$?"
}
pf p64 --page-size 64
pf p32 --page-size 32
pf p16 --page-size 16
save
pf d64_p64 --shape 16/16/64 --page-size 64
pf d64_p16 --shape 16/16/64 --page-size 16
save
t "torch"; timeout 200 python3 bench/compare_torch.py --quick --budget 150 --json $R/torch.json > $R/torch.log 2>&1; echo "rc=$?"
save
for f in p64 p32 p16 d64_p64 d64_p16; do echo "== $f"; grep -vE "^\s*$" $R/prefill_$f.log | tail -16; done
tail -14 $R/torch.log
t done
