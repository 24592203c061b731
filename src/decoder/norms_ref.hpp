// Serial reference of rms_norm (norms.hpp): plain loops, double accumulators.
// x, out: [num_tokens, hidden]; weight: [hidden]. Host only, header only.
// Covered by tests/decoder/norms_test.cpp.
#pragma once

#include <cmath>
#include <cstdint>

#include "src/decoder/norms.hpp"

namespace moesim {

inline void rms_norm_ref(const float* x, const float* weight, int64_t num_tokens, int64_t hidden, float* out,
                         double eps = kRmsNormEps) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    double sq = 0.0;
    for (int64_t c = 0; c < hidden; ++c) sq += static_cast<double>(x[t * hidden + c]) * x[t * hidden + c];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(hidden) + eps);
    for (int64_t c = 0; c < hidden; ++c) out[t * hidden + c] = static_cast<float>(x[t * hidden + c] * inv * weight[c]);
  }
}

}  // namespace moesim
