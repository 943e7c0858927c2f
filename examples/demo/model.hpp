// The toy attention "model": per layer, Q, K and V are random projections of a token's
// embedding with rotary positions applied to Q and K. Nothing flows between layers, so
// Q, K and V depend only on (token, position, layer): any two computations of the same
// prompt must agree, whether its prefix came from the cache or not.
#pragma once

#include <cstdint>
#include <vector>

namespace demo {

struct ModelShape {
  int32_t num_layers = 4;
  int32_t num_q_heads = 8;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 64;
  int32_t embed_dim = 64;
};

struct Projections {
  std::vector<float> q;  // [n, Hq, D]
  std::vector<float> k;  // [n, Hkv, D]
  std::vector<float> v;  // [n, Hkv, D]
};

class ToyModel {
 public:
  ToyModel(const ModelShape &shape, uint64_t seed);
  const ModelShape &shape() const { return shape_; }

  // Projections of tokens[0..n) sitting at absolute positions first_pos .. first_pos+n-1.
  Projections project(int32_t layer, const int32_t *tokens, int64_t n, int64_t first_pos) const;

 private:
  void embed(int32_t token, float *out) const;  // N(0,1) vector seeded by (seed, token)
  ModelShape shape_;
  uint64_t seed_;
  std::vector<std::vector<float>> wq_, wk_, wv_;  // per layer, [embed_dim, heads * head_dim]
  std::vector<float> inv_freq_;                   // rotary frequencies, head_dim / 2
};

// The toy model's sampling: the next token is a hash of the float bits of the last row
// of the attention output of every layer (rows[l] points at layer l's row of `row_len`
// floats), so a different attention result changes the tokens generated after it.
int32_t next_token(const std::vector<const float *> &rows, int64_t row_len, int32_t vocab);

}  // namespace demo
