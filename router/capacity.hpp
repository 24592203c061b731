// Expert capacity and drop policies for token-choice routings. In: expert, weight [num_tokens * top_k]
// token-major. Out: kept [num_tokens * top_k] (1 processed, 0 dropped); optionally the kept weights
// rescaled. One comparison sort under a total order (no ties left) and an integer segmented scan:
// deterministic at any thread count and backend. Backend-neutral (Thrust policy first);
// twin: capacity_ref.hpp; test: tests/router/capacity_test.cpp.
#pragma once

#include <cmath>
#include <cstdint>

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/constant_iterator.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include "src/common/portability.hpp"
#include "src/config/experiment.hpp"
#include "src/common/counter_rng.hpp"

namespace moesim {

// C = max(ceil(cf * tokens * k / E), min_capacity) for cf > 0 (Megatron get_capacity, DeepSpeed
// topkgating with its cf -> k*cf, GShard); 0 (dropless) for cf <= 0, whatever min_capacity says.
// `tokens` is the batch (capacity_scope batch) or one sequence (capacity_scope sequence, MaxText).
// rounding decimal: the quotient is shrunk by a relative 1e-12 before the ceiling so that a product that
// is an integer in decimal (1.1 * 100 = 110.00000000000001 in binary) does not gain a slot.
// rounding float64: Megatron's get_capacity (megatron/core/transformer/moe/moe_utils.py), the ceiling of
// the double (tokens * k / E) * cf as Python computes it, which does gain that slot: N = 400, E = 8, k = 2,
// cf = 1.1 gives 111 where decimal gives 110.
MOESIM_HD inline int64_t capacity_from_factor(double capacity_factor, int64_t tokens, int top_k, int num_experts,
                                              int64_t min_capacity,
                                              CapacityRounding rounding = CapacityRounding::decimal) {
  if (!(capacity_factor > 0.0)) return 0;
  int64_t c = 0;
  if (rounding == CapacityRounding::float64) {
    const double per_expert = static_cast<double>(tokens * static_cast<int64_t>(top_k)) / static_cast<double>(num_experts);
    c = static_cast<int64_t>(ceil(per_expert * capacity_factor));
  } else {
    const double x = capacity_factor * static_cast<double>(tokens) * static_cast<double>(top_k) /
                     static_cast<double>(num_experts);
    c = static_cast<int64_t>(ceil(x * (1.0 - 1e-12)));
  }
  return c < min_capacity ? min_capacity : c;
}

// Scratch of apply_capacity, caller-owned.
struct CapacityScratch {
  int64_t* perm;     // [num_assignments] assignments in (segment, priority) order
  int64_t* segment;  // [num_assignments]
  int64_t* rank;     // [num_assignments] position within the segment
};

namespace router_detail {

// The total order of the capacity sort: segment (sequence * E + expert) first, then the drop policy's
// key, then the priority rank, which is unique, so the sorted order is unique.
struct CapacityOrder {
  const int32_t* expert;
  const float* weight;
  int64_t num_tokens;
  int top_k;
  int num_experts;
  int64_t scope_tokens;  // tokens per sequence; 0: the whole batch is one segment per expert
  DropPolicy drop_policy;
  Priority priority;
  uint64_t seed;

