// Tests src/workload/load_distribution: aiconfigurator's power law (its cap and fix-up worked by hand on
// 4 experts, the sum and the cap on random awkward sizes, the heaviest EP group on rank 0, determinism) and
// the balanced round-robin; and workload.source load_distribution through run, sweep, check and the
// config's errors. Host only.
#include "src/workload/load_distribution.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(LoadDistribution, PowerLawCapAndFixUpOnFourExperts) {
  // T = 2 tokens, k = 3 of E = 4: T k = 6 > E, so the weights come from [1, max(1, 0.8 T)] = [1, 1.6].
  // Whatever the draw, no expert may take more than T = 2 rows and the four must sum to 6: the cap leaves
  // at most 2 each, so at least 3 experts are full, and the loads are a permutation of {2, 2, 2, 0} or
  // {2, 2, 1, 1}.
  for (uint64_t draw = 0; draw < 50; ++draw) {
    std::vector<int64_t> l = power_law_loads(2, 4, 3, 1.2, 1, 7, draw);
    ASSERT_EQ(l.size(), 4u);
    EXPECT_EQ(sum(l), 6) << draw;
    for (int64_t x : l) EXPECT_LE(x, 2) << draw;
    std::sort(l.begin(), l.end());
    EXPECT_TRUE(l == (std::vector<int64_t>{0, 2, 2, 2}) || l == (std::vector<int64_t>{1, 1, 2, 2})) << draw;
  }
  // T = 1, k = 4 of 4: every expert exactly 1 (the cap is 1 and the sum 4).
  EXPECT_EQ(power_law_loads(1, 4, 4, 1.2, 1, 7, 0), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(LoadDistribution, PowerLawSumCapAndDeterminismOnAwkwardSizes) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 257);
    const int k = 1 + static_cast<int>(rng() % std::min(E, 10));
    const int64_t T = 1 + static_cast<int64_t>(rng() % 5000);
    const double alpha = rng() % 2 ? 1.2 : 1.01;
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " E " << E << " k " << k << " T " << T);
    const std::vector<int64_t> l = power_law_loads(T, E, k, alpha, 1, seed, trial);
    EXPECT_EQ(sum(l), T * k);
    for (int64_t x : l) {
      EXPECT_GE(x, 0);
      EXPECT_LE(x, T);
    }
    EXPECT_EQ(l, power_law_loads(T, E, k, alpha, 1, seed, trial));
  }
}

TEST(LoadDistribution, PowerLawPutsTheHeaviestGroupOnRankZero) {
  for (uint64_t draw = 0; draw < 20; ++draw) {
    const std::vector<int64_t> flat = power_law_loads(512, 64, 8, 1.2, 1, 3, draw);
    const std::vector<int64_t> ep = power_law_loads(512, 64, 8, 1.2, 8, 3, draw);
    EXPECT_EQ(sum(ep), sum(flat));
    const auto group = [&](int g) { return std::accumulate(ep.begin() + 8 * g, ep.begin() + 8 * (g + 1), int64_t{0}); };
    for (int g = 1; g < 8; ++g) EXPECT_GE(group(0), group(g)) << draw;
  }
}

TEST(LoadDistribution, PowerLawIsSkewedAndBalancedIsNot) {
  // alpha 1.2 on 128 experts, 4096 tokens x 8: the hottest expert well above the mean of 256.
  const std::vector<int64_t> l = power_law_loads(4096, 128, 8, 1.2, 1, 11, 0);
  EXPECT_GT(*std::max_element(l.begin(), l.end()), 2 * 256);
  const std::vector<int64_t> b = balanced_round_robin_loads(4096, 128, 8);
  EXPECT_EQ(sum(b), 4096 * 8);
  for (int64_t x : b) EXPECT_EQ(x, 256);
}

