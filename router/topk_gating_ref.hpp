// Serial reference for topk_gating.hpp (token_choice and noisy_top_k): plain loops, std::stable_sort,
// double arithmetic. Out: expert, weight [num_tokens * top_k], token-major, slot j descending,
// ties to the lower expert. Host only. Compared against the Thrust path in tests/router/topk_gating_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/common/counter_rng.hpp"
#include "router/gating_common.hpp"

namespace moesim {
namespace ref_detail {

// Experts of one row ordered by descending value; stable, so equal values keep the lower index first.
inline std::vector<int32_t> descending_order(const std::vector<double>& value) {
  std::vector<int32_t> order(value.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return value[a] > value[b]; });
  return order;
}

// Applies renormalisation (sum in slot order, only when > 0) and scaling; appends k floats.
inline void push_weights(const std::vector<double>& w, bool renormalize, double scaling, std::vector<float>& out) {
  double sum = 0.0;
  for (double v : w) sum += v;
  for (double v : w) {
    const double x = (renormalize && sum > 0.0) ? v / sum : v;
    out.push_back(static_cast<float>(x * scaling));
  }
}

// Combine weights of one token under `rule` (the formulas of gating_common.hpp, written out again):
// z: the token's logits, chosen: its k experts in slot order. Appends k floats to out.
inline void rule_weights_ref(const std::vector<double>& z, const std::vector<int32_t>& chosen, int top_k,
                             const GateWeightRule& rule, std::vector<float>& out) {
  std::vector<double> w(top_k);
  if (rule.score == ScoreFunction::sigmoid) {
    for (int j = 0; j < top_k; ++j) w[j] = 1.0 / (1.0 + std::exp(-z[chosen[j]]));
    push_weights(w, rule.renormalize, rule.scaling, out);
  } else if (rule.pre_softmax) {
    const double m = *std::max_element(z.begin(), z.end());
    double den = 0.0;
    for (double v : z) den += std::exp(v - m);
    for (int j = 0; j < top_k; ++j) w[j] = std::exp(z[chosen[j]] - m) / den;
    push_weights(w, rule.renormalize, rule.scaling, out);
  } else {
    double m = z[chosen[0]];
    for (int j = 1; j < top_k; ++j) m = std::max(m, z[chosen[j]]);
    double den = 0.0;
    for (int j = 0; j < top_k; ++j) den += std::exp(z[chosen[j]] - m);
    for (int j = 0; j < top_k; ++j) w[j] = std::exp(z[chosen[j]] - m) / den;
    push_weights(w, false, rule.scaling, out);  // already sums to 1
  }
}

}  // namespace ref_detail

inline void token_choice_gating_ref(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                                    const GateWeightRule& rule, std::vector<int32_t>& expert,
                                    std::vector<float>& weight) {
  expert.clear();
  weight.clear();
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * num_experts;
    const std::vector<double> z(row, row + num_experts);
    std::vector<int32_t> order = ref_detail::descending_order(z);
    order.resize(top_k);
    ref_detail::rule_weights_ref(z, order, top_k, rule, weight);
    expert.insert(expert.end(), order.begin(), order.end());
  }
}

inline void noisy_topk_gating_ref(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                                  double noise_std, uint64_t seed, double scaling, std::vector<int32_t>& expert,
                                  std::vector<float>& weight) {
  expert.clear();
  weight.clear();
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<double> h(num_experts);
    for (int e = 0; e < num_experts; ++e) {
      const uint64_t index = static_cast<uint64_t>(t) * static_cast<uint64_t>(num_experts) + e;
      h[e] = static_cast<double>(logits[t * num_experts + e]) + noise_std * counter_normal(seed, kStreamNoise, index);
    }
    const std::vector<int32_t> order = ref_detail::descending_order(h);
    const double m = h[order[0]];
    double den = 0.0;
    for (int j = 0; j < top_k; ++j) den += std::exp(h[order[j]] - m);
    std::vector<double> w(top_k);
    for (int j = 0; j < top_k; ++j) w[j] = std::exp(h[order[j]] - m) / den;
    ref_detail::push_weights(w, false, scaling, weight);
    expert.insert(expert.end(), order.begin(), order.begin() + top_k);
  }
}

}  // namespace moesim
