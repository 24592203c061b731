// Serial reference of apply_rope (rope.hpp): plain loops, same rotate-half layout and angles, in double.
// x: [num_tokens, num_heads, head_dim] rotated in place; pos: [num_tokens]. Host only, header only.
// Covered by tests/decoder/attention_test.cpp.
#pragma once

#include <cmath>
#include <cstdint>

#include "src/decoder/rope.hpp"

namespace moesim {

inline void apply_rope_ref(float* x, const int32_t* pos, int64_t num_tokens, int num_heads, int head_dim,
                           double theta = kRopeTheta) {
  const int half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < num_heads; ++h) {
      float* row = x + (t * num_heads + h) * head_dim;
      for (int j = 0; j < half; ++j) {
        const double angle = pos[t] * std::pow(theta, -2.0 * j / head_dim);
        const double a = row[j], b = row[j + half];
        row[j] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
        row[j + half] = static_cast<float>(b * std::cos(angle) + a * std::sin(angle));
      }
    }
  }
}

}  // namespace moesim
