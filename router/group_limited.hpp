// Group-limited top-k gating (DeepSeek-V3; HF DeepseekV3TopkRouter, vLLM grouped_topk, Megatron
// group_limited_topk), with an optional per-expert selection bias (the aux-loss-free balancing of
// aux_free_bias.hpp). In: logits [num_tokens, num_experts]. Out: expert, weight [num_tokens * top_k]
// token-major, slot j descending in the masked biased score, ties to the lower expert. One thread per
// token, double arithmetic: deterministic at any thread count.
// Backend-neutral (Thrust policy first); twin: group_limited_ref.hpp; test: tests/router/group_limited_test.cpp.
#pragma once

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"
#include "src/config/experiment.hpp"
#include "router/gating_common.hpp"

namespace moesim {

// Scratch of group_limited_gating, caller-owned.
struct GroupLimitedScratch {
  double* score;        // [num_tokens * num_experts] unbiased scores s
  double* selection;    // [num_tokens * num_experts] s + bias, masked
  double* group_score;  // [num_tokens * groups]
  double* key;          // [num_tokens * top_k] chosen selection values
};

namespace router_detail {

struct RowValue {
  const double* row;
  MOESIM_HD double operator()(int e) const { return row[e]; }
};

struct ScoreAtSlot {
  const double* score_row;
  const int32_t* expert;
  MOESIM_HD double operator()(int j) const { return score_row[expert[j]]; }
};

struct GroupLimitedFunctor {
  const float* logits;
  const float* bias;  // [num_experts] or null
  int num_experts;
  int top_k;
  GroupLimitedParams p;
  int32_t* expert;
  float* weight;
  GroupLimitedScratch scratch;
  MOESIM_HD void operator()(int64_t t) const {
    const int num_e = num_experts;
    const float* row = logits + t * num_e;
    double* s = scratch.score + t * num_e;
    double* sel = scratch.selection + t * num_e;
    double* gs = scratch.group_score + t * p.groups;
    if (p.score == ScoreFunction::softmax) {
      const double m = row_max(row, num_e);
      const double den = softmax_denominator(row, num_e, m);
      for (int e = 0; e < num_e; ++e) s[e] = exp(static_cast<double>(row[e]) - m) / den;
    } else {
      for (int e = 0; e < num_e; ++e) s[e] = sigmoid(static_cast<double>(row[e]));
    }
    for (int e = 0; e < num_e; ++e) sel[e] = bias ? s[e] + static_cast<double>(bias[e]) : s[e];
    if (p.groups > 1) {
      const int size = num_e / p.groups;
      for (int g = 0; g < p.groups; ++g) {
        double b1 = neg_infinity(), b2 = neg_infinity();
        for (int e = g * size; e < (g + 1) * size; ++e) {
          if (sel[e] > b1) {
            b2 = b1;
            b1 = sel[e];
          } else if (sel[e] > b2) {
            b2 = sel[e];
          }
        }
        gs[g] = size == 1 ? b1 : b1 + b2;
      }
      const double fill = p.fill == GroupMaskFill::neg_inf ? neg_infinity() : 0.0;
      for (int g = 0; g < p.groups; ++g) {
        int better = 0;  // groups ranked ahead of g: higher score, or equal score and lower index
        for (int h = 0; h < p.groups; ++h) {
          if (gs[h] > gs[g] || (gs[h] == gs[g] && h < g)) ++better;
        }
        if (better >= p.topk_groups) {
          for (int e = g * size; e < (g + 1) * size; ++e) sel[e] = fill;
        }
      }
    }
    int32_t* ex = expert + t * top_k;
    select_topk(RowValue{sel}, num_e, top_k, ex, scratch.key + t * top_k);
    write_weights(ScoreAtSlot{s, ex}, top_k, p.renormalize, p.scaling, weight + t * top_k);
  }
};

}  // namespace router_detail

// group_limited. s = softmax over all E or sigmoid per `score`; s' = s + bias (bias null: s' = s).
// With groups > 1 the E experts form `groups` contiguous groups of E/groups; group score = sum of the
// top-2 s' in the group (the top-1 when a group has one expert; HF/MaxText, and vLLM with a bias);
// the `topk_groups` best groups survive (equal scores: the lower group first); every expert of the
// other groups gets s' = -inf (fill neg_inf: vLLM, Megatron) or 0.0 (fill zero: HuggingFace).
// Selection: top-k of the masked s', ties to the lower expert. With fill zero a masked expert can win
// when the surviving biased scores are negative, as in HuggingFace. Weights: the unbiased s at the
// chosen experts (also for a masked expert that won), optionally renormalised, times scaling.
template <class Policy>
void group_limited_gating(Policy&& policy, const float* logits, const float* bias, int64_t num_tokens, int num_experts,
                          int top_k, const GroupLimitedParams& params, int32_t* expert, float* weight,
                          const GroupLimitedScratch& scratch) {
  if (num_tokens == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   router_detail::GroupLimitedFunctor{logits, bias, num_experts, top_k, params, expert, weight,
                                                      scratch});
}

}  // namespace moesim
