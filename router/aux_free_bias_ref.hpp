// Serial reference for aux_free_bias.hpp: biased group-limited selection (group_limited_ref.hpp) and
// the bias update from a plain per-expert count. bias: [num_experts], updated in place.
// Host only. Test: tests/router/aux_free_bias_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "router/group_limited_ref.hpp"

namespace moesim {

inline void aux_free_bias_gating_ref(const float* logits, const float* bias, int64_t num_tokens, int num_experts,
                                     int top_k, const GroupLimitedParams& params, std::vector<int32_t>& expert,
                                     std::vector<float>& weight) {
  group_limited_gating_ref(logits, bias, num_tokens, num_experts, top_k, params, expert, weight);
}

inline void aux_free_bias_update_ref(const std::vector<int32_t>& expert, int num_experts, double rate, float* bias) {
  if (expert.empty()) return;
  std::vector<int64_t> load(num_experts, 0);
  for (int32_t e : expert) ++load[e];
  const double mean_load = static_cast<double>(expert.size()) / num_experts;
  for (int e = 0; e < num_experts; ++e) {
    const double sign = load[e] < mean_load ? 1.0 : (load[e] > mean_load ? -1.0 : 0.0);
    bias[e] = static_cast<float>(static_cast<double>(bias[e]) + rate * sign);
  }
}

}  // namespace moesim
