// The decode kernel's split workspace (decode.hpp): how much it takes. When a split pays is
// plan_splits (kernels/decode_split_plan.hpp). Host arithmetic only.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/decode.hpp"
#include "kernels/cuda/launch_check.hpp"

namespace bspa::kernels::decode {
namespace {
// Units of the workspace are sized for this many rows (workspace_bytes).
constexpr int32_t kWorkspaceRows = 32;
}  // namespace

size_t counter_bytes(int64_t items) {
  return cuda::align_to_256(static_cast<size_t>(std::max<int64_t>(items, 0)) * sizeof(int32_t));
}

size_t workspace_bytes(int32_t head_dim, int32_t sms) {
  // Room for one unit per CTA slot of the GPU, at 32 rows a unit, twice over, and a counter
  // per unit (more than the items of any split launch).
  const int64_t units = 2 * int64_t{kMostCtasPerSm} * std::max(sms, 1);
  return counter_bytes(units) + static_cast<size_t>(units * unit_floats(kWorkspaceRows, head_dim)) * sizeof(float);
}

}  // namespace bspa::kernels::decode
