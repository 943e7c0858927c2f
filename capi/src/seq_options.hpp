// bspa_seq_options unpacked: what a sequence's (or an export's) block keys are made from.
// One reading of the struct for bspa_seq_create and bspa_kv_export_create, so the two
// check it alike.
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

// NULL options: no salt and no extra key. Throws Error(Version) for an uninitialised or
// newer struct, Error(InvalidArgument) for a NULL salt of non-zero length.
inline SeqKeyOptions seq_key_options(const bspa_seq_options *options) {
  SeqKeyOptions k;
  if (!options) return k;
  check_options_version(options->version, BSPA_SEQ_OPTIONS_VERSION, "options", "bspa_seq_options_init");
  check(options->salt != nullptr || options->salt_len == 0, Errc::InvalidArgument,
        "options->salt is NULL but options->salt_len = ", options->salt_len);
  k.salt = options->salt;
  k.salt_len = options->salt_len;
  k.extra_key = options->extra_key;
  return k;
}

}  // namespace bspa::capi
