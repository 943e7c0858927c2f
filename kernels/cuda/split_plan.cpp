// The sm90a kernel's walk of a launch (prefill_sm90.hpp): how much workspace the split of
// its last round takes (when it pays: plan_split, in the header, which the kernel also
// runs), and whether the kernel may list its own items (ItemListing).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/launch_check.hpp"
#include "kernels/cuda/prefill_sm90.hpp"

namespace bspa::kernels::sm90 {
size_t split_counter_bytes(int sms) { return cuda::align_to_256(sizeof(int32_t) * 2 * static_cast<size_t>(sms)); }

size_t split_workspace_bytes(int head_dim, int sms) {
  return split_counter_bytes(sms) + split_unit_bytes(head_dim) * 2 * static_cast<size_t>(sms);
}

bool item_listing_allowed() {
  static const bool allowed = [] {  // read once per process
    const char *e = std::getenv("BSPA_CUDA_LIST_TILES");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return allowed;
}

}  // namespace bspa::kernels::sm90
