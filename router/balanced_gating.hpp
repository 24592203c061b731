// Balanced (forced round-robin) gating: the ideal the other strategies are measured against.
// Assignment i = t * top_k + j goes to expert i mod E: k consecutive indices are distinct when k <= E,
// and every expert receives floor(N*k/E) or ceil(N*k/E) assignments. Weights 1/k * routed_scaling_factor.
// Out: expert, weight [num_tokens * top_k] token-major. Elementwise: deterministic at any thread count.
// Backend-neutral (Thrust policy first); twin: balanced_gating_ref.hpp; test: tests/router/balanced_gating_test.cpp.
#pragma once

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"

namespace moesim {
namespace router_detail {

struct BalancedGatingFunctor {
  int num_experts;
  float w;
  int32_t* expert;
  float* weight;
  MOESIM_HD void operator()(int64_t i) const {
    expert[i] = static_cast<int32_t>(i % num_experts);
    weight[i] = w;
  }
};

}  // namespace router_detail

template <class Policy>
void balanced_gating(Policy&& policy, int64_t num_tokens, int num_experts, int top_k, double scaling, int32_t* expert,
                     float* weight) {
  const int64_t m = num_tokens * top_k;
  if (m == 0) return;
  const float w = static_cast<float>((1.0 / top_k) * scaling);
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(m),
                   router_detail::BalancedGatingFunctor{num_experts, w, expert, weight});
}

}  // namespace moesim
