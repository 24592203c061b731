// Tests src/train/train_routing: a rank overload's loads worked by hand, forced balance's random routing (near even,
// node-limited for group-limited routers), the capacity each source rank applies, route once and cost many (a
// second layout sharing the segment size routes nothing new), the same loads twice, and the workloads train refuses.
// Host only.
#include "src/train/train_routing.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "src/common/error.hpp"

namespace moesim {
namespace {

Experiment small() {
  Experiment e;
  e.model.experts = 8;
  e.model.top_k = 2;
  e.train.gpus = 8;
  e.train.ep = 4;
  e.train.seq_len = 256;
  e.train.global_batch = 16;
  e.train.routed_micro_batches = 3;
  e.router.capacity_factor = 0;
  return e;
}

TrainLayout layout_of(const Experiment& e) { return train_layout(e.train, train_shape(e.model), 8); }

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(TrainRouting, RankOverloadByHand) {
  // EP 4 of 2 experts each; 4 x 256 tokens x top-2 = 2048 assignments, 512 a rank on the mean. Overload 1.5: rank 0
  // takes 768 (384 per expert), the other three share 1280: 427, 427, 426 (the first of them one more), each split
  // over its two experts: 214 + 213, 214 + 213, 213 + 213.
  Experiment e = small();
  TrainRouter r(e);
  const TrainLoads l = r.loads(*parse_train_routing("rank_overload:1.5"), layout_of(e));
  ASSERT_EQ(l.samples.size(), 1u);
  EXPECT_EQ(l.samples[0].demand, (std::vector<int64_t>{384, 384, 214, 213, 214, 213, 213, 213}));
  EXPECT_EQ(l.samples[0].kept, l.samples[0].demand);
  EXPECT_EQ(r.routed_segments(), 0);
  try {
    r.loads(*parse_train_routing("rank_overload:5"), layout_of(e));
    FAIL() << "an overload above ep";
  } catch (const ConfigError& x) {
    EXPECT_NE(std::string(x.what()).find("train.routing: expected rank_overload:X with X at most train.ep (4)"),
              std::string::npos);
  }
}

TEST(TrainRouting, ForcedBalanceRoutesEachSourceRankOnceAndShares) {
  Experiment e = small();
  TrainRouter r(e);
  const TrainLayout l = layout_of(e);
  const TrainLoads f = r.loads(*parse_train_routing("forced_balance"), l);
  ASSERT_EQ(f.samples.size(), 3u);
  for (const MicroBatchLoads& mb : f.samples) {
    EXPECT_EQ(sum(mb.demand), l.group_tokens * 2);
    for (int64_t x : mb.demand) EXPECT_NEAR(static_cast<double>(x), 2048.0 / 8, 0.25 * 2048 / 8);  // near even
  }
  EXPECT_EQ(r.routed_segments(), 3 * 4);  // 3 micro-batches x 4 source ranks
  // The reference (forced, dropless) is the same segments when the router drops nothing: nothing more is routed.
  const TrainLoads ref = r.reference(l);
  EXPECT_EQ(r.routed_segments(), 12);
  EXPECT_EQ(ref.samples[0].demand, f.samples[0].demand);
  // Another layout with the same segment size (EP 2) reuses them: its micro-batch 0 is segments 0 and 1.
  Experiment e2 = e;
  e2.train.ep = 2;
  const TrainLoads f2 = r.loads(*parse_train_routing("forced_balance"), layout_of(e2));
  EXPECT_EQ(r.routed_segments(), 12);
  EXPECT_EQ(sum(f2.samples[0].demand), 2 * 256 * 2);
  // The same loads from a new router: deterministic.
  TrainRouter again(e);
  EXPECT_EQ(again.loads(*parse_train_routing("forced_balance"), l).samples[2].demand, f.samples[2].demand);
}

TEST(TrainRouting, EachSourceRankDropsAtItsOwnCapacity) {
  // Capacity factor 1 on 256 tokens x top-2 over 8 experts: 64 rows per source rank and expert, 4 x 64 = 256 for
  // the group. A skewed router demands more of its popular experts than that; each keeps at most 256.
  Experiment e = small();
  e.router.capacity_factor = 1.0;
  e.workload.skew = 2.0;
  TrainRouter r(e);
  const TrainLoads l = r.loads(*parse_train_routing("model"), layout_of(e));
  EXPECT_EQ(l.capacity, 256);
  bool dropped = false;
  for (const MicroBatchLoads& mb : l.samples) {
    for (size_t i = 0; i < mb.kept.size(); ++i) {
      EXPECT_LE(mb.kept[i], 256);
      EXPECT_LE(mb.kept[i], mb.demand[i]);
      dropped = dropped || mb.kept[i] < mb.demand[i];
    }
  }
  EXPECT_TRUE(dropped);
  // The reference is dropless whatever the router's capacity.
  EXPECT_EQ(r.reference(layout_of(e)).capacity, 0);
}

TEST(TrainRouting, GroupLimitedRoutersSpanFewNodes) {
  // 256 experts in 8 groups of 32, top-4 groups, EP 64 over nodes of 8 GPUs (4 experts a GPU, 32 a node: one group a
  // node): a token's experts span at most 4 nodes.
  RouterConfig r;
  r.gating = Gating::group_limited;
  r.groups = 8;
  r.topk_groups = 4;
  TrainLayout l;
  l.cfg.ep = 64;
  l.devices_per_node = 8;
  EXPECT_EQ(train_node_limit(r, 256, l), 4);
  l.devices_per_node = 4;  // half a group a node: no limit the all-to-all can use
  EXPECT_EQ(train_node_limit(r, 256, l), 0);
  r.gating = Gating::token_choice;
  l.devices_per_node = 8;
  EXPECT_EQ(train_node_limit(r, 256, l), 0);
}

TEST(TrainRouting, RefusesWorkloadsItCannotRoute) {
  Experiment e = small();
  e.workload.source = WorkloadSource::decoder;
  TrainRouter r(e);
  EXPECT_THROW(r.loads(*parse_train_routing("model"), layout_of(e)), ConfigError);
  // Forced balance reads no workload: it routes.
  EXPECT_EQ(r.loads(*parse_train_routing("forced_balance"), layout_of(e)).samples.size(), 3u);
}

TEST(TrainRouting, RefusesARoutingOfMinutes) {
  // 64 micro-batches of 4 x 2^20 tokens x 8 logits: 2^31 logits, over the bound (2^30).
  Experiment e = small();
  e.train.seq_len = 1 << 20;
  e.train.routed_micro_batches = 64;
  TrainRouter r(e);
  try {
    r.loads(*parse_train_routing("model"), layout_of(e));
    FAIL() << "a routing of 2^31 logits";
  } catch (const ConfigError& x) {
    EXPECT_NE(std::string(x.what()).find("train.routed_micro_batches: expected at most"), std::string::npos) << x.what();
  }
  EXPECT_EQ(r.routed_segments(), 0);
}

TEST(TrainRouting, RoutingSpecsParse) {
  EXPECT_EQ(to_string(*parse_train_routing("power_law:1.2")), "power_law:1.2");
  EXPECT_EQ(to_string(*parse_train_routing("rank_overload:1.25")), "rank_overload:1.25");
  EXPECT_FALSE(parse_train_routing("power_law:1"));
  EXPECT_FALSE(parse_train_routing("power_law:"));
  EXPECT_FALSE(parse_train_routing("rank_overload:0.9"));
  EXPECT_FALSE(parse_train_routing("rank_overload:nan"));
  EXPECT_FALSE(parse_train_routing("balanced"));
}

}  // namespace
}  // namespace moesim
