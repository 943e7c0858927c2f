// C shims of sequences: options, create, match, append, commit, pages, info, destroy.
#include <bspa/bspa.h>

#include "capi/src/guard.hpp"
#include "capi/src/seq_options.hpp"
#include "capi/src/handles.hpp"

namespace {
using bspa::Errc;
using bspa::capi::require;
using bspa::capi::seq_of;
}  // namespace

extern "C" {

BSPA_API bspa_status bspa_seq_options_init(bspa_seq_options *options) {
  return bspa::capi::guarded(__func__, [&] {
    require(options, "options");
    *options = bspa_seq_options{};
    options->version = BSPA_SEQ_OPTIONS_VERSION;
  });
}

BSPA_API bspa_status bspa_seq_create(bspa_seq **seq, bspa_pool *pool, const bspa_seq_options *options) {
  return bspa::capi::guarded(__func__, [&] {
    require(seq, "seq");
    *seq = nullptr;
    bspa::cache::Pool &p = *bspa::capi::pool_of(require(pool, "pool"));
    const bspa::capi::SeqKeyOptions k = bspa::capi::seq_key_options(options);
    *seq = bspa::capi::handle_of(p.create_sequence(k.salt, k.salt_len, k.extra_key));
  });
}

BSPA_API bspa_status bspa_seq_match(bspa_seq *seq, const int32_t *tokens, int64_t n, int64_t *cached) {
  return bspa::capi::guarded(__func__, [&] {
    bspa::cache::Sequence &s = *seq_of(require(seq, "seq"));
    require(cached, "cached");
    *cached = s.match(tokens, n);
  });
}

BSPA_API bspa_status bspa_seq_append(bspa_seq *seq, const int32_t *tokens, int64_t n) {
  return bspa::capi::guarded(__func__, [&] { seq_of(require(seq, "seq"))->append(tokens, n); });
}

BSPA_API bspa_status bspa_seq_commit(bspa_seq *seq, int64_t computed) {
  return bspa::capi::guarded(__func__, [&] { seq_of(require(seq, "seq"))->commit(computed); });
}

BSPA_API bspa_status bspa_seq_pages(const bspa_seq *seq, int32_t *pages, int64_t capacity, int64_t *num_pages) {
  return bspa::capi::guarded(__func__, [&] {
    const bspa::cache::Sequence &s = *seq_of(require(seq, "seq"));
    require(num_pages, "num_pages");
    bspa::check(capacity >= 0, Errc::InvalidArgument, "capacity = ", capacity, " is negative");
    bspa::check(pages != nullptr || capacity == 0, Errc::NullPointer, "pages is NULL but capacity = ", capacity);
    const int64_t count = s.copy_pages(pages, capacity);
    *num_pages = count;
    // pages NULL with capacity 0 is the size query of two-call sizing, not an error.
    bspa::check(pages == nullptr || capacity >= count, Errc::BufferTooSmall, "capacity = ", capacity,
                " is below the sequence's ", count, " pages (*num_pages holds the count needed)");
  });
}

BSPA_API bspa_status bspa_seq_info(const bspa_seq *seq, struct bspa_seq_info *info) {
  return bspa::capi::guarded(__func__, [&] {
    const bspa::cache::Sequence &s = *seq_of(require(seq, "seq"));
    require(info, "info");
    const bspa::cache::SequenceInfo i = s.info();
    info->num_tokens = i.num_tokens;
    info->num_computed = i.num_computed;
    info->num_cached = i.num_cached;
    info->num_pages = i.num_pages;
  });
}

BSPA_API void bspa_seq_destroy(bspa_seq *seq) {
  if (!seq) return;
  bspa::cache::Sequence *s = seq_of(seq);
  s->pool().destroy_sequence(s);
}

}  // extern "C"
