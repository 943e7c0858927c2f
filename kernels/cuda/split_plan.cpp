// The sm90a kernel's split of the last round (prefill_sm90.hpp): how much workspace it
// takes and when it pays. Host arithmetic only.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm90.hpp"

namespace bspa::kernels::sm90 {
namespace {
constexpr int kMaxWays = 4;
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
  // Time of the tail in item-rounds: ceil(tail * ways / sms) rounds of 1/ways of an item.
  int best = 1;
  double best_time = 1.0;
  for (int ways = 2; ways <= kMaxWays; ++ways) {
    const int64_t units = tail * ways;
    if (units > capacity_units || units > 2 * static_cast<int64_t>(sms)) break;
    const double time = static_cast<double>((units + sms - 1) / sms) / ways;
    if (time < best_time) best = ways, best_time = time;
  }
  if (best == 1) return none;
  SplitPlan plan;
  plan.ways = best;
  plan.first = static_cast<int32_t>(items - tail);
  plan.tail = static_cast<int32_t>(tail);
  return plan;
}

}  // namespace bspa::kernels::sm90
