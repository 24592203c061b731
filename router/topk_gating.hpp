// Token-choice top-k gating (Switch, GShard, Mixtral, vLLM topk_softmax) and noisy top-k (Shazeer et al.
// 2017). In: logits [num_tokens, num_experts] row-major. Out: expert, weight [num_tokens * top_k],
// token-major (assignment i = t * top_k + j), slot j in descending score, ties to the lower expert.
// One thread per token, double arithmetic in expert order: deterministic at any thread count.
// Backend-neutral (Thrust policy first); twin: topk_gating_ref.hpp; test: tests/router/topk_gating_test.cpp.
#pragma once

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"
#include "src/common/counter_rng.hpp"
#include "router/gating_common.hpp"

namespace moesim {
namespace router_detail {

struct TokenChoiceFunctor {
  const float* logits;
  int num_experts;
  int top_k;
  GateWeightRule rule;
  int32_t* expert;
  float* weight;
  double* key;
  MOESIM_HD void operator()(int64_t t) const {
    const float* row = logits + t * num_experts;
    int32_t* ex = expert + t * top_k;
    select_topk_row(row, num_experts, top_k, ex, key + t * top_k);
    gate_weights(row, num_experts, ex, top_k, rule, weight + t * top_k);
  }
};

struct NoisyValue {
  const float* row;
  uint64_t seed;
  uint64_t base;  // token * num_experts
  double noise_std;
  MOESIM_HD double operator()(int e) const {
    return static_cast<double>(row[e]) + noise_std * counter_normal(seed, kStreamNoise, base + e);
  }
};

struct NoisyTopKFunctor {
  const float* logits;
  int num_experts;
  int top_k;
  double noise_std;
  uint64_t seed;
  double scaling;
  int32_t* expert;
  float* weight;
  double* key;
  MOESIM_HD void operator()(int64_t t) const {
    const float* row = logits + t * num_experts;
    double* keys = key + t * top_k;
    const uint64_t base = static_cast<uint64_t>(t) * static_cast<uint64_t>(num_experts);
    select_topk(NoisyValue{row, seed, base, noise_std}, num_experts, top_k, expert + t * top_k, keys);
    double den = 0.0;
    for (int j = 0; j < top_k; ++j) den += exp(keys[j] - keys[0]);
    write_weights(ChosenSoftmaxWeight{keys, den}, top_k, false, scaling, weight + t * top_k);
  }
};

}  // namespace router_detail

// token_choice. Selection is the top-k of the raw logits: softmax and sigmoid are strictly
// increasing, so this is the top-k of the scores, exactly, without rounding creating false ties.
// Weights follow `rule` (gating_common.hpp): softmax over all E at the chosen experts (pre_softmax),
// or softmax over the k chosen logits (!pre_softmax, Mixtral/Megatron), or sigmoid; then optional
// renormalisation to sum 1 and routed_scaling_factor.
// key_scratch: [num_tokens * top_k] doubles (the chosen logits).
template <class Policy>
void token_choice_gating(Policy&& policy, const float* logits, int64_t num_tokens, int num_experts, int top_k,
                         const GateWeightRule& rule, int32_t* expert, float* weight, double* key_scratch) {
  if (num_tokens == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   router_detail::TokenChoiceFunctor{logits, num_experts, top_k, rule, expert, weight, key_scratch});
}

// noisy_top_k (Shazeer et al. 2017, eq. 3-5, with a fixed noise scale): H = z + noise_std * N(0,1),
// the normal drawn from the counter RNG keyed on (seed, token, expert); selection is the top-k of H;
// weights are Softmax(KeepTopK(H, k)): the softmax over the k chosen noisy logits (they sum to 1),
// times routed_scaling_factor. score, pre_softmax and renormalize do not apply.
// key_scratch: [num_tokens * top_k] doubles (the chosen noisy logits).
template <class Policy>
void noisy_topk_gating(Policy&& policy, const float* logits, int64_t num_tokens, int num_experts, int top_k,
                       double noise_std, uint64_t seed, double scaling, int32_t* expert, float* weight,
                       double* key_scratch) {
  if (num_tokens == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   router_detail::NoisyTopKFunctor{logits, num_experts, top_k, noise_std, seed, scaling, expert,
                                                   weight, key_scratch});
}

}  // namespace moesim
