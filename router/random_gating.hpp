// Random gating: each token gets top_k distinct experts drawn uniformly (an ordered sample without
// replacement) from the counter RNG keyed on (seed, token), independent of the logits.
// Out: expert, weight [num_tokens * top_k] token-major; weights 1/k * routed_scaling_factor.
// One thread per token, draws indexed by (token, draw): deterministic at any thread count and backend.
// Backend-neutral (Thrust policy first); twin: random_gating_ref.hpp; test: tests/router/random_gating_test.cpp.
#pragma once

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"
#include "src/common/counter_rng.hpp"

namespace moesim {
namespace router_detail {

// Floyd's sampling (Bentley & Floyd 1987) picks a uniform k-subset of [0, E) with k draws and no
// E-sized scratch; a Fisher-Yates shuffle of the k slots (k - 1 draws) then makes the slot order
// uniform too. Draw d of token t uses index t * 2k + d.
struct RandomGatingFunctor {
  int num_experts;
  int top_k;
  uint64_t seed;
  float w;
  int32_t* expert;
  float* weight;
  MOESIM_HD void operator()(int64_t t) const {
    int32_t* ex = expert + t * top_k;
    uint64_t draw = static_cast<uint64_t>(t) * 2u * static_cast<uint64_t>(top_k);
    int count = 0;
    for (int j = num_experts - top_k; j < num_experts; ++j) {
      const int32_t r = static_cast<int32_t>(counter_below(seed, kStreamRandomGate, draw++, static_cast<uint64_t>(j) + 1));
      bool seen = false;
      for (int i = 0; i < count; ++i) {
        if (ex[i] == r) seen = true;
      }
      ex[count++] = seen ? j : r;
    }
    for (int i = top_k - 1; i > 0; --i) {
      const int r = static_cast<int>(counter_below(seed, kStreamRandomGate, draw++, static_cast<uint64_t>(i) + 1));
      const int32_t tmp = ex[i];
      ex[i] = ex[r];
      ex[r] = tmp;
    }
    for (int j = 0; j < top_k; ++j) weight[t * top_k + j] = w;
  }
};

}  // namespace router_detail

template <class Policy>
void random_gating(Policy&& policy, int64_t num_tokens, int num_experts, int top_k, uint64_t seed, double scaling,
                   int32_t* expert, float* weight) {
  if (num_tokens == 0) return;
  const float w = static_cast<float>((1.0 / top_k) * scaling);
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   router_detail::RandomGatingFunctor{num_experts, top_k, seed, w, expert, weight});
}

}  // namespace moesim
