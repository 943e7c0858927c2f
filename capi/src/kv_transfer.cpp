// C shims of KV transfer between pools: memory description, export, two-phase import
// (cache/kv_transfer.hpp holds the logic).
#include <bspa/bspa.h>

#include "cache/kv_transfer.hpp"
#include "capi/src/guard.hpp"
#include "capi/src/seq_options.hpp"
#include "capi/src/handles.hpp"

namespace {

using bspa::Errc;
using bspa::capi::pool_of;
using bspa::capi::require;
using bspa::cache::KvExport;
using bspa::cache::KvImport;

// struct bspa_kv_export is a KvExport and struct bspa_kv_import a KvImport (never defined as C types).
KvExport *export_of(bspa_kv_export *e) { return reinterpret_cast<KvExport *>(e); }
const KvExport *export_of(const bspa_kv_export *e) { return reinterpret_cast<const KvExport *>(e); }
KvImport *import_of(bspa_kv_import *i) { return reinterpret_cast<KvImport *>(i); }
const KvImport *import_of(const bspa_kv_import *i) { return reinterpret_cast<const KvImport *>(i); }

// The two-call sizing contract of the page lists: arrays NULL with capacity 0 asks for the count.
void check_list(int64_t capacity, int64_t *count) {
  require(count, "num_pages");
  bspa::check(capacity >= 0, Errc::InvalidArgument, "capacity = ", capacity, " is negative");
}

static_assert(BSPA_KV_IMPORT_RESERVED == static_cast<int>(bspa::cache::ImportState::Reserved) &&
                  BSPA_KV_IMPORT_COMMITTED == static_cast<int>(bspa::cache::ImportState::Committed) &&
                  BSPA_KV_IMPORT_ABORTED == static_cast<int>(bspa::cache::ImportState::Aborted),
              "the header's import states mirror cache::ImportState");

void check_fits(const void *a, const void *b, int64_t capacity, int64_t count) {
  bspa::check((a == nullptr && b == nullptr) || capacity >= count, Errc::BufferTooSmall, "capacity = ", capacity,
              " is below the ", count, " pages (*num_pages holds the count needed)");
}

}  // namespace

