#include "fault.hpp"

#include <cstring>
#include <vector>

#include "status.hpp"

namespace demo {

void corrupt_first_page(bspa_pool *pool, const bspa_seq *seq, Device device, int32_t head_dim, bspa_dtype dtype) {
  int64_t count = 0;
  const bspa_status s = bspa_seq_pages(seq, nullptr, 0, &count);  // learns the count
  if (s != BSPA_ERR_BUFFER_TOO_SMALL) DEMO_OK(s);
  if (count == 0) return;
  std::vector<int32_t> pages(static_cast<size_t>(count));
  DEMO_OK(bspa_seq_pages(seq, pages.data(), count, &count));
  DLTensor k;
  DEMO_OK(bspa_pool_kv(pool, 0, &k, nullptr));
  // [num_pages, Hkv, page_size, D]: token 0 and token 1 of head 0 are adjacent rows.
  const size_t row = static_cast<size_t>(head_dim) * static_cast<size_t>(dtype_bytes(dtype));
  const size_t page_bytes = static_cast<size_t>(k.shape[1] * k.shape[2]) * row;
  char *page = static_cast<char *>(k.data) + k.byte_offset + static_cast<size_t>(pages[0]) * page_bytes;
  Buffer tmp(device, row);
  copy_on_device(device, tmp.data(), page, row);
  copy_on_device(device, page, page + row, row);
  copy_on_device(device, page + row, tmp.data(), row);
}

}  // namespace demo
