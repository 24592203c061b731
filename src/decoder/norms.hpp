// RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467, eq. 4): out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight.
// x, out: [num_tokens, hidden] (may alias); weight: [hidden]. Sum of squares in double in column order,
// one functor call per token: bytewise deterministic. Backend-neutral (Thrust, policy first);
// twin: norms_ref.hpp; test: tests/decoder/norms_test.cpp.
#pragma once

#include <math.h>

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"

namespace moesim {

// Mixtral's and Llama's rms_norm_eps.
constexpr double kRmsNormEps = 1e-5;

namespace decoder_detail {

struct RmsNormOp {
  const float* x;
  const float* weight;
  int64_t hidden;
  double eps;
  float* out;
  MOESIM_HD void operator()(int64_t t) const {
    const float* row = x + t * hidden;
    double sq = 0.0;
    for (int64_t c = 0; c < hidden; ++c) sq += static_cast<double>(row[c]) * row[c];
    const double inv = 1.0 / sqrt(sq / static_cast<double>(hidden) + eps);
    float* dst = out + t * hidden;
    for (int64_t c = 0; c < hidden; ++c) dst[c] = static_cast<float>(row[c] * inv * weight[c]);
  }
};

}  // namespace decoder_detail

template <class Policy>
void rms_norm(const Policy& policy, const float* x, const float* weight, int64_t num_tokens, int64_t hidden,
              float* out, double eps = kRmsNormEps) {
  if (num_tokens == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   decoder_detail::RmsNormOp{x, weight, hidden, eps, out});
}

}  // namespace moesim
