// Serial reference of the dispatch plan (kernels/permute.hpp): std::stable_sort and plain loops.
// Input: a Routing; output: a DispatchPlan (contract in kernels/moe_layer.hpp). Integer, deterministic.
// Host only, header only. Covered by tests/dispatch/permute_test.cpp (the oracle of plan_dispatch_omp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/moe_layer.hpp"

namespace moesim {

inline DispatchPlan plan_dispatch_ref(const Routing& r, Layout layout, int block_size) {
  require_valid_routing(r);
  MOESIM_REQUIRE(layout != Layout::block || block_size >= 1, "block layout needs block_size >= 1, got " << block_size);
  const int num_experts = r.num_experts;
  const int64_t n = r.num_assignments();

  DispatchPlan plan;
  plan.num_experts = num_experts;
  plan.layout = layout;

  // Kept assignments in expert order; stable, so assignment order survives within each expert.
  std::vector<int32_t> kept_ids;
  for (int64_t i = 0; i < n; ++i) {
    if (r.kept[i]) kept_ids.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(kept_ids.begin(), kept_ids.end(),
                   [&](int32_t a, int32_t b) { return r.expert[a] < r.expert[b]; });
  plan.order = kept_ids;
  plan.num_kept = static_cast<int64_t>(kept_ids.size());

  plan.counts.assign(num_experts, 0);
  for (int32_t a : kept_ids) plan.counts[r.expert[a]] += 1;
  plan.offsets.assign(num_experts + 1, 0);
  for (int e = 0; e < num_experts; ++e) plan.offsets[e + 1] = plan.offsets[e] + plan.counts[e];

  const int64_t capacity = layout == Layout::capacity ? layout_capacity(r, plan.counts) : 0;
  plan.padded_offsets.assign(num_experts + 1, 0);
  for (int e = 0; e < num_experts; ++e) {
    int64_t padded = plan.counts[e];
    if (layout == Layout::block) padded = (plan.counts[e] + block_size - 1) / block_size * block_size;
    if (layout == Layout::capacity) padded = capacity;
    plan.padded_offsets[e + 1] = plan.padded_offsets[e] + padded;
  }
  plan.rows = plan.padded_offsets[num_experts];

  plan.row_assignment.assign(plan.rows, kPaddingRow);
  for (int e = 0; e < num_experts; ++e) {
    for (int64_t k = 0; k < plan.counts[e]; ++k) {
      plan.row_assignment[plan.padded_offsets[e] + k] = plan.order[plan.offsets[e] + k];
    }
  }
  return plan;
}

}  // namespace moesim
