// Per-expert loads drawn as peer tools assume them, so moesim's answer can stand beside theirs:
// aiconfigurator's `power_law` expert-load distribution (its MoE collector's _generate_power_law_distribution,
// as data/kernel-imbalance/README.md describes it) and its `balanced` round-robin. Inputs: tokens T,
// experts E, top_k k, the EP degree; output: loads [E] summing to T k, no expert above T. Deterministic:
// the draws come from counter_rng (seed, stream, index). Host only.
// Covered by tests/workload/load_distribution_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace moesim {

// aiconfigurator's power law with exponent alpha > 0 (alpha != 1):
//  1. each expert's weight drawn by inverse CDF from a power law x^-alpha truncated to [1, 0.8 T]
//     ([0.01, 2] when T k <= E);
//  2. the weights scaled to T k and rounded to the nearest integer;
//  3. every expert capped at T rows (a token takes an expert once), the overflow handed back in passes
//     over the ep ranks of E / ep contiguous experts, one row per rank per pass, each to the rank's
//     least-loaded expert below the cap (ties: the lower expert);
//  4. the sum fixed to T k in the same passes: a row added to each rank's least-loaded expert below the
//     cap, or taken from its most-loaded (ties: the lower expert). Spread over the ranks, not heaped on
//     the first experts: with T k <= E most weights round to 0, and where the fix-up fills the lowest
//     experts first, the timed rank would run all its experts at batch 1 instead of one or two;
//  5. with ep > 1, the heaviest of the ep contiguous groups of E / ep experts swapped with group 0, so the
//     first rank holds the busiest group (the collector times rank 0).
// Requires T >= 1, 1 <= k <= E, ep dividing E.
std::vector<int64_t> power_law_loads(int64_t tokens, int experts, int top_k, double alpha, int ep, uint64_t seed,
                                     uint64_t draw);

// Water levels within one group of experts: adds `rows` to the experts below `cap`, one row at a time to
// the least loaded (ties: the lower expert; stops where every expert is full), and takes `rows` from the
// most loaded, one row at a time (ties: the lower expert). In O(E log rows), not row by row.
void fill_least_loaded(std::vector<int64_t>& load, int64_t cap, int64_t rows);
void take_most_loaded(std::vector<int64_t>& load, int64_t rows);

// Steps 3 and 4 of the power law: `rows` added (taken) in passes over the ep contiguous groups of
// load.size() / ep experts, one row per group per pass, within a group as fill_least_loaded
// (take_most_loaded) places a row; a group with no room (nothing left) is skipped. Whole passes in bulk.
void add_by_rank(std::vector<int64_t>& load, int ep, int64_t cap, int64_t rows);
void take_by_rank(std::vector<int64_t>& load, int ep, int64_t rows);

// aiconfigurator's balanced routing: with stride s = ceil(E / k), token t takes experts (o_t + j s) mod E,
// j < k, where o_t = t, or floor(t s / T) when T < s (a small batch's experts spread over the stride, as
// its collector's balanced_logits places them): every expert within one row of T k / E (T k distinct
// experts when T k < E).
std::vector<int64_t> balanced_round_robin_loads(int64_t tokens, int experts, int top_k);

}  // namespace moesim