TEST(LoadDistribution, BalancedRoundRobinByHand) {
  // E 8, k 2, 3 tokens: stride 4; token 0 takes 0 and 4, token 1 takes 1 and 5, token 2 takes 2 and 6.
  EXPECT_EQ(balanced_round_robin_loads(3, 8, 2), (std::vector<int64_t>{1, 1, 1, 0, 1, 1, 1, 0}));
  // E 5, k 2: stride 3; tokens 0..4 take {0,3}, {1,4}, {2,0}, {3,1}, {4,2}: 2 each.
  EXPECT_EQ(balanced_round_robin_loads(5, 5, 2), (std::vector<int64_t>{2, 2, 2, 2, 2}));
  EXPECT_EQ(balanced_round_robin_loads(0, 5, 2), (std::vector<int64_t>{0, 0, 0, 0, 0}));
  // E 8, k 2, 2 tokens (fewer than the stride 4): offsets floor(t 4 / 2) = 0 and 2, so token 0 takes 0
  // and 4, token 1 takes 2 and 6; on 4 ranks of 2 experts each rank holds one active expert, not rank 0 two.
  EXPECT_EQ(balanced_round_robin_loads(2, 8, 2), (std::vector<int64_t>{1, 0, 1, 0, 1, 0, 1, 0}));
  // E 256, k 8, one token: experts 0, 32, ..., 224, so an EP 32 rank of 8 experts holds at most one.
  const std::vector<int64_t> one = balanced_round_robin_loads(1, 256, 8);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(one[static_cast<std::size_t>(e)], e % 32 == 0 ? 1 : 0) << e;
}

TEST(LoadDistribution, BadArgumentsThrow) {
  EXPECT_THROW(power_law_loads(0, 4, 2, 1.2, 1, 0, 0), PreconditionError);
  EXPECT_THROW(power_law_loads(4, 4, 5, 1.2, 1, 0, 0), PreconditionError);
  EXPECT_THROW(power_law_loads(4, 6, 2, 1.2, 4, 0, 0), PreconditionError);
  EXPECT_THROW(power_law_loads(4, 4, 2, 1.0, 1, 0, 0), PreconditionError);
}


Experiment shipped_power_law(int64_t batch, int draws) {
  Experiment e = load_experiment_file(std::string(MOESIM_SOURCE_DIR) + "/configs/experiments/aiconfigurator-power-law.yaml", {});
  e.workload.batch = batch;
  e.workload.batches = draws;
  return e;
}

TEST(LoadDistribution, RunCostsEachDrawAsOneLayerOfOneStep) {
  const Experiment e = shipped_power_law(96, 3);  // 96 x 8 = 768 assignments over 128 experts
  RunOptions keep;
  keep.records = true;
  const RunResult r = run_experiment(e, own_variant(e), keep);
  ASSERT_EQ(r.variants.size(), 1u);
  const VariantResult& v = r.variants[0];
  EXPECT_FALSE(v.executed);
  ASSERT_EQ(v.records.size(), 3u);
  double mean_s = 0;
  for (size_t i = 0; i < 3; ++i) {
    // The draws are the generator's, seeded by workload.seed and numbered by the draw.
    EXPECT_EQ(v.per_batch[i].load, power_law_loads(96, 128, 8, 1.2, 1, e.workload.seed, i));
    EXPECT_EQ(v.records[i].step, 0);
    EXPECT_EQ(v.records[i].layer, static_cast<int>(i));
    EXPECT_EQ(v.records[i].phase, "power_law");
    mean_s += v.records[i].modeled_layer_s / 3;
  }
  // The headline layer is the mean over the draws.
  EXPECT_NEAR(primary_placement(v).cost.actual.quantized_s, mean_s, 1e-12 * mean_s);
  ASSERT_EQ(v.phases.size(), 1u);
  EXPECT_EQ(v.phases[0].phase, "power_law");
}

