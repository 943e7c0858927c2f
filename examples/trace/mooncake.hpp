// Reader of Mooncake-format serving traces (kvcache-ai/Mooncake, FAST'25): one JSON object
// per line, {"timestamp": ms, "input_length": tokens, "output_length": tokens,
// "hash_ids": [...]}, where hash_ids name the prompt's 512-token blocks (equal ids, equal
// content) and the last block is partial when input_length is not a multiple of 512.
// Header-only C++17 over simdjson (Debian libsimdjson-dev: link simdjson::simdjson); used
// by bench/ and the demo.
//
// Token ids are derived, since the trace has none: token i of block h is
// block_token(h, i), a fixed pseudo-random function over a 100,352-entry vocabulary
// (Phi-3-small's). tests/c/test_trace_replay.c computes the same function in C.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace bspa::trace {

constexpr int64_t kBlockTokens = 512;
constexpr int32_t kVocabulary = 100352;

struct Request {
  int64_t timestamp_ms = 0;
  int64_t input_length = 0;
  int64_t output_length = 0;
  std::vector<int64_t> hash_ids;
};

// splitmix64 of (h, i): different (h, i) give unrelated ids.
inline int32_t block_token(int64_t h, int64_t i) {
  uint64_t z = static_cast<uint64_t>(h) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i) + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int32_t>(z % static_cast<uint64_t>(kVocabulary));
}

// The prompt's input_length tokens, into out (resized; its capacity is reused).
inline void request_tokens(const Request &r, std::vector<int32_t> &out) {
  out.resize(static_cast<size_t>(r.input_length));
  for (int64_t t = 0; t < r.input_length; ++t) {
    out[static_cast<size_t>(t)] = block_token(r.hash_ids[static_cast<size_t>(t / kBlockTokens)], t % kBlockTokens);
  }
}

namespace detail {

inline std::runtime_error bad(const std::string &where, const std::string &what) {
  return std::runtime_error(where + what);
}

// A number field (integers or floats: timestamps may be written as floats), or throws.
template <class Object>
int64_t number_field(Object &object, const char *key, const std::string &where) {
  auto field = object.find_field_unordered(key);
  if (field.error() == simdjson::NO_SUCH_FIELD) throw bad(where, std::string("no \"") + key + "\"");
  double v = 0;
  if (field.get_double().get(v)) throw bad(where, std::string("\"") + key + "\" is not a number");
  return static_cast<int64_t>(v);
}

}  // namespace detail

// Every request of a JSONL file, in file order (blank lines skipped). Parsed by simdjson's
// On-Demand API over the whole file (Debian libsimdjson-dev): about 4x faster than the
// hand-written reader it replaced, which a DOM parser (nlohmann-json) would be 2.5x slower
// than. Throws std::runtime_error naming the line on malformed input.
inline std::vector<Request> read_mooncake(const std::string &path) {
  simdjson::padded_string text;
  if (simdjson::padded_string::load(path).get(text)) throw std::runtime_error("cannot open trace " + path);
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document_stream docs;
  if (auto e = parser.iterate_many(text).get(docs))
    throw std::runtime_error("trace " + path + ": " + simdjson::error_message(e));
  std::vector<Request> requests;
  size_t line_no = 1, counted = 0;  // newlines before byte `counted`
  for (auto it = docs.begin(); it != docs.end(); ++it) {
    const size_t at = it.current_index();
    for (; counted < at && counted < text.size(); ++counted) line_no += text.data()[counted] == '\n';
    const std::string where = "line " + std::to_string(line_no) + ": ";
    simdjson::ondemand::object object;
    auto doc = *it;
    if (auto e = doc.get_object().get(object)) throw detail::bad(where, simdjson::error_message(e));
    Request r;
    r.timestamp_ms = detail::number_field(object, "timestamp", where);
    r.input_length = detail::number_field(object, "input_length", where);
    r.output_length = detail::number_field(object, "output_length", where);
    auto ids = object.find_field_unordered("hash_ids");
    if (ids.error() == simdjson::NO_SUCH_FIELD) throw detail::bad(where, "no \"hash_ids\"");
    simdjson::ondemand::array array;
    if (ids.get_array().get(array)) throw detail::bad(where, "\"hash_ids\" is not an array");
    for (auto id : array) {
      int64_t v = 0;
      if (id.get_int64().get(v)) throw detail::bad(where, "bad entry in \"hash_ids\"");
      r.hash_ids.push_back(v);
    }
    if (r.input_length < 0 || r.input_length > static_cast<int64_t>(r.hash_ids.size()) * kBlockTokens) {
      throw detail::bad(where, "input_length = " + std::to_string(r.input_length) + " does not fit " +
                                   std::to_string(r.hash_ids.size()) + " blocks of 512 tokens");
    }
    requests.push_back(std::move(r));
  }
  if (docs.truncated_bytes() > 0)
    throw std::runtime_error("trace " + path + ": the last " + std::to_string(docs.truncated_bytes()) +
                             " bytes are not a complete JSON object");
  return requests;
}

}  // namespace bspa::trace
