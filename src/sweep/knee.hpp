// The effective critical batch of a curve of time against batch (docs/cost-model.md "The knee"): the
// smallest swept batch past which time per token no longer falls by more than the documented fraction,
// for a routing and for its balanced counterpart. Pure arithmetic on the sweep's rows, host only.
// Covered by tests/sweep/knee_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace moesim {

// Elasticity of time per token between two batches n0 < n1: ln(tpt0 / tpt1) / ln(n1 / n0). 1 when the
// time stays flat (batch n1 costs what n0 costs: the whole batching benefit), 0 when time grows as the
// batch (no benefit left).
double batching_elasticity(int64_t n0, double time0_s, int64_t n1, double time1_s);

// The knee rule: the elasticity to the next swept batch falls below one half, so time per token falls by
// less than 1 - 1/sqrt(2) = 29.3 % per doubling of the batch.
constexpr double kKneeElasticity = 0.5;

// The smallest n[i] whose elasticity to n[i + 1] is below kKneeElasticity; nullopt when the curve never
// bends within the swept batches. `tokens` strictly increasing, one time per batch.
std::optional<int64_t> knee_tokens(const std::vector<int64_t>& tokens, const std::vector<double>& time_s);

}  // namespace moesim
