#include "capi/src/kv_event_msgpack.hpp"

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace bspa::capi {

namespace {

using cache::EventRecord;
using cache::EventType;

constexpr char kHexPrefix[] = "bspa-hex:";
constexpr size_t kHexPrefixLen = sizeof(kHexPrefix) - 1;

// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), the
// check a Rust String decoder applies: a salt it rejected would drop the whole batch.
bool valid_utf8(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

// Token ids of 256 or more (nearly all of them for vocabularies of 32k-256k ids) take
// msgpack's uint16 (0xcd, 2 bytes big-endian) or uint32 (0xce, 4 bytes) form. With SSSE3,
// four at a time: one byte shuffle per group picks each id's big-endian bytes into place
// and leaves room for the tags, chosen by which of the four need 4 bytes (16 patterns,
// tabled once). Returns how many tokens it wrote (a group with a smaller or negative id
// stops it: the caller writes that one the general way); writes up to 32 bytes past the
// end of what it encodes.
#if defined(__x86_64__) && defined(__GNUC__)
struct ShuffleTable {
  alignas(16) unsigned char shuffle[16][32];
  alignas(16) unsigned char tags[16][32];
  unsigned char length[16];
  ShuffleTable() {
    for (int m = 0; m < 16; ++m) {
      for (int i = 0; i < 32; ++i) shuffle[m][i] = 0x80, tags[m][i] = 0;  // 0x80: a zero byte
      int pos = 0;
      for (int k = 0; k < 4; ++k) {
        const bool wide = (m >> k) & 1;
        tags[m][pos] = wide ? 0xce : 0xcd;
        const int bytes = wide ? 4 : 2;
        for (int b = 0; b < bytes; ++b) shuffle[m][pos + 1 + b] = static_cast<unsigned char>(4 * k + bytes - 1 - b);
        pos += 1 + bytes;
      }
      length[m] = static_cast<unsigned char>(pos);
      // The second 16 output bytes are shuffled from the same 16 source bytes.
    }
  }
};

__attribute__((target("ssse3"))) size_t tokens_ssse3(unsigned char *&p, const int32_t *t, size_t n) {
  static const ShuffleTable table;
  const __m128i floor = _mm_set1_epi32(0x100), narrow_max = _mm_set1_epi32(0xffff);
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(t + j));
    if (_mm_movemask_epi8(_mm_cmplt_epi32(v, floor))) break;  // an id below 256, or negative
    const int m = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(v, narrow_max)));
    const __m128i lo =
        _mm_or_si128(_mm_shuffle_epi8(v, _mm_load_si128(reinterpret_cast<const __m128i *>(table.shuffle[m]))),
                     _mm_load_si128(reinterpret_cast<const __m128i *>(table.tags[m])));
    const __m128i hi =
        _mm_or_si128(_mm_shuffle_epi8(v, _mm_load_si128(reinterpret_cast<const __m128i *>(table.shuffle[m] + 16))),
                     _mm_load_si128(reinterpret_cast<const __m128i *>(table.tags[m] + 16)));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p + 16), hi);
    p += table.length[m];
  }
  return j;
}

bool have_ssse3() {
  static const bool yes = __builtin_cpu_supports("ssse3");
  return yes;
}
#endif

// Writes into [out, out + cap) while it fits and counts every byte regardless, so one
// pass both encodes and sizes.
class Writer {
 public:
  Writer(unsigned char *out, size_t cap) : out_(out), cap_(cap) {}
  size_t size() const { return pos_; }