  MOESIM_HD int64_t segment(int64_t i) const {
    const int64_t seq = scope_tokens > 0 ? (i / top_k) / scope_tokens : 0;
    return seq * num_experts + expert[i];
  }
  // k_major: every slot-0 assignment in token order, then every slot 1, ... (GShard, Tutel, fairseq).
  // token_major: assignment order, each token's slots in turn (MaxText).
  MOESIM_HD int64_t priority_rank(int64_t i) const {
    return priority == Priority::token_major ? i : (i % top_k) * num_tokens + i / top_k;
  }
  MOESIM_HD bool operator()(int64_t a, int64_t b) const {
    const int64_t sa = segment(a), sb = segment(b);
    if (sa != sb) return sa < sb;
    if (drop_policy == DropPolicy::score) {
      if (weight[a] != weight[b]) return weight[a] > weight[b];
    } else if (drop_policy == DropPolicy::random) {
      const uint64_t ha = counter_hash(seed, kStreamRandomDrop, static_cast<uint64_t>(a));
      const uint64_t hb = counter_hash(seed, kStreamRandomDrop, static_cast<uint64_t>(b));
      if (ha != hb) return ha < hb;
    }
    return priority_rank(a) < priority_rank(b);
  }
};

struct SegmentOf {
  CapacityOrder order;
  MOESIM_HD int64_t operator()(int64_t i) const { return order.segment(i); }
};

struct KeepFirst {
  const int64_t* perm;
  const int64_t* rank;
  int64_t capacity;
  uint8_t* kept;
  MOESIM_HD void operator()(int64_t p) const { kept[perm[p]] = rank[p] < capacity ? 1 : 0; }
};

struct RescaleKept {
  const uint8_t* kept;
  int top_k;
  float* weight;
  MOESIM_HD void operator()(int64_t t) const {
    double total = 0.0, kept_sum = 0.0;
    bool any_dropped = false;
    for (int j = 0; j < top_k; ++j) {
      const double w = weight[t * top_k + j];
      total += w;
      if (kept[t * top_k + j]) {
        kept_sum += w;
      } else {
        any_dropped = true;
      }
    }
    if (!any_dropped || !(kept_sum > 0.0)) return;
    const double factor = total / kept_sum;
    for (int j = 0; j < top_k; ++j) {
      if (kept[t * top_k + j]) weight[t * top_k + j] = static_cast<float>(weight[t * top_k + j] * factor);
    }
  }
};

}  // namespace router_detail

// Marks which assignments each expert keeps under capacity C (per expert per sequence when
// scope_tokens > 0; tokens past the last full sequence form a shorter last sequence).
//  position: the first C in priority order (k_major or token_major).
//  score:    the C highest weights; equal weights: earlier in priority order.
//  random:   the first C in a random order keyed on (seed, assignment) (counter hash; no two keys
//            are equal); that order does not depend on priority.
// capacity 0: dropless, everything kept. kept: [num_tokens * top_k].
template <class Policy>
void apply_capacity(Policy&& policy, const int32_t* expert, const float* weight, int64_t num_tokens, int top_k,
                    int num_experts, int64_t capacity, int64_t scope_tokens, DropPolicy drop_policy, Priority priority,
                    uint64_t seed, uint8_t* kept, const CapacityScratch& scratch) {
  const int64_t m = num_tokens * top_k;
  if (m == 0) return;
  if (capacity <= 0) {
    thrust::fill(policy, kept, kept + m, static_cast<uint8_t>(1));
    return;
  }
  const router_detail::CapacityOrder order{expert,       weight,   num_tokens, top_k, num_experts,
                                           scope_tokens, drop_policy, priority, seed};
  thrust::sequence(policy, scratch.perm, scratch.perm + m);
  thrust::sort(policy, scratch.perm, scratch.perm + m, order);
  thrust::transform(policy, scratch.perm, scratch.perm + m, scratch.segment, router_detail::SegmentOf{order});
  thrust::exclusive_scan_by_key(policy, scratch.segment, scratch.segment + m, thrust::constant_iterator<int64_t>(1),
                                scratch.rank);
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(m),
                   router_detail::KeepFirst{scratch.perm, scratch.rank, capacity, kept});
}

// renormalize_after_drop: for each token that lost some but not all of its assignments, the kept
// weights are multiplied by (sum of all its weights) / (sum of its kept weights), sums in double in
// slot order, so the token's total combine weight is what it was before dropping (1 when renormalize
// was on, times routed_scaling_factor). Dropped assignments keep their weight (kept = 0 marks them);
// a token with nothing kept is left as it is. weight: [num_tokens * top_k], updated in place.
template <class Policy>
void renormalize_kept_weights(Policy&& policy, const uint8_t* kept, int64_t num_tokens, int top_k, float* weight) {
  if (num_tokens == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   router_detail::RescaleKept{kept, top_k, weight});
}

}  // namespace moesim
