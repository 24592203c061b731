// Sinkhorn-balanced top-k gating (S-BASE, Clark et al. 2022; Megatron-LM `sinkhorn`). In: logits
// [num_tokens, num_experts]. Out: expert, weight [num_tokens * top_k] token-major, slot j descending in
// the balanced matrix, ties to the lower expert. Every sum runs in a fixed order in double and the
// stopping test uses a max (exact under any reduction order): deterministic at any thread count.
// Backend-neutral (Thrust policy first); twin: sinkhorn_ref.hpp; test: tests/router/sinkhorn_test.cpp.
#pragma once

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include "src/common/portability.hpp"
#include "router/gating_common.hpp"

namespace moesim {

// Scratch of sinkhorn_gating, caller-owned.
struct SinkhornScratch {
  double* cost;    // [num_tokens * num_experts] exp(z - row max)
  double* d0;      // [num_tokens]  row scaling
  double* d1;      // [num_experts] column scaling
  double* d1_old;  // [num_experts]
  double* key;     // [num_tokens * top_k] chosen entries of the balanced matrix
};

namespace router_detail {

// Megatron's eps in both normalisations.
constexpr double kSinkhornEps = 1e-8;

struct SinkhornCostFunctor {
  const float* logits;
  int num_experts;
  double* cost;
  MOESIM_HD void operator()(int64_t t) const {
    const float* row = logits + t * num_experts;
    const double m = row_max(row, num_experts);
    for (int e = 0; e < num_experts; ++e) cost[t * num_experts + e] = exp(static_cast<double>(row[e]) - m);
  }
};

struct SinkhornInitFunctor {
  double* d1;
  MOESIM_HD void operator()(int e) const { d1[e] = 1.0; }
};

// d0_t = (1/N) / (sum_e d1_e c_te + eps)
struct SinkhornRowFunctor {
  const double* cost;
  const double* d1;
  double* d0;
  int64_t num_tokens;
  int num_experts;
  MOESIM_HD void operator()(int64_t t) const {
    double s = 0.0;
    for (int e = 0; e < num_experts; ++e) s += d1[e] * cost[t * num_experts + e];
    d0[t] = (1.0 / static_cast<double>(num_tokens)) / (s + kSinkhornEps);
  }
};

// d1_e = (1/E) / (sum_t d0_t c_te + eps); keeps the previous d1_e for the stopping test.
struct SinkhornColumnFunctor {
  const double* cost;
  const double* d0;
  double* d1;
  double* d1_old;
  int64_t num_tokens;
  int num_experts;
  MOESIM_HD void operator()(int e) const {
    double s = 0.0;
    for (int64_t t = 0; t < num_tokens; ++t) s += d0[t] * cost[t * num_experts + e];
    d1_old[e] = d1[e];
    d1[e] = (1.0 / static_cast<double>(num_experts)) / (s + kSinkhornEps);
  }
};

struct AbsDiff {
  const double* a;
  const double* b;
  MOESIM_HD double operator()(int e) const {
    const double d = a[e] - b[e];
    return d < 0.0 ? -d : d;
  }
};

struct MaxOp {
  MOESIM_HD double operator()(double a, double b) const { return a < b ? b : a; }
};

struct BalancedValue {
  const double* cost_row;
  const double* d1;
  double d0;
  MOESIM_HD double operator()(int e) const { return d1[e] * cost_row[e] * d0; }
};

struct SinkhornSelectFunctor {
  const float* logits;
  const double* cost;
  const double* d0;
  const double* d1;
  int num_experts;
  int top_k;
  GateWeightRule rule;
  int32_t* expert;
  float* weight;
  double* key;
  MOESIM_HD void operator()(int64_t t) const {
    int32_t* ex = expert + t * top_k;
    select_topk(BalancedValue{cost + t * num_experts, d1, d0[t]}, num_experts, top_k, ex, key + t * top_k);
    gate_weights(logits + t * num_experts, num_experts, ex, top_k, rule, weight + t * top_k);
  }
};

}  // namespace router_detail

// sinkhorn. cost c = exp(z - row max) (the row shift is absorbed by the row scaling, so the balanced
// matrix is Megatron's); d1 = 1; then, for up to max_iterations rounds (at least one):
//   d0_t = (1/N) / (sum_e d1_e c_te + 1e-8);  d1_e = (1/E) / (sum_t d0_t c_te + 1e-8)
// stopping after the round in which max_e |d1_e - d1_old_e| < tolerance (Megatron stops on the mean
// of that difference with no round limit; the max is stricter and exact under parallel reduction).
// Selection: top-k per token of d1_e * c_te * d0_t, ties to the lower expert. Weights: `rule` on the
// original logits at the chosen experts (gating_common.hpp; by default the softmax over all E;
// score=sigmoid with top_k 1 gives Megatron's top-1 sinkhorn weights).
// Returns the number of rounds run.
template <class Policy>
int sinkhorn_gating(Policy&& policy, const float* logits, int64_t num_tokens, int num_experts, int top_k,
                    int max_iterations, double tolerance, const GateWeightRule& rule, int32_t* expert, float* weight,
                    const SinkhornScratch& scratch) {
  if (num_tokens == 0) return 0;
  using thrust::counting_iterator;
  const counting_iterator<int64_t> t0(0), t1(num_tokens);
  const counting_iterator<int> e0(0), e1(num_experts);
  thrust::for_each(policy, t0, t1, router_detail::SinkhornCostFunctor{logits, num_experts, scratch.cost});
  thrust::for_each(policy, e0, e1, router_detail::SinkhornInitFunctor{scratch.d1});
  int rounds = 0;
  const int limit = max_iterations < 1 ? 1 : max_iterations;
  while (rounds < limit) {
    thrust::for_each(policy, t0, t1,
                     router_detail::SinkhornRowFunctor{scratch.cost, scratch.d1, scratch.d0, num_tokens, num_experts});
    thrust::for_each(policy, e0, e1,
                     router_detail::SinkhornColumnFunctor{scratch.cost, scratch.d0, scratch.d1, scratch.d1_old,
                                                          num_tokens, num_experts});
    ++rounds;
    const double change = thrust::transform_reduce(policy, e0, e1, router_detail::AbsDiff{scratch.d1, scratch.d1_old},
                                                   0.0, router_detail::MaxOp());
    if (change < tolerance) break;
  }
  thrust::for_each(policy, t0, t1,
                   router_detail::SinkhornSelectFunctor{logits, scratch.cost, scratch.d0, scratch.d1, num_experts,
                                                        top_k, rule, expert, weight, scratch.key});
  return rounds;
}

}  // namespace moesim