TEST(LoadDistribution, BalancedRunHasNoImbalanceAndIgnoresTheSeed) {
  Experiment e = shipped_power_law(96, 2);
  e.workload.distribution = LoadDistribution::balanced;
  RunOptions keep;
  keep.records = true;
  const RunResult a = run_experiment(e, own_variant(e), keep);
  e.workload.seed = 12345;
  const RunResult b = run_experiment(e, own_variant(e), keep);
  for (const RunResult* r : {&a, &b}) {
    const VariantResult& v = r->variants[0];
    for (const auto& m : v.per_batch) {
      EXPECT_EQ(m.load, std::vector<int64_t>(128, 6));  // 768 / 128, exactly
      EXPECT_DOUBLE_EQ(m.imbalance, 1.0);
    }
    const ModeledPlacement& p = primary_placement(v);
    EXPECT_EQ(p.cost.erosion.imbalance_s, 0.0);
    EXPECT_EQ(p.cost.erosion.imbalance_tiles_s, 0.0);
    EXPECT_EQ(p.cost.batching_efficiency, 1.0);
  }
  EXPECT_EQ(primary_placement(a.variants[0]).cost.actual.quantized_s,
            primary_placement(b.variants[0]).cost.actual.quantized_s);
}

TEST(LoadDistribution, CliKeysActInSweepAndCheckAndBadValuesExitTwo) {
  const std::string cfg = std::string(MOESIM_SOURCE_DIR) + "/configs/experiments/aiconfigurator-power-law.yaml";
  // alpha = 1 has no truncated power law (its inverse CDF divides by 1 - alpha).
  testing::CliResult c = testing::run_cli("run " + cfg + " --no-execute --set workload.power_law_alpha=1");
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.err.find("workload.power_law_alpha: expected a number > 0 other than 1"), std::string::npos) << c.err;
  c = testing::run_cli("run " + cfg + " --set workload.distribution=zipf");
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_NE(c.err.find("workload.distribution"), std::string::npos) << c.err;
  // The exponent is inert on the balanced round-robin, and says so.
  c = testing::run_cli("run " + cfg + " --set workload.distribution=balanced --set workload.power_law_alpha=1.5");
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("workload.power_law_alpha has no effect with workload.distribution=balanced"), std::string::npos);
  // A sweep over the exponent: a steeper power law puts more on the busiest expert.
  c = testing::run_cli("sweep " + cfg + " --vary workload.power_law_alpha=1.01,2 --set workload.batches=4 --format csv");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("workload.power_law_alpha"), std::string::npos);
  // check: the shipped config's expect: block holds; the balanced round-robin breaks both bounds.
  c = testing::run_cli("check " + cfg);
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
  c = testing::run_cli("check " + cfg + " --set workload.distribution=balanced");
  EXPECT_EQ(c.exit_code, 1) << c.out << c.err;
  EXPECT_NE(c.out.find("batching_efficiency = 1, expected max 0.9"), std::string::npos) << c.out;
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// The fix-up of steps 3 and 4 one row at a time, as the collector runs it: passes over the ep groups in
// order, one row per group that can still take (give) one, to its least-loaded expert below the cap (from
// its most-loaded expert); ties to the lower expert. The water levels and bulk passes of power_law_loads
// must reproduce it (the sum, the cap and every load), on awkward sizes.
std::vector<int64_t> one_row_at_a_time(std::vector<int64_t> load, int ep, int64_t cap, int64_t total) {
  const int per = static_cast<int>(load.size()) / ep;
  const auto least_below = [&](int g) {
    int best = -1;
    for (int e = g * per; e < (g + 1) * per; ++e)
      if (load[e] < cap && (best < 0 || load[e] < load[best])) best = e;
    return best;
  };
  const auto most = [&](int g) {
    int best = -1;
    for (int e = g * per; e < (g + 1) * per; ++e)
      if (load[e] > 0 && (best < 0 || load[e] > load[best])) best = e;
    return best;
  };
  const auto passes = [&](int64_t rows, bool add) {
    while (rows > 0) {
      bool moved = false;
      for (int g = 0; g < ep && rows > 0; ++g) {
        const int e = add ? least_below(g) : most(g);
        if (e < 0) continue;
        load[e] += add ? 1 : -1;
        --rows, moved = true;
      }
      if (!moved) return;
    }
  };
  int64_t overflow = 0;
  for (int64_t& l : load) {
    if (l > cap) overflow += l - cap, l = cap;
  }
  passes(overflow, true);
  const int64_t have = std::accumulate(load.begin(), load.end(), int64_t{0});
  if (have < total) passes(total - have, true);
  if (have > total) passes(have - total, false);
  return load;
}

