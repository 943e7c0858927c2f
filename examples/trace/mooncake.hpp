// Reader of Mooncake-format serving traces (kvcache-ai/Mooncake, FAST'25): one JSON object
// per line, {"timestamp": ms, "input_length": tokens, "output_length": tokens,
// "hash_ids": [...]}, where hash_ids name the prompt's 512-token blocks (equal ids, equal
// content) and the last block is partial when input_length is not a multiple of 512.
// Header-only C++17, no dependencies; used by bench/ and the demo.
//
// Token ids are derived, since the trace has none: token i of block h is
// block_token(h, i), a fixed pseudo-random function over a 100,352-entry vocabulary
// (Phi-3-small's). tests/c/test_trace_replay.c computes the same function in C.
#pragma once

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

// The number after "key": in line, or throws.
inline int64_t number_field(const std::string &line, const char *key, size_t line_no) {
  const std::string k = std::string("\"") + key + "\"";
  size_t p = line.find(k);
  if (p == std::string::npos) throw std::runtime_error("line " + std::to_string(line_no) + ": no \"" + key + "\"");
  p = line.find(':', p + k.size());
  if (p == std::string::npos) throw std::runtime_error("line " + std::to_string(line_no) + ": bad \"" + key + "\"");
  const char *begin = line.c_str() + p + 1;
  char *end = nullptr;
  const double v = std::strtod(begin, &end);  // timestamps may be written as floats
  if (end == begin) throw std::runtime_error("line " + std::to_string(line_no) + ": \"" + key + "\" is not a number");
  return static_cast<int64_t>(v);
}

}  // namespace detail

// Parses one line; throws std::runtime_error naming the line on malformed input.
inline Request parse_request(const std::string &line, size_t line_no) {
  Request r;
  r.timestamp_ms = detail::number_field(line, "timestamp", line_no);
  r.input_length = detail::number_field(line, "input_length", line_no);
  r.output_length = detail::number_field(line, "output_length", line_no);
  const std::string where = "line " + std::to_string(line_no) + ": ";
  size_t p = line.find("\"hash_ids\"");
  if (p == std::string::npos) throw std::runtime_error(where + "no \"hash_ids\"");
  p = line.find('[', p);
  if (p == std::string::npos) throw std::runtime_error(where + "\"hash_ids\" is not an array");
  const char *s = line.c_str() + p + 1;
  while (true) {
    while (*s == ' ' || *s == ',' || *s == '\t') ++s;
    if (*s == ']') break;
    char *end = nullptr;
    const long long v = std::strtoll(s, &end, 10);
    if (end == s) throw std::runtime_error(where + "bad entry in \"hash_ids\"");
    r.hash_ids.push_back(v);
    s = end;
  }
  if (r.input_length < 0 || r.input_length > static_cast<int64_t>(r.hash_ids.size()) * kBlockTokens) {
    throw std::runtime_error(where + "input_length = " + std::to_string(r.input_length) + " does not fit " +
                             std::to_string(r.hash_ids.size()) + " blocks of 512 tokens");
  }
  return r;
}

// Every request of a JSONL file, in file order (blank lines skipped).
inline std::vector<Request> read_mooncake(const std::string &path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open trace " + path);
  std::vector<Request> requests;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    requests.push_back(parse_request(line, line_no));
  }
  return requests;
}

}  // namespace bspa::trace
