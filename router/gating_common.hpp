// Per-token building blocks shared by the Thrust gating templates: top-k selection (ties to the lower
// expert), softmax/sigmoid scores and the combine-weight rule. Inputs are one token's row, outputs its
// k slots; no allocation, double arithmetic in expert (or slot) order, so results are deterministic.
// MOESIM_HD, built by g++ and nvcc. The `_ref.hpp` references take only the parameter structs from here
// and re-derive the formulas with plain loops. Covered by tests/router/topk_gating_test.cpp and the rest.
#pragma once

#include <cmath>
#include <cstdint>

#include "src/common/portability.hpp"
#include "src/config/experiment.hpp"

namespace moesim {

// How a token-choice router turns the chosen experts into combine weights.
//  score=softmax, pre_softmax:  w_j = softmax over all E logits, at expert e_j
//  score=softmax, !pre_softmax: w_j = softmax over the k chosen logits (already sums to 1: renormalize is a no-op)
//  score=sigmoid:               w_j = sigmoid(z_{e_j}) (pre_softmax is ignored: sigmoid is elementwise)
// then w_j /= sum_j w_j when renormalize (and the sum is > 0), then w_j *= scaling (routed_scaling_factor).
struct GateWeightRule {
  ScoreFunction score = ScoreFunction::softmax;
  bool pre_softmax = true;
  bool renormalize = false;
  double scaling = 1.0;
};

// Parameters of group_limited_gating (group_limited.hpp): the RouterConfig knobs it reads.
struct GroupLimitedParams {
  ScoreFunction score = ScoreFunction::sigmoid;
  int groups = 1;        // divides num_experts
  int topk_groups = 1;   // in [1, groups], topk_groups * (num_experts / groups) >= top_k
  GroupMaskFill fill = GroupMaskFill::neg_inf;
  bool renormalize = false;
  double scaling = 1.0;  // routed_scaling_factor
};

namespace router_detail {

MOESIM_HD inline double neg_infinity() { return -HUGE_VAL; }

MOESIM_HD inline double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

MOESIM_HD inline double row_max(const float* row, int num_experts) {
  double m = row[0];
  for (int e = 1; e < num_experts; ++e) {
    if (static_cast<double>(row[e]) > m) m = row[e];
  }
  return m;
}

// sum_e exp(z_e - m), in expert order.
MOESIM_HD inline double softmax_denominator(const float* row, int num_experts, double m) {
  double s = 0.0;
  for (int e = 0; e < num_experts; ++e) s += exp(static_cast<double>(row[e]) - m);
  return s;
}

// Keeps the top_k largest value(e), e in [0, num_experts), in out_expert/out_key, descending.
// An expert replaces or passes a kept one only when strictly greater, so equal values keep the
// lower expert index first (the tie rule of vLLM's topk_softmax and torch.topk on CPU).
// out_expert/out_key: [top_k], used as the working list.
template <class ValueFn>
MOESIM_HD void select_topk(const ValueFn& value, int num_experts, int top_k, int32_t* out_expert,
                           double* out_key) {
  int count = 0;
  for (int e = 0; e < num_experts; ++e) {
    const double v = value(e);
    if (count == top_k && !(v > out_key[top_k - 1])) continue;
    int pos = count < top_k ? count : top_k - 1;
    while (pos > 0 && v > out_key[pos - 1]) {
      out_key[pos] = out_key[pos - 1];
      out_expert[pos] = out_expert[pos - 1];
      --pos;
    }
    out_key[pos] = v;
    out_expert[pos] = e;
    if (count < top_k) ++count;
  }
}

// select_topk over the values of a float row, with the same result, faster on wide rows. Values are
// compared as floats (float -> double is exact and monotone, so each comparison has select_topk's
// outcome). When num_experts >= 2 top_k (and top_k <= kTopKMaxLanes), a first pass takes the maximum of
// each of top_k lanes (experts e = j mod top_k; a loop the compiler vectorises); the smallest lane
// maximum T is a lower bound of the top_k-th largest value (the top_k lane maxima are distinct experts),
// so experts below T cannot be chosen and only the others go through the insertion, in expert order:
// the stable top-k of that subsequence is the stable top-k of the row. For 256 uniform logits and
// top_k = 8 about 20 experts pass, a third of the insertions of the plain loop. A NaN anywhere falls back
// to the plain loop (select_topk's outcome then depends on where the NaN sits).
constexpr int kTopKMaxLanes = 64;
constexpr int kTopKChunk = 64;

MOESIM_HD inline void insert_topk(float v, int e, int top_k, int& count, int32_t* out_expert, double* out_key) {
  if (count == top_k && !(static_cast<double>(v) > out_key[top_k - 1])) return;
  int pos = count < top_k ? count : top_k - 1;
  while (pos > 0 && static_cast<double>(v) > out_key[pos - 1]) {
    out_key[pos] = out_key[pos - 1];
    out_expert[pos] = out_expert[pos - 1];
    --pos;
  }
  out_key[pos] = v;
  out_expert[pos] = e;
  if (count < top_k) ++count;
}

MOESIM_HD inline void select_topk_row(const float* row, int num_experts, int top_k, int32_t* out_expert,
                                      double* out_key) {
  int count = 0;
  if (num_experts >= 2 * top_k && top_k <= kTopKMaxLanes) {
    float lane_max[kTopKMaxLanes];
    for (int j = 0; j < top_k; ++j) lane_max[j] = row[j];
    const int full = num_experts / top_k * top_k;
    for (int e = top_k; e < full; e += top_k) {
      for (int j = 0; j < top_k; ++j) lane_max[j] = row[e + j] > lane_max[j] ? row[e + j] : lane_max[j];
    }
    float bound = HUGE_VALF;
    for (int j = 0; j < top_k; ++j) bound = lane_max[j] < bound ? lane_max[j] : bound;
    // Branch-free compaction of the passing experts, kTopKChunk at a time, then their insertion.
    int passing[kTopKChunk];
    int nan = 0;
    for (int base = 0; base < num_experts; base += kTopKChunk) {
      const int end = base + kTopKChunk < num_experts ? base + kTopKChunk : num_experts;
      int n = 0;
      for (int e = base; e < end; ++e) {
        const float v = row[e];
        nan |= v != v;
        passing[n] = e;
        n += !(v < bound);
      }
      for (int i = 0; i < n; ++i) insert_topk(row[passing[i]], passing[i], top_k, count, out_expert, out_key);
    }
    if (!nan) return;
    count = 0;
  }
  for (int e = 0; e < num_experts; ++e) insert_topk(row[e], e, top_k, count, out_expert, out_key);
}

// Writes out[j] = float(w(j) / sum * scaling) with sum = sum_j w(j) in slot order when renormalize
// and sum > 0, else float(w(j) * scaling).
template <class WeightFn>
MOESIM_HD void write_weights(const WeightFn& w, int top_k, bool renormalize, double scaling, float* out) {
  double sum = 0.0;
  if (renormalize) {
    for (int j = 0; j < top_k; ++j) sum += w(j);
  }
  for (int j = 0; j < top_k; ++j) {
    const double v = (renormalize && sum > 0.0) ? w(j) / sum : w(j);
    out[j] = static_cast<float>(v * scaling);
  }
}

// w_j = softmax over all E at expert[j]: exp(z - m) / den.
struct FullSoftmaxWeight {
  const float* row;
  const int32_t* expert;
  double m;
  double den;
  MOESIM_HD double operator()(int j) const { return exp(static_cast<double>(row[expert[j]]) - m) / den; }
};

// w_j = softmax over the k chosen keys; key[0] is their maximum (keys are sorted descending).
struct ChosenSoftmaxWeight {
  const double* key;
  double den;
  MOESIM_HD double operator()(int j) const { return exp(key[j] - key[0]) / den; }
};

struct SigmoidWeight {
  const float* row;
  const int32_t* expert;
  MOESIM_HD double operator()(int j) const { return sigmoid(static_cast<double>(row[expert[j]])); }
};

// out[j] = float(exp(z_j - m) / den * scaling) over the k chosen logits z_j = row[expert[j]], m their maximum,
// den = sum_j exp(z_j - m) in slot order: FullSoftmaxWeight's arithmetic, each exp computed once (up to
// kTopKMaxLanes slots; beyond, twice, as FullSoftmaxWeight does), so the bits are the same.
MOESIM_HD inline void chosen_softmax(const float* row, const int32_t* expert, int top_k, double scaling, float* out) {
  double m = row[expert[0]];
  for (int j = 1; j < top_k; ++j) {
    if (static_cast<double>(row[expert[j]]) > m) m = row[expert[j]];
  }
  if (top_k > kTopKMaxLanes) {
    double den = 0.0;
    for (int j = 0; j < top_k; ++j) den += exp(static_cast<double>(row[expert[j]]) - m);
    write_weights(FullSoftmaxWeight{row, expert, m, den}, top_k, false, scaling, out);
    return;
  }
  double e[kTopKMaxLanes];
  double den = 0.0;
  for (int j = 0; j < top_k; ++j) {
    e[j] = exp(static_cast<double>(row[expert[j]]) - m);
    den += e[j];
  }
  for (int j = 0; j < top_k; ++j) out[j] = static_cast<float>(e[j] / den * scaling);
}

// Combine weights of one token under `rule`. row: [num_experts] logits; expert, key: [top_k] from
// select_topk on the logits (key[j] = z_{expert[j]}, descending); out: [top_k].
MOESIM_HD inline void gate_weights(const float* row, int num_experts, const int32_t* expert, int top_k,
                                   const GateWeightRule& rule, float* out) {
  if (rule.score == ScoreFunction::sigmoid) {
    write_weights(SigmoidWeight{row, expert}, top_k, rule.renormalize, rule.scaling, out);
  } else if (rule.pre_softmax && rule.renormalize) {
    // Softmax over all E renormalised over the k chosen: the full denominator cancels, so this is the
    // softmax over the chosen logits (equal up to the last bits of the double arithmetic, one exp per
    // slot instead of one per expert).
    chosen_softmax(row, expert, top_k, rule.scaling, out);
  } else if (rule.pre_softmax) {
    const double m = row_max(row, num_experts);
    const double den = softmax_denominator(row, num_experts, m);
    write_weights(FullSoftmaxWeight{row, expert, m, den}, top_k, rule.renormalize, rule.scaling, out);
  } else {
    // Softmax over the chosen logits (the maximum over the chosen is not necessarily slot 0 when the
    // selection used another key: sinkhorn).
    chosen_softmax(row, expert, top_k, rule.scaling, out);
  }
}

}  // namespace router_detail
// The weight rule and the group-limited parameters of a router config: one translation of the config for
// the fast path (route_driver.hpp) and the references (route.cpp).
inline GateWeightRule gate_weight_rule(const RouterConfig& cfg) {
  GateWeightRule rule;
  rule.score = cfg.score;
  rule.pre_softmax = cfg.pre_softmax;
  rule.renormalize = cfg.renormalize;
  rule.scaling = cfg.routed_scaling_factor;
  return rule;
}

inline GroupLimitedParams group_limited_params(const RouterConfig& cfg) {
  GroupLimitedParams p;
  p.score = cfg.score;
  p.groups = cfg.groups;
  p.topk_groups = cfg.topk_groups;
  p.fill = cfg.group_mask_fill;
  p.renormalize = cfg.renormalize;
  p.scaling = cfg.routed_scaling_factor;
  return p;
}

}  // namespace moesim
