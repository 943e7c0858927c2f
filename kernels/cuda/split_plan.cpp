// The sm90a kernel's split of the last round (prefill_sm90.hpp): how much workspace it
// takes and when it pays. Host arithmetic only.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm90.hpp"

namespace bspa::kernels::sm90 {
namespace {
// At most five fragments per item: spans <= 4 * tail.
constexpr int kMaxSpansPerItem = 4;
// A fragment's fixed cost in items (two to three key steps of a 40-step sparse item;
// bench/NOTES.md, sixth session): a split must save more than this.
constexpr double kFragmentCost = 0.05;
}  // namespace

size_t split_counter_bytes(int sms) { return cuda::align_to_256(sizeof(int32_t) * 2 * static_cast<size_t>(sms)); }

size_t split_workspace_bytes(int head_dim, int sms) {
  return split_counter_bytes(sms) + split_unit_bytes(head_dim) * 2 * static_cast<size_t>(sms);
}

SplitPlan plan_split(int64_t items, int sms, int64_t capacity_units) {
  const SplitPlan none;
  if (sms <= 0 || items <= 0 || items >= kSplitMaxRounds * sms) return none;
  const int64_t tail = items % sms;
  if (tail == 0) return none;
  const int64_t spans = std::min<int64_t>({sms, kMaxSpansPerItem * tail, capacity_units / 2});
  if (spans <= tail) return none;
  if (static_cast<double>(tail) / static_cast<double>(spans) + kFragmentCost >= 1.0) return none;
  SplitPlan plan;
  plan.first = static_cast<int32_t>(items - tail);
  plan.tail = static_cast<int32_t>(tail);
  plan.spans = static_cast<int32_t>(spans);
  return plan;
}

}  // namespace bspa::kernels::sm90
