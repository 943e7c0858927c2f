// The sm90a kernel's walk of a launch (prefill_sm90.hpp): how much workspace the split of
// its last round takes (when it pays: plan_split, in the header, which the kernel also
// runs), and whether the kernel may list its own items (TileListing).
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/env_switch.hpp"
#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm90.hpp"

namespace bspa::kernels::sm90 {
size_t split_counter_bytes(int sms) { return cuda::align_to_256(sizeof(int32_t) * 2 * static_cast<size_t>(sms)); }

size_t split_workspace_bytes(int head_dim, int sms) {
  return split_counter_bytes(sms) + split_unit_bytes(head_dim) * 2 * static_cast<size_t>(sms);
}

bool tile_listing_allowed() {
  static const bool allowed = cuda::env_flag("BSPA_CUDA_LIST_TILES", true);  // read once per process
  return allowed;
}

}  // namespace bspa::kernels::sm90
