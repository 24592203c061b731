// Serial reference for group_limited.hpp: scores, biased selection scores, group scores from a sort of
// each group, group ranking and expert top-k by std::stable_sort (ties to the lower index).
// Out: expert, weight [num_tokens * top_k] token-major. Host only. Test: tests/router/group_limited_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "router/gating_common.hpp"
#include "router/topk_gating_ref.hpp"

namespace moesim {

// bias: [num_experts] or null.
inline void group_limited_gating_ref(const float* logits, const float* bias, int64_t num_tokens, int num_experts,
                                     int top_k, const GroupLimitedParams& p, std::vector<int32_t>& expert,
                                     std::vector<float>& weight) {
  expert.clear();
  weight.clear();
  const int size = num_experts / p.groups;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const std::vector<double> z(logits + t * num_experts, logits + (t + 1) * num_experts);
    std::vector<double> s(num_experts);
    if (p.score == ScoreFunction::softmax) {
      const double m = *std::max_element(z.begin(), z.end());
      double den = 0.0;
      for (double v : z) den += std::exp(v - m);
      for (int e = 0; e < num_experts; ++e) s[e] = std::exp(z[e] - m) / den;
    } else {
      for (int e = 0; e < num_experts; ++e) s[e] = 1.0 / (1.0 + std::exp(-z[e]));
    }
    std::vector<double> sel(num_experts);
    for (int e = 0; e < num_experts; ++e) sel[e] = bias ? s[e] + static_cast<double>(bias[e]) : s[e];
    if (p.groups > 1) {
      std::vector<double> group_score(p.groups);
      for (int g = 0; g < p.groups; ++g) {
        std::vector<double> members(sel.begin() + g * size, sel.begin() + (g + 1) * size);
        std::sort(members.begin(), members.end(), std::greater<double>());
        group_score[g] = size == 1 ? members[0] : members[0] + members[1];
      }
      const std::vector<int32_t> group_order = ref_detail::descending_order(group_score);
      const double fill = p.fill == GroupMaskFill::neg_inf ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int r = p.topk_groups; r < p.groups; ++r) {
        const int g = group_order[r];
        for (int e = g * size; e < (g + 1) * size; ++e) sel[e] = fill;
      }
    }
    std::vector<int32_t> order = ref_detail::descending_order(sel);
    order.resize(top_k);
    std::vector<double> w(top_k);
    for (int j = 0; j < top_k; ++j) w[j] = s[order[j]];
    ref_detail::push_weights(w, p.renormalize, p.scaling, weight);
    expert.insert(expert.end(), order.begin(), order.end());
  }
}

}  // namespace moesim