TEST(LoadDistribution, ByRankFixUpMatchesOneRowAtATime) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    const int ep = 1 + static_cast<int>(rng() % 7);
    const int E = ep * (1 + static_cast<int>(rng() % 9));
    const int64_t cap = 1 + static_cast<int64_t>(rng() % 30);
    const int k = 1 + static_cast<int>(rng() % E);
    const int64_t total = cap * k;  // T k with T = cap
    std::vector<int64_t> load(E);
    const int64_t spread = trial % 2 ? 3 * cap + 2 : 2;  // odd trials: some above the cap; even: mostly 0 and 1
    for (int64_t& l : load) l = static_cast<int64_t>(rng() % static_cast<uint64_t>(spread));
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " trial " << trial << " ep " << ep << " E " << E);
    const std::vector<int64_t> expected = one_row_at_a_time(load, ep, cap, total);
    // Through the public function's steps 3 and 4: the same loads from the same rounded weights.
    std::vector<int64_t> got = load;
    int64_t overflow = 0;
    for (int64_t& l : got) {
      if (l > cap) overflow += l - cap, l = cap;
    }
    add_by_rank(got, ep, cap, overflow);
    const int64_t have = std::accumulate(got.begin(), got.end(), int64_t{0});
    if (have < total) add_by_rank(got, ep, cap, total - have);
    if (have > total) take_by_rank(got, ep, have - total);
    EXPECT_EQ(got, expected);
  }
}

TEST(LoadDistribution, ByRankFixUpSpreadsASparseBatchByHand) {
  // 8 experts on 4 ranks of 2, all rounded to 0, 3 rows short (T = 1, k = 3): passes give one row to
  // ranks 0, 1 and 2, each to its lower expert -> [1 0 | 1 0 | 1 0 | 0 0]. Filled from the lowest experts
  // instead, rank 0 would run both its experts: [1 1 | 1 0 | 0 0 | 0 0].
  std::vector<int64_t> load(8, 0);
  add_by_rank(load, 4, 1, 3);
  EXPECT_EQ(load, (std::vector<int64_t>{1, 0, 1, 0, 1, 0, 0, 0}));
  // Taking 3 rows from [3 1 | 0 0 | 2 2]: pass 1 takes from expert 0 (rank 0) and expert 4 (rank 2; rank 1
  // has none), pass 2 from expert 0 again -> [1 1 | 0 0 | 1 2].
  load = {3, 1, 0, 0, 2, 2};
  take_by_rank(load, 3, 3);
  EXPECT_EQ(load, (std::vector<int64_t>{1, 1, 0, 0, 1, 2}));
  // With ep = 1 the passes are the plain water levels.
  std::vector<int64_t> a{0, 5, 2, 2}, b = a;
  add_by_rank(a, 1, 4, 5);
  fill_least_loaded(b, 4, 5);
  EXPECT_EQ(a, b);
}

TEST(LoadDistribution, PowerLawDecodeBatchActivatesFewLocalExperts) {
  // DeepSeek-V3 at EP 64 (256 experts, 4 a rank), one token of top-8: 8 rows over 256 experts, so the
  // timed rank (the busiest after step 5) holds 1 or 2 of them in almost every draw, never all four from
  // the fix-up alone.
  int four = 0;
  for (uint64_t draw = 0; draw < 64; ++draw) {
    const std::vector<int64_t> l = power_law_loads(1, 256, 8, 1.01, 64, 5, draw);
    ASSERT_EQ(sum(l), 8);
    int active = 0;
    for (int e = 0; e < 4; ++e) active += l[e] > 0;
    EXPECT_GE(active, 1) << draw;
    four += active == 4;
  }
  EXPECT_LE(four, 2);
}


}  // namespace
}  // namespace moesim
