// Where a sequence's query tiles start: shifted back so that every tile after the first
// starts on a multiple of `align` (a layout block, or the smallest one), unless that takes
// a tile more. A tile that starts on a block boundary touches fewer query blocks (two
// 64-token blocks for 128 rows instead of three), so it lists and masks fewer key tiles
// (bench/NOTES.md, sm90a log, "aligned tiles"). Shared by the batch planner (host) and the CUDA
// kernels, which place the tiles of a launch without a work list themselves.
#pragma once

#include <cstdint>

#include "kernels/host_device.hpp"

namespace bspa::kernels {

// The layout block size the batch planner aligns to: the smallest one the CUDA kernels
// take (and the one they treat a dense layout as).
constexpr int32_t kAlignRows = 64;

// How many rows the tiles of `len` new tokens, the first at absolute position `start`,
// are shifted back by (0 <= shift < align), so
// tile k covers rows [k * tile_rows - shift, (k + 1) * tile_rows - shift) clipped to
// [0, len). The tile count ceil(len / tile_rows) never grows with the shift, and only the
// smallest aligned shift can keep it, so that one is tried alone.
BSPA_HOST_DEVICE inline int32_t aligned_tile_shift(int32_t start, int32_t len, int32_t tile_rows, int32_t align) {
  const int32_t shift = start % align;
  return (len + shift + tile_rows - 1) / tile_rows == (len + tile_rows - 1) / tile_rows ? shift : 0;
}

}  // namespace bspa::kernels
