// Serial reference for expert_choice.hpp: per group and expert, a stable sort of the group's tokens by
// descending score (ties to the lower token), keeping the first min(C, group length).
// Out: token, expert, weight, expert-major within each group. Host only. Test: tests/router/expert_choice_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

inline void expert_choice_gating_ref(const float* logits, int64_t num_tokens, int num_experts, ScoreFunction score,
                                     double scaling, int64_t capacity, int64_t group_tokens,
                                     std::vector<int32_t>& token, std::vector<int32_t>& expert,
                                     std::vector<float>& weight) {
  token.clear();
  expert.clear();
  weight.clear();
  if (num_tokens == 0 || capacity <= 0) return;
  std::vector<double> s(num_tokens * num_experts);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * num_experts;
    if (score == ScoreFunction::softmax) {
      double m = row[0];
      for (int e = 1; e < num_experts; ++e) m = std::max(m, static_cast<double>(row[e]));
      double den = 0.0;
      for (int e = 0; e < num_experts; ++e) den += std::exp(static_cast<double>(row[e]) - m);
      for (int e = 0; e < num_experts; ++e) s[t * num_experts + e] = std::exp(static_cast<double>(row[e]) - m) / den;
    } else {
      for (int e = 0; e < num_experts; ++e) s[t * num_experts + e] = 1.0 / (1.0 + std::exp(-static_cast<double>(row[e])));
    }
  }
  const int64_t group = group_tokens > 0 ? group_tokens : num_tokens;
  for (int64_t begin = 0; begin < num_tokens; begin += group) {
    const int64_t end = std::min(num_tokens, begin + group);
    for (int e = 0; e < num_experts; ++e) {
      std::vector<int64_t> tokens(end - begin);
      std::iota(tokens.begin(), tokens.end(), begin);
      std::stable_sort(tokens.begin(), tokens.end(),
                       [&](int64_t a, int64_t b) { return s[a * num_experts + e] > s[b * num_experts + e]; });
      const int64_t take = std::min<int64_t>(capacity, end - begin);
      for (int64_t c = 0; c < take; ++c) {
        token.push_back(static_cast<int32_t>(tokens[c]));
        expert.push_back(e);
        weight.push_back(static_cast<float>(s[tokens[c] * num_experts + e] * scaling));
      }
    }
  }
}

}  // namespace moesim
