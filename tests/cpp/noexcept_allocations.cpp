// Calls the header says cannot fail must not allocate either: bspa_seq_destroy runs
// Pool::destroy_sequence, which is noexcept, so a std::bad_alloc inside it would call
// std::terminate with the pool's lock held. A sequence destroyed while batches still read
// its pages is retired into a list that batch creation reserves room in. This binary
// replaces the global operator new (for libbspa too) to count heap allocations inside the
// calls under test. Not part of the headers-only tests above: it links libbspa.
#include <bspa/bspa.h>
#include <criterion/criterion.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int> g_allocations{0};
}  // namespace

// Every form is replaced, all on malloc / free, so no allocation and free pair mixes this
// file's operators with the runtime's (AddressSanitizer checks that they match).
namespace {
void *counted(std::size_t n) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void *counted_aligned(std::size_t n, std::align_val_t a) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t align = static_cast<std::size_t>(a);
  return std::aligned_alloc(align, (n + align - 1) / align * align);
}
void *or_throw(void *p) {
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void *operator new(std::size_t n) { return or_throw(counted(n)); }
void *operator new[](std::size_t n) { return or_throw(counted(n)); }
void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return counted(n); }
void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return counted(n); }
void *operator new(std::size_t n, std::align_val_t a) { return or_throw(counted_aligned(n, a)); }
void *operator new[](std::size_t n, std::align_val_t a) { return or_throw(counted_aligned(n, a)); }
void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept { return counted_aligned(n, a); }
void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return counted_aligned(n, a);
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete(void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {
bspa_pool *small_pool() {
  bspa_pool_options o;
  cr_assert_eq(bspa_pool_options_init(&o), BSPA_OK);
  o.dtype = BSPA_DTYPE_F32;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 8;
  o.page_size = 16;
  o.num_pages = 64;
  bspa_pool *pool = nullptr;
  cr_assert_eq(bspa_pool_create(&pool, &o), BSPA_OK, "%s", bspa_last_error());
  return pool;
}
}  // namespace

// Several one-step batches, each over its own sequence, alive while the sequences are
// destroyed: every destroy retires its sequence without allocating.
Test(noexcept_allocations, seq_destroy_under_several_live_batches_allocates_nothing) {
  bspa_pool *pool = small_pool();
  constexpr int kSeqs = 6;
  bspa_seq *seqs[kSeqs];
  bspa_batch *batches[kSeqs];
  const int32_t tokens[4] = {1, 2, 3, 4};
  const int32_t q = 4;
  for (int i = 0; i < kSeqs; ++i) {
    cr_assert_eq(bspa_seq_create(&seqs[i], pool, nullptr), BSPA_OK);
    cr_assert_eq(bspa_seq_append(seqs[i], tokens, 4), BSPA_OK);
    cr_assert_eq(bspa_batch_create(&batches[i], pool, &seqs[i], &q, 1, nullptr), BSPA_OK, "%s", bspa_last_error());
  }
  for (int i = 0; i < kSeqs; ++i) {
    g_allocations = 0;
    g_counting = true;
    bspa_seq_destroy(seqs[i]);
    g_counting = false;
    cr_assert_eq(g_allocations.load(), 0, "bspa_seq_destroy of sequence %d (its batch alive) allocated %d times", i,
                 g_allocations.load());
  }
  for (bspa_batch *b : batches) bspa_batch_destroy(b);
  cr_assert_eq(bspa_pool_check(pool), BSPA_OK, "%s", bspa_last_error());
  bspa_pool_destroy(pool);
}