  void bytes(const void *p, size_t n) {
    if (out_ && pos_ <= cap_ && n <= cap_ - pos_) std::memcpy(out_ + pos_, p, n);
    pos_ += n;
  }
  void byte(unsigned char b) { bytes(&b, 1); }
  void be(unsigned char tag, uint64_t v, int width) {
    unsigned char buf[9];
    buf[0] = tag;
    for (int k = 0; k < width; ++k) buf[1 + k] = static_cast<unsigned char>(v >> (8 * (width - 1 - k)));
    bytes(buf, static_cast<size_t>(1 + width));
  }
  void nil() { byte(0xc0); }
  void uint(uint64_t v) {
    if (v < 0x80) {
      byte(static_cast<unsigned char>(v));
    } else if (v <= 0xff) {
      be(0xcc, v, 1);
    } else if (v <= 0xffff) {
      be(0xcd, v, 2);
    } else if (v <= 0xffffffffu) {
      be(0xce, v, 4);
    } else {
      be(0xcf, v, 8);
    }
  }
  void sint(int64_t v) {
    if (v >= 0) return uint(static_cast<uint64_t>(v));
    const uint64_t u = static_cast<uint64_t>(v);
    if (v >= -32) {
      byte(static_cast<unsigned char>(v));
    } else if (v >= -128) {
      be(0xd0, u, 1);
    } else if (v >= -32768) {
      be(0xd1, u, 2);
    } else if (v >= INT32_MIN) {
      be(0xd2, u, 4);
    } else {
      be(0xd3, u, 8);
    }
  }
  void float64(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    be(0xcb, bits, 8);
  }
  void header(unsigned char fix, unsigned char b16, uint64_t n) {
    if (n < 16) {
      byte(static_cast<unsigned char>(fix | n));
    } else if (n <= 0xffff) {
      be(b16, n, 2);
    } else {
      be(static_cast<unsigned char>(b16 + 1), n, 4);
    }
  }
  void array(uint64_t n) { header(0x90, 0xdc, n); }
  void map(uint64_t n) { header(0x80, 0xde, n); }
  void str_header(uint64_t n) {
    if (n < 32) {
      byte(static_cast<unsigned char>(0xa0 | n));
    } else if (n <= 0xff) {
      be(0xd9, n, 1);
    } else if (n <= 0xffff) {
      be(0xda, n, 2);
    } else {
      be(0xdb, n, 4);
    }
  }
  void str(const char *s, size_t n) {
    str_header(n);
    bytes(s, n);
  }
  template <size_t N>
  void lit(const char (&s)[N]) {
    str(s, N - 1);
  }

  // A page's tokens, the hot loop of a batch. When the worst case fits (5 bytes a token,
  // plus 3 of slack for the 8-byte stores), each token of 256 or more, the common case
  // for vocabularies of 32k-256k ids, is one unaligned 8-byte store of its uint16 or
  // uint32 form, chosen without a branch (they are as unpredictable as the tokens).
  void tokens(const int32_t *t, int32_t n) {
    if (!out_ || pos_ > cap_ || cap_ - pos_ < 5 * static_cast<size_t>(n) + 3) {
      for (int32_t j = 0; j < n; ++j) sint(t[j]);
      return;
    }
    unsigned char *p = out_ + pos_;
    int32_t j = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    // 32 bytes of slack for the vector stores: the scalar path below when they do not fit.
    if (cap_ - pos_ >= 5 * static_cast<size_t>(n) + 32 && have_ssse3()) {
      while (j < n) {
        j += static_cast<int32_t>(tokens_ssse3(p, t + j, static_cast<size_t>(n - j)));
        if (n - j < 4) break;
        pos_ = static_cast<size_t>(p - out_);  // a group with a small id: that id the general way
        sint(t[j++]);
        p = out_ + pos_;
      }
    }
#endif
    for (; j < n; ++j) {
      const int32_t v = t[j];
      const uint32_t u = static_cast<uint32_t>(v);
      if (__builtin_expect(v < 0x100, 0)) {  // fixint, uint8 or negative: the general path
        pos_ = static_cast<size_t>(p - out_);
        sint(v);
        p = out_ + pos_;
        continue;
      }
      // No ternary (it compiled to a mispredicted branch): the uint16 form is the uint32
      // form's big-endian bytes shifted by 16, so one byte swap serves both.
      const uint32_t wide = u > 0xffff;
      const uint32_t be = __builtin_bswap32(u) >> ((wide ^ 1) * 16);
      const uint64_t w = (static_cast<uint64_t>(be) << 8) | (0xcd + wide);
      if constexpr (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__) {
        std::memcpy(p, &w, 8);
      } else {
        for (int k = 0; k < 8; ++k) p[k] = static_cast<unsigned char>(w >> (8 * k));
      }
      p += 3 + 2 * wide;
    }
    pos_ = static_cast<size_t>(p - out_);
  }

 private:
  unsigned char *out_;
  size_t cap_;
  size_t pos_ = 0;
};

