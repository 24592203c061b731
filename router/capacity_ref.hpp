// Serial reference for capacity.hpp: assignments listed in priority order, re-sorted stably by the
// drop policy's key, then one pass with a counter per (sequence, expert). Out: kept [num_tokens * top_k].
// Host only. Test: tests/router/capacity_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/common/counter_rng.hpp"

namespace moesim {

inline void apply_capacity_ref(const std::vector<int32_t>& expert, const std::vector<float>& weight,
                               int64_t num_tokens, int top_k, int num_experts, int64_t capacity,
                               int64_t scope_tokens, DropPolicy drop_policy, Priority priority, uint64_t seed,
                               std::vector<uint8_t>& kept) {
  const int64_t m = num_tokens * top_k;
  kept.assign(m, 1);
  if (m == 0 || capacity <= 0) return;
  std::vector<int64_t> order;
  if (priority == Priority::token_major) {
    for (int64_t i = 0; i < m; ++i) order.push_back(i);
  } else {
    for (int j = 0; j < top_k; ++j) {
      for (int64_t t = 0; t < num_tokens; ++t) order.push_back(t * top_k + j);
    }
  }
  if (drop_policy == DropPolicy::score) {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return weight[a] > weight[b]; });
  } else if (drop_policy == DropPolicy::random) {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return counter_hash(seed, kStreamRandomDrop, a) < counter_hash(seed, kStreamRandomDrop, b);
    });
  }
  const int64_t sequences = scope_tokens > 0 ? (num_tokens + scope_tokens - 1) / scope_tokens : 1;
  std::vector<int64_t> taken(sequences * num_experts, 0);
  for (int64_t i : order) {
    const int64_t seq = scope_tokens > 0 ? (i / top_k) / scope_tokens : 0;
    int64_t& count = taken[seq * num_experts + expert[i]];
    kept[i] = count < capacity ? 1 : 0;
    ++count;
  }
}

inline void renormalize_kept_weights_ref(const std::vector<uint8_t>& kept, int64_t num_tokens, int top_k,
                                         std::vector<float>& weight) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    double total = 0.0, kept_sum = 0.0;
    int dropped = 0;
    for (int j = 0; j < top_k; ++j) {
      total += weight[t * top_k + j];
      if (kept[t * top_k + j]) {
        kept_sum += weight[t * top_k + j];
      } else {
        ++dropped;
      }
    }
    if (dropped == 0 || kept_sum <= 0.0) continue;
    for (int j = 0; j < top_k; ++j) {
      if (kept[t * top_k + j]) weight[t * top_k + j] = static_cast<float>(weight[t * top_k + j] * (total / kept_sum));
    }
  }
}

}  // namespace moesim
