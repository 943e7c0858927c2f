#!/usr/bin/env bash
# Session 26's call G2 (~1 min; carry [".device/s26"]; the same H100 lease as call G): the
# 28/4/128 half of call G again after compare_torch.py's fp32 reference took heads in
# chunks of up to 8 (28 query heads had overrun its last chunk: an index assert in torch).
set -uo pipefail
source bench/device_call.sh /tmp/res26h .device/s26
R=$DC_RESULTS B=$DC_BIN
unpack_lib main
nvidia-smi --query-gpu=name --format=csv,noheader
LD_LIBRARY_PATH=/tmp/libmain timeout 100 $B/bench/bench_prefill --quick --no-sweep --shape 28/4/128 --json $R/prefill_28_4_128.json --commit a583557 > $R/prefill_28_4_128.log 2>&1
grep -E "^(8k C=0|32k C=0) " $R/prefill_28_4_128.log | tail -2
timeout 150 python3 bench/compare_torch.py --shape 28/4/128 --cases "8k C=0,32k C=0" --budget 100 --json $R/torch_28_4_128.json > $R/torch_28_4_128.log 2>&1
echo rc=$?
tail -4 $R/torch_28_4_128.log
save
