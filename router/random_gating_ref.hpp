// Serial reference for random_gating.hpp: the same draws (Floyd's sample, then a Fisher-Yates shuffle
// of the k slots) written with a std::vector and std::find. Out: expert, weight [num_tokens * top_k]
// token-major. Host only. Test: tests/router/random_gating_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "src/common/counter_rng.hpp"

namespace moesim {

inline void random_gating_ref(int64_t num_tokens, int num_experts, int top_k, uint64_t seed, double scaling,
                              std::vector<int32_t>& expert, std::vector<float>& weight) {
  expert.clear();
  weight.clear();
  for (int64_t t = 0; t < num_tokens; ++t) {
    uint64_t draw = static_cast<uint64_t>(t) * 2u * static_cast<uint64_t>(top_k);
    std::vector<int32_t> chosen;
    for (int j = num_experts - top_k; j < num_experts; ++j) {
      const int32_t r = static_cast<int32_t>(counter_below(seed, kStreamRandomGate, draw++, static_cast<uint64_t>(j) + 1));
      const bool seen = std::find(chosen.begin(), chosen.end(), r) != chosen.end();
      chosen.push_back(seen ? j : r);
    }
    for (int i = top_k - 1; i > 0; --i) {
      const int r = static_cast<int>(counter_below(seed, kStreamRandomGate, draw++, static_cast<uint64_t>(i) + 1));
      std::swap(chosen[i], chosen[r]);
    }
    expert.insert(expert.end(), chosen.begin(), chosen.end());
    weight.insert(weight.end(), top_k, static_cast<float>((1.0 / top_k) * scaling));
  }
}

}  // namespace moesim