// The "kv_cache_dtype" value of a pool's element type (kv_event_msgpack.hpp).
const char *kv_cache_dtype_name(cache::ElementType dtype) {
  switch (dtype) {
    case cache::ElementType::F32: return "float32";
    case cache::ElementType::F16: return "float16";
    case cache::ElementType::BF16: return "bfloat16";
    case cache::ElementType::FP8_E4M3: return "fp8_e4m3";
  }
  return "unknown";
}

// As router_salt, written without building the string.
void write_router_salt(Writer &w, const std::string &salt) {
  const auto *s = reinterpret_cast<const unsigned char *>(salt.data());
  if (valid_utf8(s, salt.size())) return w.str(salt.data(), salt.size());
  static const char hex[] = "0123456789abcdef";
  w.str_header(kHexPrefixLen + 2 * salt.size());
  w.bytes(kHexPrefix, kHexPrefixLen);
  for (unsigned char c : salt) {
    const char pair[2] = {hex[c >> 4], hex[c & 15]};
    w.bytes(pair, 2);
  }
}

// One past the last record of the wire event that starts at records[i].
size_t group_end(const std::vector<EventRecord> &r, size_t i) {
  size_t j = i + 1;
  if (r[i].type == EventType::Stored) {
    while (j < r.size() && r[j].type == EventType::Stored && r[j].parent_block_id == r[j - 1].block_id &&
           r[j].salt == r[i].salt && r[j].extra_key == r[i].extra_key)
      ++j;
  } else if (r[i].type == EventType::Removed) {
    while (j < r.size() && r[j].type == EventType::Removed) ++j;
  }
  return j;
}

}  // namespace

std::string router_salt(const std::string &salt) {
  if (valid_utf8(reinterpret_cast<const unsigned char *>(salt.data()), salt.size())) return salt;
  static const char hex[] = "0123456789abcdef";
  std::string out(kHexPrefix);
  for (unsigned char c : salt) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

size_t encode_kv_event_batch(const cache::EventQueue &queue, int32_t page_size, cache::ElementType dtype, double ts,
                             int32_t dp_rank, unsigned char *out, size_t capacity) {
  const char *dtype_name = kv_cache_dtype_name(dtype);
  const std::vector<EventRecord> &r = queue.records();
  const int32_t *tokens = queue.tokens();
  size_t groups = 0;
  for (size_t i = 0; i < r.size(); i = group_end(r, i)) ++groups;

  Writer w(out, capacity);
  w.array(3);
  w.float64(ts);
  w.array(groups);
  for (size_t i = 0, end; i < r.size(); i = end) {
    end = group_end(r, i);
    const EventRecord &first = r[i];
    if (first.type == EventType::AllCleared) {
      w.map(1);
      w.lit("type");
      w.lit("AllBlocksCleared");
      continue;
    }
    if (first.type == EventType::Removed) {
      w.map(3);
      w.lit("type");
      w.lit("BlockRemoved");
      w.lit("block_hashes");
      w.array(end - i);
      for (size_t k = i; k < end; ++k) w.uint(r[k].block_id);
      w.lit("medium");
      w.lit("GPU");
      continue;
    }
    const std::string &salt = queue.salt(first.salt);
    w.map(salt.empty() ? 9 : 10);
    w.lit("type");
    w.lit("BlockStored");
    w.lit("block_hashes");
    w.array(end - i);
    for (size_t k = i; k < end; ++k) w.uint(r[k].block_id);
    w.lit("parent_block_hash");
    if (first.parent_block_id == 0) {
      w.nil();
    } else {
      w.uint(first.parent_block_id);
    }
    w.lit("token_ids");
    w.array((end - i) * static_cast<uint64_t>(page_size));
    for (size_t k = i; k < end; ++k) w.tokens(tokens + r[k].token_offset, page_size);
    w.lit("block_size");
    w.uint(static_cast<uint64_t>(page_size));
    w.lit("lora_id");
    if (first.extra_key == 0) {
      w.nil();
    } else {
      w.uint(first.extra_key);
    }
    w.lit("medium");
    w.lit("GPU");
    w.lit("lora_name");
    w.nil();
    if (!salt.empty()) {
      w.lit("cache_salt");
      write_router_salt(w, salt);
    }
    w.lit("kv_cache_dtype");
    w.str(dtype_name, std::strlen(dtype_name));
  }
  if (dp_rank < 0) {
    w.nil();
  } else {
    w.uint(static_cast<uint64_t>(dp_rank));
  }
  return w.size();
}

}  // namespace bspa::capi
