// The bspa_layout handle: an immutable kernels::Layout (shared by prefill shims).
#pragma once

#include "kernels/layout.hpp"

struct bspa_layout {
  bspa::kernels::Layout layout;
};
