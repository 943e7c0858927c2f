#!/usr/bin/env bash
# Session 26's call G (~4 min; carry [".device/s26"]): issue 25's other shapes against
# torch in the same run on main's build: bench_prefill --quick --no-sweep --shape S then
# compare_torch.py --shape S --cases "8k C=0,32k C=0" (cuDNN, flash; dense rows) for
# 16/16/64, 64/8/128 and 28/4/128.
set -uo pipefail
source bench/device_call.sh /tmp/res26g .device/s26
R=$DC_RESULTS B=$DC_BIN
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
unpack_lib main
for shape in 16/16/64 64/8/128 28/4/128; do
  tag=${shape//\//_}
  t "bench_prefill $shape"
  LD_LIBRARY_PATH=/tmp/libmain timeout 200 $B/bench/bench_prefill --quick --no-sweep --shape $shape --json $R/prefill_$tag.json --commit a583557 > $R/prefill_$tag.log 2>&1; echo "rc=$?"
  t "torch $shape"
  timeout 150 python3 bench/compare_torch.py --shape $shape --cases "8k C=0,32k C=0" --budget 100 --json $R/torch_$tag.json > $R/torch_$tag.log 2>&1; echo "rc=$?"
  save
done
for shape in 16/16/64 64/8/128 28/4/128; do
  tag=${shape//\//_}; echo "== $shape"
  grep -E "^(8k C=0|32k C=0) " $R/prefill_$tag.log
  python3 - "$R/torch_$tag.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["cases"]:
    cu, fl = c.get("sdpa_cudnn", {}), c.get("sdpa_flash", {})
    print(f'{c["name"]:10} cudnn {cu.get("useful_tflops", float("nan")):6.1f} TF/s  flash {fl.get("useful_tflops", float("nan")):6.1f} TF/s')
PY
done
t done
