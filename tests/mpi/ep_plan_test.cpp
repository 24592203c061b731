// Tests of the expert-parallel planning functions (src/distributed/ep_layer.hpp), no MPI needed: token
// shares, local routings, the token-local router classification (checked by routing shares), replica
// ranges, and every rank's send plan against the serial exchange reference, exactly, over round-robin,
// uneven maps (a rank holding nothing), EPLB replicas, and edge shapes (0 and 1 tokens, E not a power of
// two, top_k == E, every token on one expert). Part of moesim_tests; tests/mpi/ep_layer_mpi.cpp runs the
// layer itself under mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "src/distributed/ep_layer.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "tests/support/kernel_support.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

TEST(EpPlan, TokenSharesCoverTheBatchInRankOrder) {
  for (int64_t n : {0, 1, 2, 7, 1024, 1025}) {
    for (int ranks : {1, 2, 3, 5, 8}) {
      int64_t next = 0, lo = n, hi = 0;
      for (int r = 0; r < ranks; ++r) {
        const EpTokenShare s = ep_token_share(n, r, ranks);
        EXPECT_EQ(s.begin, next) << "n " << n << " ranks " << ranks << " rank " << r;
        next = s.end;
        lo = std::min(lo, s.size());
        hi = std::max(hi, s.size());
        // The cost model's split of shared-expert tokens: N / D, the first N mod D one more.
        EXPECT_EQ(s.size(), n / ranks + (r < n % ranks ? 1 : 0));
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(hi - lo, 1);
    }
  }
  EXPECT_THROW(ep_token_share(10, 3, 3), PreconditionError);
}

TEST(EpPlan, LocalRoutingsConcatenateToTheGlobalOne) {
  const uint64_t seed = 9101;
  Routing global = test::random_token_choice(seed, 37, 7, 3, 0.2);
  global.capacity = 11;
  for (int ranks : {1, 2, 3, 5}) {
    Routing joined;
    for (int r = 0; r < ranks; ++r) {
      const EpTokenShare s = ep_token_share(global.num_tokens, r, ranks);
      const Routing local = ep_local_routing(global, s);
      EXPECT_EQ(local.num_tokens, s.size());
      EXPECT_EQ(local.capacity, 11);
      for (int64_t a = 0; a < local.num_assignments(); ++a) {
        joined.token.push_back(local.token[a] + static_cast<int32_t>(s.begin));
        joined.expert.push_back(local.expert[a]);
        joined.weight.push_back(local.weight[a]);
        joined.kept.push_back(local.kept[a]);
      }
    }
    EXPECT_EQ(joined.token, global.token) << "seed " << seed << " ranks " << ranks;
    EXPECT_EQ(joined.expert, global.expert);
    EXPECT_EQ(joined.weight, global.weight);
    EXPECT_EQ(joined.kept, global.kept);
  }
}

// The classification is what lets a rank route its own share: for every token-local router, routing a
// share gives exactly the global routing's assignments of that share.
TEST(EpPlan, TokenLocalRoutersGiveTheSameAssignmentsOnAShare) {
  const uint64_t seed = 9102;
  const int64_t n = 50;
  const int num_experts = 8, top_k = 2;
  const std::vector<float> logits = test::random_logits(n, num_experts, seed);
  std::vector<int64_t> ids(n);
  for (int64_t t = 0; t < n; ++t) ids[t] = (t * 7919) % 1000;
  std::vector<RouterConfig> configs(3);
  configs[0].gating = Gating::token_choice;
  configs[1].gating = Gating::group_limited;
  configs[1].groups = 4;
  configs[1].topk_groups = 2;
  configs[2].gating = Gating::hash;
  for (const RouterConfig& cfg : configs) {
    ASSERT_TRUE(ep_routing_is_token_local(cfg)) << to_string(cfg.gating);
    RouteRequest req = test::make_request(logits, n, num_experts, top_k, seed);
    req.token_ids = ids.data();
    const Routing global = route_omp(cfg, req, nullptr);
    for (int r = 0; r < 3; ++r) {
      const EpTokenShare s = ep_token_share(n, r, 3);
      RouteRequest part = req;
      part.logits = logits.data() + s.begin * num_experts;
      part.token_ids = ids.data() + s.begin;
      part.num_tokens = s.size();
      EXPECT_TRUE(test::same_routing(route_omp(cfg, part, nullptr), ep_local_routing(global, s)))
          << to_string(cfg.gating) << " rank " << r << " seed " << seed;
    }
  }
  RouterConfig capped;
  capped.capacity_factor = 1.0;
  EXPECT_FALSE(ep_routing_is_token_local(capped));
  for (Gating g : {Gating::expert_choice, Gating::sinkhorn, Gating::balanced, Gating::random, Gating::noisy_top_k,
                   Gating::aux_free_bias}) {
    RouterConfig cfg;
    cfg.gating = g;
    EXPECT_FALSE(ep_routing_is_token_local(cfg)) << to_string(g);
  }
}

TEST(EpPlan, SlotRangesSplitEachExpertEvenlyOverItsReplicas) {
  PlacementConfig pc;
  pc.kind = PlacementKind::expert_parallel;
  pc.devices = 3;
  pc.replicas = 4;  // EPLB's global policy: 3 ranks divide 5 + 4 slots
  const std::vector<int64_t> load = {100, 7, 0, 31, 2};
  const ExpertPlacement p = place_experts(load, pc);
  std::vector<int64_t> first, count;
  ep_slot_ranges(p, load, first, count);
  // The cost model's split: the same per-slot counts as assign_load.
  EXPECT_EQ(count, p.load);
  std::vector<int64_t> covered(load.size(), 0);
  for (size_t i = 0; i < p.expert.size(); ++i) {
    EXPECT_EQ(first[i], covered[p.expert[i]]) << "slot " << i;
    covered[p.expert[i]] += count[i];
  }
  EXPECT_EQ(covered, load);
}

// Placements of the plan sweep: round-robin, a map leaving the last rank empty, a map piling most
// experts on rank 0, EPLB's global packing without replicas (when the ranks divide E), and EPLB
// replicas (3 or more, so that the ranks divide E + R) planned from the routing's own loads.
std::vector<ExpertPlacement> placements_for(const std::vector<int64_t>& load, int ranks) {
  const int num_experts = static_cast<int>(load.size());
  std::vector<ExpertPlacement> out;
  PlacementConfig pc;
  pc.kind = PlacementKind::expert_parallel;
  pc.devices = ranks;
  pc.policy = PlacementPolicy::round_robin;
  out.push_back(place_experts(load, pc));
  if (ranks > 1) {
    pc.policy = PlacementPolicy::map;
    pc.map.resize(num_experts);
    for (int e = 0; e < num_experts; ++e) pc.map[e] = e % (ranks - 1);
    out.push_back(place_experts(load, pc));
    for (int e = 0; e < num_experts; ++e) pc.map[e] = e < (num_experts * 2 + 2) / 3 ? 0 : 1 + e % (ranks - 1);
    out.push_back(place_experts(load, pc));
    pc.map.clear();
  }
  pc.policy = PlacementPolicy::global;
  if (num_experts % ranks == 0) out.push_back(place_experts(load, pc));
  pc.replicas = 3 + (ranks - (num_experts + 3) % ranks) % ranks;
  out.push_back(place_experts(load, pc));
  return out;
}

TEST(EpPlan, SendPlansMatchTheExchangeReferenceExactly) {
  const uint64_t seed = 9103;
  std::vector<Routing> routings;
  routings.push_back(test::random_token_choice(seed, 0, 4, 2, 0.0));
  routings.push_back(test::random_token_choice(seed + 1, 1, 4, 2, 0.0));
  routings.push_back(test::random_token_choice(seed + 2, 101, 7, 2, 0.1));
  routings.push_back(test::random_token_choice(seed + 3, 40, 5, 5, 0.0));  // top_k == E
  routings.push_back(test::single_expert_routing(33, 6, 4));                // every token on one expert
  routings.push_back(test::expert_choice_routing(seed + 4, 29, 5, 7));      // expert-major listing
  for (size_t ri = 0; ri < routings.size(); ++ri) {
    const Routing& g = routings[ri];
    std::vector<int64_t> load(g.num_experts, 0);
    for (int64_t a = 0; a < g.num_assignments(); ++a) load[g.expert[a]] += g.kept[a];
    for (int ranks : {1, 2, 3, 5}) {
      for (const ExpertPlacement& p : placements_for(load, ranks)) {
        const std::vector<int64_t> ref = ep_exchange_counts_ref(g, p, ranks);
        const int num_slots = static_cast<int>(p.expert.size());
        std::vector<int64_t> first, count;
        ep_slot_ranges(p, load, first, count);
        std::vector<int64_t> prefix(g.num_experts, 0), slot_total(num_slots, 0);
        for (int r = 0; r < ranks; ++r) {
          const Routing local = ep_local_routing(g, ep_token_share(g.num_tokens, r, ranks));
          const DispatchPlan plan = plan_dispatch_omp(local, Layout::dropless, 1);
          const EpSendPlan sp = ep_send_plan(p, plan.counts, prefix, first, count);
          for (int i = 0; i < num_slots; ++i) {
            EXPECT_EQ(sp.slot_rows[i], ref[static_cast<size_t>(r) * num_slots + i])
                << "routing " << ri << " seed " << seed << " ranks " << ranks << " rank " << r << " slot " << i;
            slot_total[i] += sp.slot_rows[i];
          }
          // Each kept assignment is sent once: send_row is a permutation of the expert-major rows.
          std::vector<int64_t> rows = sp.send_row;
          std::sort(rows.begin(), rows.end());
          std::vector<int64_t> want(plan.num_kept);
          std::iota(want.begin(), want.end(), 0);
          EXPECT_EQ(rows, want) << "routing " << ri << " ranks " << ranks << " rank " << r;
          // Rows to each rank, in rank order, sum to what the slots on that rank receive.
          int64_t sent = 0;
          for (int d = 0; d < ranks; ++d) sent += sp.rank_rows[d];
          EXPECT_EQ(sent, plan.num_kept);
          for (int e = 0; e < g.num_experts; ++e) prefix[e] += plan.counts[e];
        }
        EXPECT_EQ(slot_total, count) << "routing " << ri << " ranks " << ranks;  // conservation per slot
      }
    }
  }
}

TEST(EpPlan, PaddedRowsFollowTheCostModelsLayoutRule) {
  EXPECT_EQ(ep_padded_rows(5, Layout::dropless, 64, 0, 1), 5);
  EXPECT_EQ(ep_padded_rows(0, Layout::dropless, 64, 0, 1), 0);
  EXPECT_EQ(ep_padded_rows(5, Layout::block, 4, 0, 1), 8);
  EXPECT_EQ(ep_padded_rows(0, Layout::block, 4, 0, 1), 0);
  EXPECT_EQ(ep_padded_rows(5, Layout::capacity, 64, 12, 1), 12);
  EXPECT_EQ(ep_padded_rows(5, Layout::capacity, 64, 12, 3), 5);   // ceil(12 / 3) = 4 < 5 rows
  EXPECT_EQ(ep_padded_rows(0, Layout::capacity, 64, 13, 2), 7);   // an idle slot still computes its share of C
}

TEST(EpPlan, SlotWeightsCopyTheirExpertsWeights) {
  const ExpertWeights full = make_expert_weights(5, 8, 12, 77);
  PlacementConfig pc;
  pc.kind = PlacementKind::expert_parallel;
  pc.devices = 2;
  pc.replicas = 3;  // EPLB's global policy: 2 ranks divide 5 + 3 slots
  const ExpertPlacement p = place_experts({1, 50, 2, 3, 40}, pc);
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<int32_t> slots = ep_rank_slots(p, rank);
    const ExpertWeights w = ep_slot_weights(full, p, slots);
    ASSERT_EQ(w.num_experts, static_cast<int>(slots.size()));
    const size_t per = 8 * 12;
    for (size_t m = 0; m < slots.size(); ++m) {
      const size_t e = static_cast<size_t>(p.expert[slots[m]]);
      EXPECT_TRUE(std::equal(w.w1.begin() + m * per, w.w1.begin() + (m + 1) * per, full.w1.begin() + e * per));
      EXPECT_TRUE(std::equal(w.w3.begin() + m * per, w.w3.begin() + (m + 1) * per, full.w3.begin() + e * per));
      EXPECT_TRUE(std::equal(w.w2.begin() + m * per, w.w2.begin() + (m + 1) * per, full.w2.begin() + e * per));
    }
  }
}

}  // namespace
}  // namespace moesim
