// Expert-choice gating (Zhou et al. 2022, "Mixture-of-Experts with Expert Choice Routing"; flaxformer
// ExpertsChooseMaskedRouter): each expert takes its C best tokens. In: logits [num_tokens, num_experts].
// Out: token, expert, weight [expert_choice_assignments(...)], expert-major (e * C + c within a group),
// c in descending score, ties to the lower token. One comparison sort under a total order: deterministic
// at any thread count. Backend-neutral (Thrust policy first); twin: expert_choice_ref.hpp;
// test: tests/router/expert_choice_test.cpp.
#pragma once

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include "src/common/portability.hpp"
#include "src/config/experiment.hpp"
#include "router/gating_common.hpp"

namespace moesim {

// Scratch of expert_choice_gating, caller-owned.
struct ExpertChoiceScratch {
  double* score;  // [num_tokens * num_experts] gating scores
  int64_t* perm;  // [num_tokens * num_experts]
};

// Assignments produced: per group of group_tokens tokens (0: one group of all tokens; the last group
// may be shorter) every expert takes min(capacity, group length) tokens.
MOESIM_HD inline int64_t expert_choice_assignments(int64_t num_tokens, int num_experts, int64_t capacity,
                                                   int64_t group_tokens) {
  if (num_tokens == 0) return 0;
  const int64_t s = group_tokens > 0 ? group_tokens : num_tokens;
  const int64_t groups = (num_tokens + s - 1) / s;
  const int64_t last = num_tokens - (groups - 1) * s;
  const int64_t c_full = capacity < s ? capacity : s;
  const int64_t c_last = capacity < last ? capacity : last;
  return ((groups - 1) * c_full + c_last) * num_experts;
}

namespace router_detail {

struct TokenScoresFunctor {
  const float* logits;
  int num_experts;
  ScoreFunction score;
  double* out;
  MOESIM_HD void operator()(int64_t t) const {
    const float* row = logits + t * num_experts;
    double* s = out + t * num_experts;
    if (score == ScoreFunction::softmax) {
      const double m = row_max(row, num_experts);
      const double den = softmax_denominator(row, num_experts, m);
      for (int e = 0; e < num_experts; ++e) s[e] = exp(static_cast<double>(row[e]) - m) / den;
    } else {
      for (int e = 0; e < num_experts; ++e) s[e] = sigmoid(static_cast<double>(row[e]));
    }
  }
};

// Order of q = t * E + e: (group of t, e), then descending score, then ascending t.
struct ExpertChoiceOrder {
  const double* score;
  int num_experts;
  int64_t group_tokens;
  MOESIM_HD bool operator()(int64_t a, int64_t b) const {
    const int64_t ta = a / num_experts, tb = b / num_experts;
    const int64_t sa = (ta / group_tokens) * num_experts + a % num_experts;
    const int64_t sb = (tb / group_tokens) * num_experts + b % num_experts;
    if (sa != sb) return sa < sb;
    if (score[a] != score[b]) return score[a] > score[b];
    return ta < tb;
  }
};

struct ExpertChoiceEmit {
  const double* score;
  const int64_t* perm;
  int64_t num_tokens;
  int num_experts;
  int64_t group_tokens;
  int64_t capacity;
  double scaling;
  int32_t* token;
  int32_t* expert;
  float* weight;
  MOESIM_HD void operator()(int64_t o) const {
    const int64_t c_full = capacity < group_tokens ? capacity : group_tokens;
    const int64_t g = o / (num_experts * c_full);
    const int64_t len = (num_tokens - g * group_tokens) < group_tokens ? num_tokens - g * group_tokens : group_tokens;
    const int64_t c_g = capacity < len ? capacity : len;
    const int64_t local = o - g * num_experts * c_full;
    const int64_t e = local / c_g, c = local % c_g;
    const int64_t q = perm[g * group_tokens * num_experts + e * len + c];
    token[o] = static_cast<int32_t>(q / num_experts);
    expert[o] = static_cast<int32_t>(e);
    weight[o] = static_cast<float>(score[q] * scaling);
  }
};

}  // namespace router_detail

// expert_choice. Scores s = softmax over the experts per token (score=softmax, the paper) or sigmoid.
// Within each group (capacity_scope sequence: one sequence; else the batch), expert e takes the
// min(C, group length) tokens with the highest s_te; equal scores go to the lower token. A token may
// be taken by 0..E experts. Weight = s_te * scaling. C comes from route's expert_choice_capacity.
// In a causal decoder this only sees the current step's tokens: it ranks a token against the others
// routed with it, which leaks across positions in training (flaxformer's warning) and, at decode time,
// makes a token's experts depend on which other requests share its batch.
template <class Policy>
void expert_choice_gating(Policy&& policy, const float* logits, int64_t num_tokens, int num_experts,
                          ScoreFunction score, double scaling, int64_t capacity, int64_t group_tokens, int32_t* token,
                          int32_t* expert, float* weight, const ExpertChoiceScratch& scratch) {
  const int64_t total = expert_choice_assignments(num_tokens, num_experts, capacity, group_tokens);
  if (total == 0) return;
  const int64_t s = group_tokens > 0 ? group_tokens : num_tokens;
  const int64_t n = num_tokens * num_experts;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   router_detail::TokenScoresFunctor{logits, num_experts, score, scratch.score});
  thrust::sequence(policy, scratch.perm, scratch.perm + n);
  thrust::sort(policy, scratch.perm, scratch.perm + n, router_detail::ExpertChoiceOrder{scratch.score, num_experts, s});
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(total),
                   router_detail::ExpertChoiceEmit{scratch.score, scratch.perm, num_tokens, num_experts, s, capacity,
                                                   scaling, token, expert, weight});
}

}  // namespace moesim
