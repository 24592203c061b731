// Synthetic router logits: logits[t, e] = N(0, 1) + bias[e], bias[e] = -skew * ln(rank[e] + 1),
// where rank is a seeded permutation of the experts. softmax then weighs expert e by (rank+1)^-skew:
// Zipf-like popularity with exponent `skew` (0 = no popularity bias). Also seeded token ids.
// Deterministic for a seed, independent of thread count. Host only. Covered by
// tests/workload/synthetic_logits_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

// Per-expert popularity bias [num_experts] for the given skew and seed.
std::vector<float> expert_popularity_bias(int num_experts, double skew, uint64_t seed);

// The popularity bias [num_experts] at step `step` (negative: warm-up steps) for workload.popularity, skew,
// drift and batch_variation: one draw u from `seed` (zipf: expert_popularity_bias; lognormal: skew x N(0, 1) per
// expert); with drift > 0 a second, independent draw v, p = cos(drift step) u + sin(drift step) v; with
// batch_variation s > 0 a draw b of the step's own, bias = sqrt(1 - s) p + sqrt(s) b.
// groups: router.groups; with group_skew > 0 every draw adds group_skew x N(0, 1) per group of E / groups
// contiguous experts.
std::vector<float> popularity_at(const WorkloadConfig& w, int num_experts, int groups, uint64_t seed, int64_t step);

// Router logits [num_tokens, num_experts], row-major.
std::vector<float> synthetic_logits(int64_t num_tokens, int num_experts, double skew, uint64_t seed);

// Token ids [num_tokens] in [0, vocab), for hash gating.
std::vector<int64_t> synthetic_token_ids(int64_t num_tokens, int vocab, uint64_t seed);

// Hidden states [num_tokens, hidden] ~ N(0, 1), the executed pipeline's input.
std::vector<float> synthetic_hidden(int64_t num_tokens, int64_t hidden, uint64_t seed);

}  // namespace moesim
