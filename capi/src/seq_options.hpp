// bspa_seq_options unpacked: what a sequence's (or an export's) block keys are made from.
// One reading of the struct for bspa_seq_create and bspa_kv_export_create, so the two
// check it alike; its salt check serves bspa_kv_import_options too.
#pragma once

#include <bspa/bspa.h>

#include <cstddef>
#include <cstdint>

#include "capi/src/guard.hpp"
#include "common/error.hpp"

namespace bspa::capi {

struct SeqKeyOptions {
  const void *salt = nullptr;
  size_t salt_len = 0;
  uint64_t extra_key = 0;
};

// A salt given as (pointer, length) in an options struct: NULL only with length 0.
inline void check_salt(const void *salt, size_t salt_len) {
  check(salt != nullptr || salt_len == 0, Errc::InvalidArgument,
        "options->salt is NULL but options->salt_len = ", salt_len);
}

// NULL options: no salt and no extra key. Throws Error(Version) for an uninitialised or
// newer struct, Error(InvalidArgument) for a NULL salt of non-zero length.
inline SeqKeyOptions seq_key_options(const bspa_seq_options *options) {
  SeqKeyOptions k;
  if (!options) return k;
  check_options_version(options->version, BSPA_SEQ_OPTIONS_VERSION, "options", "bspa_seq_options_init");
  check_salt(options->salt, options->salt_len);
  k.salt = options->salt;
  k.salt_len = options->salt_len;
  k.extra_key = options->extra_key;
  return k;
}

}  // namespace bspa::capi