extern "C" {

BSPA_API bspa_status bspa_pool_memory(const bspa_pool *pool, struct bspa_pool_memory *memory) {
  return bspa::capi::guarded(__func__, [&] {
    const bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    require(memory, "memory");
    bspa::check(memory->version != 0 && memory->version <= BSPA_POOL_MEMORY_VERSION, Errc::Version,
                "memory->version = ", memory->version, " but this library fills versions 1 to ",
                BSPA_POOL_MEMORY_VERSION, " (set it to BSPA_POOL_MEMORY_VERSION)");
    static_assert(BSPA_KV_LAYOUT_VERSION == bspa::cache::kKvLayoutVersion, "the header's layout version");
    const bool cuda = p.device() == bspa::cache::DeviceKind::Cuda;
    memory->device_type = cuda ? kDLCUDA : kDLCPU;
    memory->device_id = p.device_id();
    memory->num_regions = 2 * p.num_layers();
    memory->base = reinterpret_cast<uintptr_t>(p.storage_data());
    memory->bytes = p.storage_bytes();
    memory->region_bytes = p.layer_bytes();
    memory->page_bytes = p.num_pages() > 0 ? p.layer_bytes() / static_cast<size_t>(p.num_pages()) : 0;
    memory->num_pages = p.num_pages();
    memory->fingerprint = p.fingerprint();
    memory->layout_version = BSPA_KV_LAYOUT_VERSION;
  });
}

BSPA_API bspa_status bspa_pool_page_address(const bspa_pool *pool, int32_t layer, int32_t kv, int64_t page,
                                            uint64_t *address) {
  return bspa::capi::guarded(__func__, [&] {
    const bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    require(address, "address");
    bspa::check(kv == BSPA_KV_K || kv == BSPA_KV_V, Errc::InvalidArgument, "kv = ", kv,
                " is neither BSPA_KV_K (0) nor BSPA_KV_V (1)");
    const char *region = static_cast<const char *>(kv == BSPA_KV_K ? p.k_data(layer) : p.v_data(layer));
    bspa::check(page >= 0 && page < p.num_pages(), Errc::OutOfRange, "page = ", page, " is not in [0, ", p.num_pages(),
                ")");
    const size_t page_bytes = p.layer_bytes() / static_cast<size_t>(p.num_pages());
    *address = reinterpret_cast<uintptr_t>(region + static_cast<size_t>(page) * page_bytes);
  });
}

BSPA_API bspa_status bspa_kv_export_create(bspa_kv_export **exp, bspa_pool *pool, const bspa_seq_options *options,
                                           const int32_t *tokens, int64_t n) {
  return bspa::capi::guarded(__func__, [&] {
    require(exp, "exp");
    *exp = nullptr;
    bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    const bspa::capi::SeqKeyOptions k = bspa::capi::seq_key_options(options);
    *exp = reinterpret_cast<bspa_kv_export *>(KvExport::create(p, k.salt, k.salt_len, k.extra_key, tokens, n));
  });
}

BSPA_API bspa_status bspa_kv_export_pages(const bspa_kv_export *exp, int32_t *pages, uint64_t *keys, int64_t capacity,
                                          int64_t *num_pages) {
  return bspa::capi::guarded(__func__, [&] {
    const KvExport &e = *export_of(require(exp, "exp"));
    check_list(capacity, num_pages);
    const int64_t count = static_cast<int64_t>(e.pages().size());
    *num_pages = count;
    check_fits(pages, keys, capacity, count);
    for (int64_t i = 0; i < count && (pages || keys); ++i) {
      if (pages) pages[i] = e.pages()[static_cast<size_t>(i)];
      if (keys) {
        keys[2 * i] = e.keys()[static_cast<size_t>(i)].lo;
        keys[2 * i + 1] = e.keys()[static_cast<size_t>(i)].hi;
      }
    }
  });
}

BSPA_API void bspa_kv_export_destroy(bspa_kv_export *exp) { delete export_of(exp); }

BSPA_API bspa_status bspa_kv_import_options_init(bspa_kv_import_options *options) {
  return bspa::capi::guarded(__func__, [&] {
    require(options, "options");
    *options = bspa_kv_import_options{};
    options->version = BSPA_KV_IMPORT_OPTIONS_VERSION;
  });
}

BSPA_API bspa_status bspa_kv_import_create(bspa_kv_import **imp, bspa_pool *pool, const int32_t *tokens, int64_t n,
                                           const bspa_kv_import_options *options) {
  return bspa::capi::guarded(__func__, [&] {
    require(imp, "imp");
    *imp = nullptr;
    bspa::cache::Pool &p = *pool_of(require(pool, "pool"));
    require(options, "options");
    bspa::capi::check_options_version(options->version, BSPA_KV_IMPORT_OPTIONS_VERSION, "options",
                                      "bspa_kv_import_options_init");
    bspa::capi::check_salt(options->salt, options->salt_len);
    bspa::check(options->num_peer_keys >= 0, Errc::InvalidArgument, "options->num_peer_keys = ", options->num_peer_keys,
                " is negative");
    bspa::check(options->peer_keys != nullptr || options->num_peer_keys == 0, Errc::NullPointer,
                "options->peer_keys is NULL but options->num_peer_keys = ", options->num_peer_keys);
    // {lo, hi} pairs have the layout of cache::Key (two uint64 in that order).
    static_assert(sizeof(bspa::cache::Key) == 16, "Key is two uint64");
    const auto *peer_keys = reinterpret_cast<const bspa::cache::Key *>(options->peer_keys);
    *imp = reinterpret_cast<bspa_kv_import *>(KvImport::create(p, options->salt, options->salt_len, options->extra_key,
                                                               tokens, n, options->peer_fingerprint, peer_keys,
                                                               options->num_peer_keys));
  });
}

BSPA_API bspa_status bspa_kv_import_pages(const bspa_kv_import *imp, int32_t *pages, int64_t *blocks, int64_t capacity,
                                          int64_t *num_pages) {
  return bspa::capi::guarded(__func__, [&] {
    const KvImport &i = *import_of(require(imp, "imp"));
    check_list(capacity, num_pages);
    const bool wanted = pages || blocks;
    const int64_t count = i.copy_reserved(wanted ? pages : nullptr, wanted ? blocks : nullptr, capacity);
    *num_pages = count;
    check_fits(pages, blocks, capacity, count);
  });
}

BSPA_API bspa_status bspa_kv_import_info(const bspa_kv_import *imp, struct bspa_kv_import_info *info) {
  return bspa::capi::guarded(__func__, [&] {
    const KvImport &i = *import_of(require(imp, "imp"));
    require(info, "info");
    bspa::check(info->version != 0 && info->version <= BSPA_KV_IMPORT_INFO_VERSION, Errc::Version,
                "info->version = ", info->version, " but this library fills versions 1 to ",
                BSPA_KV_IMPORT_INFO_VERSION, " (set it to BSPA_KV_IMPORT_INFO_VERSION)");
    const bspa::cache::ImportInfo s = i.info();
    info->state = static_cast<int32_t>(s.state);
    info->num_blocks = s.blocks;
    info->num_cached = s.cached;
    info->num_reserved = s.reserved;
    info->num_published = s.published;
  });
}

BSPA_API bspa_status bspa_kv_import_commit(bspa_kv_import *imp, int64_t *published) {
  return bspa::capi::guarded(__func__, [&] {
    const int64_t n = import_of(require(imp, "imp"))->commit();
    if (published) *published = n;
  });
}

BSPA_API bspa_status bspa_kv_import_abort(bspa_kv_import *imp) {
  return bspa::capi::guarded(__func__, [&] { import_of(require(imp, "imp"))->abort(); });
}

BSPA_API void bspa_kv_import_destroy(bspa_kv_import *imp) { delete import_of(imp); }

}  // extern "C"
