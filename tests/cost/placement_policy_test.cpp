// Tests the expert-parallel placement policies of src/cost/placement (docs/cost-model.md "Expert
// placement"): DeepSeek EPLB's global and hierarchical rebalance_experts against its published README
// example and hand-worked cases (R = 0 packing, real-valued replica loads, ties, the E + R == D identity
// case), round_robin and map, spread_replicas, the precondition errors, and invariants over random loads
// (seeds printed). Host only.
#include "src/cost/placement.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "src/common/error.hpp"

namespace moesim {
namespace {

PlacementConfig policy(PlacementPolicy pol, int devices, int replicas = 0, int groups = 1, int nodes = 1) {
  PlacementConfig p;
  p.kind = PlacementKind::expert_parallel;
  p.policy = pol;
  p.devices = devices;
  p.replicas = replicas;
  p.groups = groups;
  p.nodes = nodes;
  return p;
}

double max_over_mean(const std::vector<double>& v) { return 1.0 / balancedness_of(v); }

// deepseek-ai/EPLB README: 2 layers of 12 experts, 16 physical experts, 4 groups, 2 nodes, 8 GPUs.
const std::vector<std::vector<int64_t>> kReadmeWeight = {
    {90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
    {20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27}};

TEST(PlacementPolicy, EplbReadmeExampleHierarchical) {
  // The README's printed phy2log of rebalance_experts(weight, 16, 4, 2, 8) (groups % nodes == 0: the
  // hierarchical policy), both layers.
  const std::vector<std::vector<int32_t>> phy2log = {{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
                                                     {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}};
  for (size_t layer = 0; layer < 2; ++layer) {
    SCOPED_TRACE(::testing::Message() << "layer " << layer);
    const ExpertPlacement p = place_experts(kReadmeWeight[layer], policy(PlacementPolicy::hierarchical, 8, 4, 4, 2));
    EXPECT_EQ(p.expert, phy2log[layer]);
    for (size_t i = 0; i < p.expert.size(); ++i) {
      EXPECT_EQ(p.device[i], static_cast<int>(i / 2));  // 2 slots per GPU, GPU-major
      EXPECT_EQ(p.node[i], static_cast<int>(i / 8));    // 4 GPUs per node
    }
    // logcnt: every expert's slots.
    for (int e = 0; e < 12; ++e)
      EXPECT_EQ(p.replicas[e], std::count(p.expert.begin(), p.expert.end(), e)) << "expert " << e;
  }
}

TEST(PlacementPolicy, EplbReadmeExampleGlobal) {
  // Layer 0 under the global policy (one group, one node), by hand. Replicas: 183 (e10) -> 91.5, then
  // 165 (e5) -> 82.5, 132 (e1) -> 66, 104 (e4) -> 52: slots 12..15 = e10, e5, e1, e4. Packing the 16 slots
  // heaviest first, 2 per GPU: 91.5 (s10) d0, 91.5 (s12) d1, 90 d2, 86 d3, 82.5 (s5) d4, 82.5 (s13) d5,
  // 73 d6, 66 (s1) d7; then 66 (s14) d7 = 132, 61 d6 = 134, 56 d4 = 138.5, 52 (s4) d5 = 134.5, 52 (s15)
  // d3 = 138, 40 d2 = 130, 39 d0 = 130.5, 4 d1 = 95.5.
  const ExpertPlacement p = place_experts(kReadmeWeight[0], policy(PlacementPolicy::global, 8, 4));
  EXPECT_EQ(p.expert, (std::vector<int32_t>{10, 6, 10, 7, 0, 2, 11, 4, 5, 9, 5, 4, 8, 3, 1, 1}));
  EXPECT_EQ(p.replicas, (std::vector<int32_t>{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1}));
  EXPECT_EQ(device_plan_load(p), (std::vector<double>{130.5, 95.5, 130, 138, 138.5, 134.5, 134, 132}));
  // Per-GPU max/mean: 138.5 / (1033 / 8) = 1.073 global; the hierarchical plan's busiest GPU holds
  // experts 0 and 1 (90 + 66), 1.208.
  EXPECT_NEAR(max_over_mean(device_plan_load(p)), 138.5 / 129.125, 1e-12);
  EXPECT_NEAR(max_over_mean(device_plan_load(p)), 1.073, 5e-4);
  const ExpertPlacement h0 = place_experts(kReadmeWeight[0], policy(PlacementPolicy::hierarchical, 8, 4, 4, 2));
  EXPECT_NEAR(max_over_mean(device_plan_load(h0)), 156.0 / 129.125, 1e-12);
  EXPECT_NEAR(max_over_mean(device_plan_load(h0)), 1.208, 5e-4);
  // EPLB's greedy puts both replicas of expert 1 on GPU 7: reported, not hidden.
  EXPECT_EQ(colocated_replicas(p), 2);
  // Layer 1: the hierarchical policy gives expert 1 two replicas where the global one does not (each
  // node replicates its own experts), and a worse per-GPU balance.
  const ExpertPlacement g1 = place_experts(kReadmeWeight[1], policy(PlacementPolicy::global, 8, 4));
  const ExpertPlacement h1 = place_experts(kReadmeWeight[1], policy(PlacementPolicy::hierarchical, 8, 4, 4, 2));
  EXPECT_NE(g1.replicas, h1.replicas);
  EXPECT_EQ(h1.replicas[1], 2);
  EXPECT_EQ(g1.replicas[1], 1);
  EXPECT_LT(max_over_mean(device_plan_load(g1)), max_over_mean(device_plan_load(h1)));
}

TEST(PlacementPolicy, GlobalPacksByLoadWithoutReplicas) {
  // Loads [4, 3, 2, 1] on 2 devices: 4 -> d0, 3 -> d1, 2 -> d1 (3 < 4), 1 -> d0: [5, 5], max/mean 1.00;
  // round-robin puts 4 + 2 on d0: [6, 4], 1.20.
  const std::vector<int64_t> load = {4, 3, 2, 1};
  const ExpertPlacement g = place_experts(load, policy(PlacementPolicy::global, 2));
  EXPECT_EQ(g.expert, (std::vector<int32_t>{0, 3, 1, 2}));
  EXPECT_EQ(g.device, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(device_plan_load(g), (std::vector<double>{5, 5}));
  EXPECT_DOUBLE_EQ(max_over_mean(device_plan_load(g)), 1.0);
  const ExpertPlacement rr = place_experts(load, policy(PlacementPolicy::round_robin, 2));
  EXPECT_EQ(rr.device, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(max_over_mean(device_plan_load(rr)), 1.2);
}

TEST(PlacementPolicy, RealValuedReplicaLoads) {
  // Loads [5, 3, 2, 1], R = 2, D = 3. Replicas: 5 -> e0 (2.5 each), then 3 -> e1 (1.5 each). Slots
  // [e0 2.5, e1 1.5, e2 2, e3 1, e0 2.5, e1 1.5], heaviest first (ties: lower slot): s0 d0, s4 d1, s2 d2,
  // s1 d2 (3.5, full), s5 d0 (tie 2.5: lower device; 4, full), s3 d1 (3.5). Device loads [4, 3.5, 3.5]:
  // max/mean 4 / (11 / 3) = 1.091 (integer replica loads, 3 + 2 and 2 + 1, would order them otherwise).
  const ExpertPlacement p = place_experts({5, 3, 2, 1}, policy(PlacementPolicy::global, 3, 2));
  EXPECT_EQ(p.replicas, (std::vector<int32_t>{2, 2, 1, 1}));
  EXPECT_EQ(p.expert, (std::vector<int32_t>{0, 1, 0, 3, 2, 1}));
  EXPECT_EQ(p.plan_load, (std::vector<double>{2.5, 1.5, 2.5, 1, 2, 1.5}));
  EXPECT_EQ(device_plan_load(p), (std::vector<double>{4, 3.5, 3.5}));
  EXPECT_NEAR(max_over_mean(device_plan_load(p)), 12.0 / 11.0, 1e-12);
  EXPECT_NEAR(max_over_mean(device_plan_load(p)), 1.091, 5e-4);
  // The executed splits stay integers: e0's 5 as 3 (slot 0) + 2 (slot 2), e1's 3 as 2 (slot 1) + 1 (slot 5).
  EXPECT_EQ(p.load, (std::vector<int64_t>{3, 2, 2, 1, 2, 1}));
}

TEST(PlacementPolicy, IdentityWhenOneSlotPerDevice) {
  // E + R == D: EPLB puts slot p on GPU p without sorting. Loads [1, 5, 2], R = 1: the extra slot goes to
  // e1, slots [e0, e1, e2, e1] on devices 0..3 (sorting would have put an e1 slot first).
  const ExpertPlacement p = place_experts({1, 5, 2}, policy(PlacementPolicy::global, 4, 1));
  EXPECT_EQ(p.expert, (std::vector<int32_t>{0, 1, 2, 1}));
  EXPECT_EQ(p.device, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(device_plan_load(p), (std::vector<double>{1, 2.5, 2, 2.5}));
  // E == D without replicas is round-robin's placement too.
  const ExpertPlacement q = place_experts({9, 1, 5, 3}, policy(PlacementPolicy::global, 4));
  EXPECT_EQ(q.device, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(PlacementPolicy, TiesGoToLowerSlotAndLowerDevice) {
  // Equal loads: slots in order (a stable sort), each onto the lower of equally loaded devices.
  const ExpertPlacement p = place_experts({2, 2, 2, 2}, policy(PlacementPolicy::global, 2));
  EXPECT_EQ(p.expert, (std::vector<int32_t>{0, 2, 1, 3}));
  // A replica tie goes to the lower expert: [3, 3] with one extra slot -> e0.
  const ExpertPlacement q = place_experts({3, 3}, policy(PlacementPolicy::global, 3, 1));
  EXPECT_EQ(q.replicas, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(q.expert, (std::vector<int32_t>{0, 1, 0}));
  // All-zero loads: every extra replica ties, and goes to expert 0.
  const ExpertPlacement z = place_experts({0, 0, 0, 0}, policy(PlacementPolicy::global, 2, 2));
  EXPECT_EQ(z.replicas, (std::vector<int32_t>{3, 1, 1, 1}));
}

TEST(PlacementPolicy, HierarchicalPacksGroupsOntoNodesByHand) {
  // E = 4 in 2 groups ({0, 1} = 3, {2, 3} = 9), 2 nodes, 4 devices, R = 0. One group per node: the
  // identity (group 0 on node 0). Within a node, one expert per device: identity again.
  const ExpertPlacement p = place_experts({1, 2, 4, 5}, policy(PlacementPolicy::hierarchical, 4, 0, 2, 2));
  EXPECT_EQ(p.expert, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(p.node, (std::vector<int32_t>{0, 0, 1, 1}));
  // E = 8 in 4 groups of 2, 2 nodes, 2 devices (one per node), R = 2. Groups: {0,1} = 10, {2,3} = 2,
  // {4,5} = 7, {6,7} = 5. Packing (2 per node): g0 n0 (10), g2 n1 (7), g3 n1 (12), g1 n0 (12). Node 0's
  // experts in arrival order: 0, 1, 2, 3 (loads 6, 4, 1, 1); node 1's: 4, 5, 6, 7 (4, 3, 3, 2). Each node
  // replicates its own: node 0's extra to e0 (3 each), node 1's to e4 (2 each). One device per node holds
  // the node's 5 slots, in the order the packing sorts them (EPLB sorts even onto one pack): node 0
  // e1 4, e0 3, e0 3, e2 1, e3 1; node 1 e5 3, e6 3, e4 2, e7 2, e4 2.
  const ExpertPlacement q =
      place_experts({6, 4, 1, 1, 4, 3, 3, 2}, policy(PlacementPolicy::hierarchical, 2, 2, 4, 2));
  EXPECT_EQ(q.replicas, (std::vector<int32_t>{2, 1, 1, 1, 2, 1, 1, 1}));
  EXPECT_EQ(q.expert, (std::vector<int32_t>{1, 0, 0, 2, 3, 5, 6, 4, 7, 4}));
  EXPECT_EQ(q.device, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(device_plan_load(q), (std::vector<double>{12, 12}));
  // The same with nodes = 1 and groups = 1 is the global policy.
  const std::vector<int64_t> load = {6, 4, 1, 1, 4, 3, 3, 2};
  EXPECT_EQ(place_experts(load, policy(PlacementPolicy::hierarchical, 2, 2, 1, 1)).expert,
            place_experts(load, policy(PlacementPolicy::global, 2, 2)).expert);
}

TEST(PlacementPolicy, SpreadReplicasForbidsColocation) {
  // [6, 5, 1], R = 1, D = 2: e0 gets the extra slot (3 each). Slots [e0 3, e1 5, e2 1, e0 3], heaviest
  // first: s1 d0 (5), s0 d1 (3), s3 d1 (3 < 5; 6, full), s2 d0 (6). Device 1 holds both replicas of e0.
  // spread_replicas sends s3 to d0 instead (8, full) and s2 to d1 (4): no colocation, for a worse
  // balance (max/mean 1.33 against 1.00).
  PlacementConfig cfg = policy(PlacementPolicy::global, 2, 1);
  const ExpertPlacement plain = place_experts({6, 5, 1}, cfg);
  EXPECT_EQ(plain.expert, (std::vector<int32_t>{1, 2, 0, 0}));
  EXPECT_EQ(device_plan_load(plain), (std::vector<double>{6, 6}));
  EXPECT_EQ(colocated_replicas(plain), 2);
  cfg.spread_replicas = true;
  const ExpertPlacement spread = place_experts({6, 5, 1}, cfg);
  EXPECT_EQ(spread.expert, (std::vector<int32_t>{1, 0, 0, 2}));
  EXPECT_EQ(device_plan_load(spread), (std::vector<double>{8, 4}));
  EXPECT_EQ(colocated_replicas(spread), 0);
  EXPECT_EQ(spread.replicas, plain.replicas);
  // An expert can hold at most D replicas when spread: replication skips it. [100, 1], R = 2, D = 2:
  // e0 takes one extra, e1 the other.
  PlacementConfig two = policy(PlacementPolicy::global, 2, 2);
  two.spread_replicas = true;
  const ExpertPlacement capped = place_experts({100, 1}, two);
  EXPECT_EQ(capped.replicas, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(colocated_replicas(capped), 0);
  // More slots than E x D cannot be spread.
  PlacementConfig over = policy(PlacementPolicy::global, 2, 4);
  over.spread_replicas = true;
  EXPECT_THROW(place_experts({100, 1}, over), ConfigError);
}

TEST(PlacementPolicy, EplbPreconditionsAreConfigErrors) {
  auto message = [](const std::vector<int64_t>& load, const PlacementConfig& c) -> std::string {
    try {
      place_experts(load, c);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  // D must divide E + R.
  EXPECT_NE(message({1, 2, 3, 4, 5, 6, 7, 8}, policy(PlacementPolicy::global, 3, 2)).find("placement.devices"),
            std::string::npos);
  EXPECT_NE(message({1, 2, 3, 4, 5, 6, 7, 8}, policy(PlacementPolicy::global, 3)).find("a divisor of"),
            std::string::npos);
  // Nodes must divide groups, and devices; groups must divide E.
  EXPECT_NE(message({1, 2, 3, 4}, policy(PlacementPolicy::hierarchical, 4, 0, 1, 2)).find("placement.nodes"),
            std::string::npos);
  EXPECT_NE(message({1, 2, 3, 4}, policy(PlacementPolicy::hierarchical, 3, 2, 2, 2)).find("placement.devices"),
            std::string::npos);
  EXPECT_NE(message({1, 2, 3, 4, 5, 6}, policy(PlacementPolicy::hierarchical, 2, 0, 4, 2)).find("placement.groups"),
            std::string::npos);
  // round_robin and map take no replicas; map needs one device per expert.
  EXPECT_NE(message({1, 2}, policy(PlacementPolicy::round_robin, 2, 2)).find("placement.replicas"), std::string::npos);
  PlacementConfig m = policy(PlacementPolicy::map, 2);
  m.map = {0};
  EXPECT_NE(message({1, 2}, m).find("placement.map"), std::string::npos);
  // Round-robin has no divisibility rule: 8 experts on 3 devices.
  EXPECT_EQ(message({1, 2, 3, 4, 5, 6, 7, 8}, policy(PlacementPolicy::round_robin, 3)), "");
}

TEST(PlacementPolicy, MapPlacesEachExpert) {
  PlacementConfig m = policy(PlacementPolicy::map, 2);
  m.map = {1, 1, 0};
  const ExpertPlacement p = place_experts({3, 2, 1}, m);
  EXPECT_EQ(p.expert, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.device, (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(device_plan_load(p), (std::vector<double>{1, 5}));
}

TEST(PlacementPolicy, RandomLoadsKeepInvariants) {
  // Over random loads, both EPLB policies: every expert has a slot and replicas[e] of them, every device
  // holds (E + R) / D slots, the planner's device loads sum to the total, slots are GPU-major, and the
  // executed integer loads sum to each expert's load. Seed printed on failure.
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const int nodes = 1 + static_cast<int>(rng() % 3);
    const int groups = nodes * (1 + static_cast<int>(rng() % 3));
    const int E = groups * (1 + static_cast<int>(rng() % 5));
    const int D = nodes * (1 + static_cast<int>(rng() % 4));
    int R = static_cast<int>(rng() % (E + 1));
    R += (D - (E + R) % D) % D;  // D divides E + R
    const bool hierarchical = rng() % 2 == 0;
    std::vector<int64_t> load(E);
    for (auto& l : load) l = static_cast<int64_t>(rng() % 1000);
    PlacementConfig cfg = hierarchical ? policy(PlacementPolicy::hierarchical, D, R, groups, nodes)
                                       : policy(PlacementPolicy::global, D, R);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " trial " << trial << " E " << E << " R " << R << " D "
                                      << D << " groups " << groups << " nodes " << nodes
                                      << (hierarchical ? " hierarchical" : " global"));
    const ExpertPlacement p = place_experts(load, cfg);
    ASSERT_EQ(p.expert.size(), static_cast<size_t>(E + R));
    std::vector<int> count(D, 0);
    std::vector<int64_t> executed(E, 0);
    for (size_t i = 0; i < p.expert.size(); ++i) {
      ++count[p.device[i]];
      executed[p.expert[i]] += p.load[i];
      EXPECT_EQ(p.device[i], static_cast<int>(i) / ((E + R) / D));
    }
    for (int d = 0; d < D; ++d) EXPECT_EQ(count[d], (E + R) / D);
    for (int e = 0; e < E; ++e) {
      EXPECT_GE(p.replicas[e], 1);
      EXPECT_EQ(p.replicas[e], std::count(p.expert.begin(), p.expert.end(), e));
    }
    EXPECT_EQ(executed, load);
    const std::vector<double> dl = device_plan_load(p);
    const double total = std::accumulate(load.begin(), load.end(), 0.0);
    EXPECT_NEAR(std::accumulate(dl.begin(), dl.end(), 0.0), total, 1e-9 * std::max(1.0, total));
  }
}

}  // namespace
}  // namespace moesim
