// Serial reference for balanced_gating.hpp: a round-robin counter over tokens and slots.
// Out: expert, weight [num_tokens * top_k] token-major; deterministic by construction.
// Host only. Test: tests/router/balanced_gating_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace moesim {

inline void balanced_gating_ref(int64_t num_tokens, int num_experts, int top_k, double scaling,
                                std::vector<int32_t>& expert, std::vector<float>& weight) {
  expert.clear();
  weight.clear();
  int32_t next = 0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {
      expert.push_back(next);
      weight.push_back(static_cast<float>((1.0 / top_k) * scaling));
      next = (next + 1 == num_experts) ? 0 : next + 1;
    }
  }
}

}  // namespace moesim
