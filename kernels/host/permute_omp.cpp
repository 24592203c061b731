// Host instantiation of the dispatch permutation (kernels/permute.hpp) on Thrust's serial C++ backend with
// a counting-sort overload of its sort hook, plus the Routing and DispatchPlan checks that the entry points
// of both backends share (kernels/cuda/*.cu call them too). Routing in, DispatchPlan out (integers).
// Deterministic: a stable sort and binary searches, equal to plan_dispatch_ref at any thread count.
// Host only (g++). Covered by tests/dispatch/permute_test.cpp; timed by tests/bench (permutation).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "kernels/moe_layer.hpp"
#include "kernels/permute.hpp"

namespace moesim {

namespace {

using SerialPolicy = std::decay_t<decltype(thrust::cpp::par)>;

// Stable counting sort of (key, value) pairs with keys in [0, bound]: a histogram, an exclusive scan,
// then a scatter in input order, so equal keys keep their input order (what thrust::stable_sort_by_key
// gives). O(n + bound) time, n + bound + 1 extra space.
void counting_sort_pairs(int32_t* keys, int32_t* values, int64_t n, int64_t bound) {
  if (n <= 1) return;
  std::vector<int64_t> next(static_cast<size_t>(bound + 2), 0);  // next[k + 1] counts key k, then starts
  for (int64_t i = 0; i < n; ++i) ++next[keys[i] + 1];
  for (int64_t k = 0; k <= bound; ++k) next[k + 1] += next[k];
  std::vector<int32_t> sorted_values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) sorted_values[next[keys[i]]++] = values[i];
  // next[k] now ends key k's run.
  int64_t begin = 0;
  for (int64_t k = 0; k <= bound; ++k) {
    std::fill(keys + begin, keys + next[k], static_cast<int32_t>(k));
    begin = next[k];
  }
  std::copy(sorted_values.begin(), sorted_values.end(), values);
}

}  // namespace

// The sort hook of kernels/permute.hpp for the serial host policy (an exact policy type: overload
// resolution prefers it to the generic Thrust template, found through SortKeyBound). Keys are expert ids
// (bound = E) or token ids, so a counting sort is linear where Thrust's merge sort is n log n.
void stable_sort_small_keys(const SerialPolicy&, int32_t* keys, int32_t* values, int64_t n, SortKeyBound bound) {
  counting_sort_pairs(keys, values, n, bound.value);
}

void require_valid_routing(const Routing& r) {
  const int64_t n = r.num_assignments();
  MOESIM_REQUIRE(r.num_experts >= 1, "routing needs num_experts >= 1, got " << r.num_experts);
  MOESIM_REQUIRE(r.num_tokens >= 0, "routing num_tokens must be >= 0, got " << r.num_tokens);
  MOESIM_REQUIRE(r.capacity >= 0, "routing capacity must be >= 0, got " << r.capacity);
  MOESIM_REQUIRE(static_cast<int64_t>(r.token.size()) == n && static_cast<int64_t>(r.weight.size()) == n &&
                     static_cast<int64_t>(r.kept.size()) == n,
                 "routing arrays disagree: expert " << n << ", token " << r.token.size() << ", weight "
                                                    << r.weight.size() << ", kept " << r.kept.size());
  MOESIM_REQUIRE(n < std::numeric_limits<int32_t>::max() && r.num_tokens < std::numeric_limits<int32_t>::max(),
                 "routing too large for 32-bit row indices: " << n << " assignments");
  for (int64_t i = 0; i < n; ++i) {
    MOESIM_REQUIRE(r.token[i] >= 0 && r.token[i] < r.num_tokens,
                   "assignment " << i << " has token " << r.token[i] << " outside [0, " << r.num_tokens << ")");
    MOESIM_REQUIRE(!r.kept[i] || (r.expert[i] >= 0 && r.expert[i] < r.num_experts),
                   "kept assignment " << i << " has expert " << r.expert[i] << " outside [0, " << r.num_experts
                                      << ")");
  }
}

