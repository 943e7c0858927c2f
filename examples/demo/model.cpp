#include "model.hpp"

#include <cmath>
#include <cstring>

#include "rng.hpp"

namespace demo {

namespace {

std::vector<float> random_matrix(Rng &rng, int64_t rows, int64_t cols) {
  // Variance 1/rows keeps projections of N(0,1) embeddings near N(0,1).
  const double sd = 1.0 / std::sqrt(static_cast<double>(rows));
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float &x : w) x = static_cast<float>(rng.normal() * sd);
  return w;
}

// out[c] = sum_r x[r] * w[r][c]
void matvec(const float *x, const std::vector<float> &w, int64_t rows, int64_t cols, float *out) {
  for (int64_t c = 0; c < cols; ++c) out[c] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float xr = x[r];
    const float *wr = w.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) out[c] += xr * wr[c];
  }
}

}  // namespace

ToyModel::ToyModel(const ModelShape &shape, uint64_t seed) : shape_(shape), seed_(seed) {
  Rng rng(seed ^ 0x6d6f64656cull);
  const int64_t e = shape.embed_dim, d = shape.head_dim;
  for (int32_t l = 0; l < shape.num_layers; ++l) {
    wq_.push_back(random_matrix(rng, e, shape.num_q_heads * d));
    wk_.push_back(random_matrix(rng, e, shape.num_kv_heads * d));
    wv_.push_back(random_matrix(rng, e, shape.num_kv_heads * d));
  }
  for (int64_t i = 0; i < d / 2; ++i)
    inv_freq_.push_back(static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d))));
}

void ToyModel::embed(int32_t token, float *out) const {
  Rng rng(seed_ ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) * 0x9e3779b97f4a7c15ull));
  for (int32_t i = 0; i < shape_.embed_dim; ++i) out[i] = static_cast<float>(rng.normal());
}

Projections ToyModel::project(int32_t layer, const int32_t *tokens, int64_t n, int64_t first_pos) const {
  const int64_t d = shape_.head_dim, e = shape_.embed_dim;
  const int64_t hq = shape_.num_q_heads, hkv = shape_.num_kv_heads;
  Projections p;
  p.q.resize(static_cast<size_t>(n * hq * d));
  p.k.resize(static_cast<size_t>(n * hkv * d));
  p.v.resize(static_cast<size_t>(n * hkv * d));
  std::vector<float> x(static_cast<size_t>(e));
  for (int64_t t = 0; t < n; ++t) {
    embed(tokens[t], x.data());
    float *q = p.q.data() + t * hq * d, *k = p.k.data() + t * hkv * d;
    matvec(x.data(), wq_[layer], e, hq * d, q);
    matvec(x.data(), wk_[layer], e, hkv * d, k);
    matvec(x.data(), wv_[layer], e, hkv * d, p.v.data() + t * hkv * d);
    // Rotary positions on Q and K (pairs (2i, 2i+1)); the angle in double so long
    // positions rotate exactly the same way in every computation.
    const double pos = static_cast<double>(first_pos + t);
    for (int64_t i = 0; i < d / 2; ++i) {
      const double a = pos * inv_freq_[static_cast<size_t>(i)];
      const float c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
      for (int64_t h = 0; h < hq + hkv; ++h) {
        float *row = h < hq ? q + h * d : k + (h - hq) * d;
        const float x0 = row[2 * i], x1 = row[2 * i + 1];
        row[2 * i] = x0 * c - x1 * s;
        row[2 * i + 1] = x0 * s + x1 * c;
      }
    }
  }
  return p;
}

int32_t next_token(const std::vector<const float *> &rows, int64_t row_len, int32_t vocab) {
  uint64_t h = 0x746f6b656eull;
  for (const float *row : rows)
    for (int64_t i = 0; i < row_len; ++i) {
      uint32_t bits;
      std::memcpy(&bits, row + i, 4);
      h = splitmix64(h ^ bits);
    }
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab));
}

}  // namespace demo
