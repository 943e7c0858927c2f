// The opaque C handles are the C++ objects themselves: struct bspa_pool is a
// bspa::cache::Pool and struct bspa_seq a bspa::cache::Sequence (both never defined as
// C types; these casts are the only place the two names meet).
#pragma once

#include <bspa/bspa.h>

#include "cache/pool.hpp"
#include "cache/sequence.hpp"

namespace bspa::capi {

inline cache::Pool *pool_of(bspa_pool *p) { return reinterpret_cast<cache::Pool *>(p); }
inline const cache::Pool *pool_of(const bspa_pool *p) { return reinterpret_cast<const cache::Pool *>(p); }
inline bspa_pool *handle_of(cache::Pool *p) { return reinterpret_cast<bspa_pool *>(p); }

inline cache::Sequence *seq_of(bspa_seq *s) { return reinterpret_cast<cache::Sequence *>(s); }
inline const cache::Sequence *seq_of(const bspa_seq *s) { return reinterpret_cast<const cache::Sequence *>(s); }
inline bspa_seq *handle_of(cache::Sequence *s) { return reinterpret_cast<bspa_seq *>(s); }

}  // namespace bspa::capi