void require_plan_matches(const Routing& r, const DispatchPlan& plan) {
  MOESIM_REQUIRE(plan.num_experts == r.num_experts,
                 "dispatch plan has " << plan.num_experts << " experts, routing " << r.num_experts);
  MOESIM_REQUIRE(static_cast<int64_t>(plan.padded_offsets.size()) == plan.num_experts + 1 &&
                     plan.padded_offsets[plan.num_experts] == plan.rows &&
                     static_cast<int64_t>(plan.row_assignment.size()) == plan.rows,
                 "dispatch plan is inconsistent: rows " << plan.rows << ", row_assignment "
                                                        << plan.row_assignment.size());
  MOESIM_REQUIRE(static_cast<int64_t>(plan.order.size()) == plan.num_kept,
                 "dispatch plan is inconsistent: num_kept " << plan.num_kept << ", order " << plan.order.size());
  for (int32_t a : plan.row_assignment) {
    MOESIM_REQUIRE(a >= -1 && a < r.num_assignments(), "dispatch plan row holds assignment " << a
                                                           << ", routing has " << r.num_assignments());
  }
}

int64_t layout_capacity(const Routing& r, const std::vector<int64_t>& counts) {
  int64_t capacity = r.capacity;
  if (capacity == 0) {
    for (int64_t c : counts) capacity = std::max(capacity, c);
  }
  for (size_t e = 0; e < counts.size(); ++e) {
    MOESIM_REQUIRE(counts[e] <= capacity, "capacity layout: expert " << e << " keeps " << counts[e]
                                                                     << " assignments, over capacity " << capacity);
  }
  return capacity;
}

namespace {

// The plan on one Thrust policy (callers have checked the routing and block size).
template <class Policy>
DispatchPlan plan_dispatch_with(const Policy& policy, const Routing& r, Layout layout, int block_size) {
  const int num_experts = r.num_experts;
  const int64_t n = r.num_assignments();

  DispatchPlan plan;
  plan.num_experts = num_experts;
  plan.layout = layout;
  plan.offsets.resize(num_experts + 1);
  plan.counts.resize(num_experts);
  plan.padded_offsets.resize(num_experts + 1);

  std::vector<int32_t> sorted_keys(n);
  std::vector<int32_t> order(n);
  permute_by_expert(policy, r.expert.data(), r.kept.data(), n, num_experts, sorted_keys.data(), order.data(),
                    plan.offsets.data());
  expert_counts(policy, plan.offsets.data(), num_experts, plan.counts.data());
  plan.num_kept = plan.offsets[num_experts];

  const int64_t capacity = layout == Layout::capacity ? layout_capacity(r, plan.counts) : 0;
  pad_offsets(policy, plan.offsets.data(), num_experts, layout, block_size, capacity, plan.padded_offsets.data());
  plan.rows = plan.padded_offsets[num_experts];

  plan.row_assignment.resize(plan.rows);
  fill_row_assignment(policy, sorted_keys.data(), order.data(), plan.num_kept, plan.offsets.data(),
                      plan.padded_offsets.data(), plan.rows, plan.row_assignment.data());
  order.resize(plan.num_kept);
  plan.order = std::move(order);
  return plan;
}

}  // namespace

DispatchPlan plan_dispatch_omp(const Routing& r, Layout layout, int block_size) {
  require_valid_routing(r);
  MOESIM_REQUIRE(layout != Layout::block || block_size >= 1, "block layout needs block_size >= 1, got " << block_size);
  // The plan is a few integer passes over the assignments (the counting sort about 1 ms per 2^19 on one
  // core), so it runs on the calling thread at every size: each OpenMP fork/join of a Thrust call can
  // cost a scheduler tick (about 4 ms) when the machine's cores are busy, and the sort's scatter is
  // bound by memory latency, not by cores. Measured on 2 busy cores: Thrust's OpenMP stable sort took
  // 31 ms for 2^19 keys, the serial counting sort 0.9 ms; a two-thread counting sort was slower than the
  // serial one up to 2^23 keys (tests/bench permutation cases time the whole plan).
  return plan_dispatch_with(thrust::cpp::par, r, layout, block_size);
}

}  // namespace moesim
