// Rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864, eq. 34), the rotate-half
// layout of GPT-NeoX and HF transformers: element i pairs with i + head_dim/2 (i < head_dim/2) and turns
// by pos * theta^(-2i / head_dim); an odd head_dim leaves its last element as is.
// x: [num_tokens, num_heads, head_dim] rotated in place; pos: [num_tokens]. Angles in double, each
// element written by one functor call: bytewise deterministic. Backend-neutral (Thrust, policy first);
// twin: rope_ref.hpp; test: tests/decoder/attention_test.cpp.
#pragma once

#include <math.h>

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"

namespace moesim {

// The RoPE base of Llama/Mistral-style models (Mixtral itself uses 1e6; the base only spreads the
// frequencies and does not change what the router sees in a seeded decoder).
constexpr double kRopeTheta = 10000.0;

namespace decoder_detail {

// One call per (token, head): rotates head_dim/2 pairs.
struct RopeOp {
  float* x;
  const int32_t* pos;
  int num_heads;
  int head_dim;
  double theta;
  MOESIM_HD void operator()(int64_t i) const {
    const int64_t token = i / num_heads;
    float* row = x + i * head_dim;
    const int half = head_dim / 2;
    const double p = static_cast<double>(pos[token]);
    for (int j = 0; j < half; ++j) {
      const double angle = p * pow(theta, -2.0 * j / head_dim);
      const double c = cos(angle), s = sin(angle);
      const double a = row[j], b = row[j + half];
      row[j] = static_cast<float>(a * c - b * s);
      row[j + half] = static_cast<float>(b * c + a * s);
    }
  }
};

}  // namespace decoder_detail

template <class Policy>
void apply_rope(const Policy& policy, float* x, const int32_t* pos, int64_t num_tokens, int num_heads, int head_dim,
                double theta = kRopeTheta) {
  if (num_tokens == 0 || num_heads == 0 || head_dim < 2) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0),
                   thrust::counting_iterator<int64_t>(num_tokens * num_heads),
                   decoder_detail::RopeOp{x, pos, num_heads, head_dim, theta});
}

}  // namespace moesim
