// Serial reference for sinkhorn.hpp: the same Megatron-style alternating normalisation with plain
// loops, then a stable sort per token (ties to the lower expert). Out: expert, weight
// [num_tokens * top_k] token-major; returns the rounds run. Host only. Test: tests/router/sinkhorn_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "router/gating_common.hpp"
#include "router/topk_gating_ref.hpp"

namespace moesim {

inline int sinkhorn_gating_ref(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                               int max_iterations, double tolerance, const GateWeightRule& rule,
                               std::vector<int32_t>& expert, std::vector<float>& weight) {
  expert.clear();
  weight.clear();
  if (num_tokens == 0) return 0;
  const int64_t n = num_tokens;
  const int e_count = num_experts;
  std::vector<double> cost(n * e_count);
  for (int64_t t = 0; t < n; ++t) {
    double m = logits[t * e_count];
    for (int e = 1; e < e_count; ++e) m = std::max(m, static_cast<double>(logits[t * e_count + e]));
    for (int e = 0; e < e_count; ++e) cost[t * e_count + e] = std::exp(static_cast<double>(logits[t * e_count + e]) - m);
  }
  const double eps = 1e-8;
  std::vector<double> d0(n), d1(e_count, 1.0), d1_old(e_count);
  int rounds = 0;
  do {
    for (int64_t t = 0; t < n; ++t) {
      double s = 0.0;
      for (int e = 0; e < e_count; ++e) s += d1[e] * cost[t * e_count + e];
      d0[t] = (1.0 / static_cast<double>(n)) / (s + eps);
    }
    d1_old = d1;
    for (int e = 0; e < e_count; ++e) {
      double s = 0.0;
      for (int64_t t = 0; t < n; ++t) s += d0[t] * cost[t * e_count + e];
      d1[e] = (1.0 / static_cast<double>(e_count)) / (s + eps);
    }
    ++rounds;
    double change = 0.0;
    for (int e = 0; e < e_count; ++e) change = std::max(change, std::abs(d1[e] - d1_old[e]));
    if (change < tolerance) break;
  } while (rounds < max_iterations);

  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> balanced(e_count);
    for (int e = 0; e < e_count; ++e) balanced[e] = d1[e] * cost[t * e_count + e] * d0[t];
    std::vector<int32_t> order = ref_detail::descending_order(balanced);
    order.resize(top_k);
    const std::vector<double> z(logits + t * e_count, logits + (t + 1) * e_count);
    ref_detail::rule_weights_ref(z, order, top_k, rule, weight);
    expert.insert(expert.end(), order.begin(), order.end());
  }
  return rounds;
}

}  // namespace moesim
