// The CUDA backend's environment switches (BSPA_CUDA_*; bspa.h lists them), parsed one way
// by every reader. Each reader keeps its own answer in a static, read once per process (a
// getenv per launch is host time a launch should not spend).
#pragma once

namespace bspa::kernels::cuda {

// `name` unset or empty: `unset`; "0": false; anything else: true.
bool env_flag(const char *name, bool unset);

// `name` as a decimal integer in [lo, hi]; `otherwise` when unset, not a whole decimal
// number, or out of range.
int env_int(const char *name, int lo, int hi, int otherwise);

}  // namespace bspa::kernels::cuda
