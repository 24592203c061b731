// Serial reference for aux_free_bias.hpp: biased group-limited selection (group_limited_ref.hpp) and
// the bias update from a plain per-expert count (of every assignment, or of the kept ones) in float64 or
// float32 arithmetic. bias: [num_experts], updated in place.
// Host only. Test: tests/router/aux_free_bias_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"
#include "router/group_limited_ref.hpp"

namespace moesim {

inline void aux_free_bias_gating_ref(const float* logits, const float* bias, int64_t num_tokens, int num_experts,
                                     int top_k, const GroupLimitedParams& params, std::vector<int32_t>& expert,
                                     std::vector<float>& weight) {
  group_limited_gating_ref(logits, bias, num_tokens, num_experts, top_k, params, expert, weight);
}

// load_e: the assignments to e (kept null), or only the kept ones (kept: [num_assignments]); mean: their
// total / E. float64: b_e = float(double(b_e) + rate * sign); float32: every step in float, as PyTorch
// computes it on a float32 bias (Megatron get_updated_expert_bias).
inline void aux_free_bias_update_ref(const std::vector<int32_t>& expert, const std::vector<uint8_t>* kept,
                                     int num_experts, double rate, BiasArithmetic arithmetic, float* bias) {
  if (expert.empty()) return;
  std::vector<int64_t> load(num_experts, 0);
  int64_t total = 0;
  for (size_t i = 0; i < expert.size(); ++i) {
    if (kept && !(*kept)[i]) continue;
    ++load[expert[i]];
    ++total;
  }
  for (int e = 0; e < num_experts; ++e) {
    if (arithmetic == BiasArithmetic::float32) {
      const float mean_load = static_cast<float>(total) / static_cast<float>(num_experts);
      const float gap = mean_load - static_cast<float>(load[e]);
      const float sign = gap > 0.0f ? 1.0f : (gap < 0.0f ? -1.0f : 0.0f);
      bias[e] = bias[e] + sign * static_cast<float>(rate);
    } else {
      const double mean_load = static_cast<double>(total) / num_experts;
      const double sign = load[e] < mean_load ? 1.0 : (load[e] > mean_load ? -1.0 : 0.0);
      bias[e] = static_cast<float>(static_cast<double>(bias[e]) + rate * sign);
    }
  }
}

}  // namespace moesim
