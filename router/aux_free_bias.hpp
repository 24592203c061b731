// Auxiliary-loss-free load balancing (DeepSeek-V3; Wang et al. 2024, arXiv 2408.15664; Megatron
// get_updated_expert_bias): selection on s + b with a per-expert bias b, weights from the unbiased s,
// and after each batch b_e += rate * sign(mean_e load - load_e), load from the demand or the kept
// assignments, in float64 or float32 arithmetic. In: logits [num_tokens, num_experts],
// bias [num_experts]. Out: the group_limited outputs, and the updated bias. Integer counts from a sort:
// deterministic at any thread count. Backend-neutral (Thrust policy first); twin: aux_free_bias_ref.hpp;
// test: tests/router/aux_free_bias_test.cpp.
#pragma once

#include <cstdint>

#include <thrust/binary_search.h>
#include <thrust/copy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include "src/common/portability.hpp"
#include "src/config/experiment.hpp"
#include "router/group_limited.hpp"

namespace moesim {

// Scratch of aux_free_bias_update, caller-owned.
struct BiasUpdateScratch {
  int32_t* sorted_expert;  // [num_assignments]
  int64_t* upper;          // [num_experts] assignments with expert <= e
};

namespace router_detail {

// One expert's step. upper[num_experts - 1] is the total counted (every assignment, or the kept ones).
struct BiasUpdateFunctor {
  const int64_t* upper;
  int num_experts;
  double rate;
  BiasArithmetic arithmetic;
  float* bias;
  MOESIM_HD void operator()(int e) const {
    const int64_t load = upper[e] - (e > 0 ? upper[e - 1] : 0);
    const int64_t total = upper[num_experts - 1];
    if (arithmetic == BiasArithmetic::float32) {
      const float mean_load = static_cast<float>(total) / static_cast<float>(num_experts);
      const float gap = mean_load - static_cast<float>(load);
      const float sign = gap > 0.0f ? 1.0f : (gap < 0.0f ? -1.0f : 0.0f);
      bias[e] = bias[e] + sign * static_cast<float>(rate);
      return;
    }
    const double mean_load = static_cast<double>(total) / static_cast<double>(num_experts);
    const double gap = mean_load - static_cast<double>(load);
    const double sign = gap > 0.0 ? 1.0 : (gap < 0.0 ? -1.0 : 0.0);
    bias[e] = static_cast<float>(static_cast<double>(bias[e]) + rate * sign);
  }
};

// The expert of a counted assignment; num_experts (past every upper_bound query) for a dropped one.
struct CountedExpert {
  const int32_t* expert;
  const uint8_t* kept;  // null: every assignment counts
  int num_experts;
  MOESIM_HD int32_t operator()(int64_t i) const { return (kept == nullptr || kept[i]) ? expert[i] : num_experts; }
};

}  // namespace router_detail

// Selection with the bias: group_limited_gating with bias = the state's b (group limiting applies when
// params.groups > 1). bias: [num_experts].
template <class Policy>
void aux_free_bias_gating(Policy&& policy, const float* logits, const float* bias, int64_t num_tokens, int num_experts,
                          int top_k, const GroupLimitedParams& params, int32_t* expert, float* weight,
                          const GroupLimitedScratch& scratch) {
  group_limited_gating(policy, logits, bias, num_tokens, num_experts, top_k, params, expert, weight, scratch);
}

// The update after a batch: load_e = assignments of the batch to e, all of them (kept null: the demand,
// before any capacity drop) or only the kept ones (kept: [num_assignments], Megatron's routing map after
// dropping); mean = their total / E; b_e += rate * sign(mean - load_e) (sign 0 when equal). arithmetic
// float64: in double, stored as float; float32: in float throughout (PyTorch on a float32 bias).
// expert: [num_assignments]; bias: [num_experts] updated in place.
template <class Policy>
void aux_free_bias_update(Policy&& policy, const int32_t* expert, const uint8_t* kept, int64_t num_assignments,
                          int num_experts, double rate, BiasArithmetic arithmetic, float* bias,
                          const BiasUpdateScratch& scratch) {
  if (num_assignments == 0) return;
  thrust::transform(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_assignments),
                    scratch.sorted_expert, router_detail::CountedExpert{expert, kept, num_experts});
  thrust::sort(policy, scratch.sorted_expert, scratch.sorted_expert + num_assignments);
  thrust::upper_bound(policy, scratch.sorted_expert, scratch.sorted_expert + num_assignments,
                      thrust::counting_iterator<int32_t>(0), thrust::counting_iterator<int32_t>(num_experts),
                      scratch.upper);
  thrust::for_each(policy, thrust::counting_iterator<int>(0), thrust::counting_iterator<int>(num_experts),
                   router_detail::BiasUpdateFunctor{scratch.upper, num_experts, rate, arithmetic, bias});
}

}  // namespace moesim
