// Deliberate faults (--inject-fault), so a user can watch the demo's checks catch a
// broken cache instead of taking "verified" on trust.
#pragma once

#include <bspa/bspa.h>

#include "tensor.hpp"

namespace demo {

// Swaps the K rows of the first two tokens of kv head 0 in the sequence's first page
// (layer 0): the page now holds wrong keys for its positions, as a cache bug would.
void corrupt_first_page(bspa_pool *pool, const bspa_seq *seq, Device device, int32_t head_dim, bspa_dtype dtype);

}  // namespace demo
