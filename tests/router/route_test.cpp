// Tests of the router entry points (router/route.hpp, route_driver.hpp, kernels/host/routing_omp.cpp,
// route.cpp): empty input, determinism at 1 and 2 OpenMP threads for every strategy, preconditions,
// the reported capacity, state bookkeeping, and one larger omp-vs-reference run per strategy.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>
#include <omp.h>

#include "src/common/error.hpp"
#include "router/route.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;
using test::random_logits;

// A config exercising every seeded path of `g`: noise, random gating, random drops.
RouterConfig config_for(Gating g) {
  RouterConfig cfg;
  cfg.gating = g;
  cfg.capacity_factor = 1.0;
  cfg.drop_policy = DropPolicy::random;
  cfg.renormalize_after_drop = true;
  if (g == Gating::group_limited || g == Gating::aux_free_bias) {
    cfg.score = ScoreFunction::sigmoid;
    cfg.groups = 4;
    cfg.topk_groups = 2;
    cfg.bias_update_rate = 0.05;
  }
  return cfg;
}

TEST(Route, EmptyInputGivesAnEmptyRouting) {
  for (Gating g : all_gatings()) {
    for (auto fn : {&route_omp, &route_ref}) {
      RouterState state;
      const Routing r = fn(config_for(g), make_request({}, 0, 8, 2), &state);
      EXPECT_EQ(r.num_tokens, 0) << to_string(g);
      EXPECT_EQ(r.num_experts, 8) << to_string(g);
      EXPECT_EQ(r.top_k, 2) << to_string(g);
      EXPECT_EQ(r.num_assignments(), 0) << to_string(g);
      EXPECT_TRUE(r.token.empty() && r.weight.empty() && r.kept.empty()) << to_string(g);
      EXPECT_EQ(state.batches_seen, 0) << to_string(g);
      EXPECT_TRUE(state.expert_bias.empty()) << to_string(g);
    }
  }
}

TEST(Route, SameSeedSameRoutingAtOneAndTwoThreads) {
  const int saved = omp_get_max_threads();
  const uint64_t seed = 1234;
  const std::vector<float> logits = test::skewed_logits(777, 16, seed, 2, 2.0);
  for (Gating g : all_gatings()) {
    RouterState s1, s2;
    std::vector<Routing> runs;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      RouterState& state = threads == 1 ? s1 : s2;
      for (int batch = 0; batch < 2; ++batch) {
        RouteRequest req = make_request(logits, 777, 16, 3, seed);
        req.sequence_length = 100;
        runs.push_back(route_omp(config_for(g), req, &state));
      }
    }
    omp_set_num_threads(saved);
    for (int batch = 0; batch < 2; ++batch) {
      const Routing& a = runs[batch];
      const Routing& b = runs[2 + batch];
      EXPECT_EQ(a.token, b.token) << to_string(g) << " seed " << seed;
      EXPECT_EQ(a.expert, b.expert) << to_string(g) << " seed " << seed;
      EXPECT_EQ(a.kept, b.kept) << to_string(g) << " seed " << seed;
      EXPECT_EQ(a.weight, b.weight) << to_string(g) << " seed " << seed;  // bitwise: no reduction reorders
      EXPECT_EQ(a.capacity, b.capacity) << to_string(g);
    }
    EXPECT_EQ(s1.expert_bias, s2.expert_bias) << to_string(g);
  }
}

TEST(Route, LargerBatchMatchesReferenceForEveryStrategy) {
  const uint64_t seed = 99;
  const std::vector<float> logits = test::skewed_logits(2048, 64, seed, 4, 1.5);
  std::vector<int64_t> ids(2048);
  for (int t = 0; t < 2048; ++t) ids[t] = (t * 131) % 5000;
  for (Gating g : all_gatings()) {
    RouterState s_omp, s_ref;
    RouteRequest req = make_request(logits, 2048, 64, 6, seed);
    req.token_ids = ids.data();
    const Routing got = route_omp(config_for(g), req, &s_omp);
    const Routing want = route_ref(config_for(g), req, &s_ref);
    EXPECT_TRUE(test::same_routing(got, want)) << to_string(g) << " seed " << seed;
    EXPECT_EQ(s_omp.expert_bias, s_ref.expert_bias) << to_string(g);
  }
}

// At N x E >= 2^20 logits route_omp runs the gating on the OpenMP threads (kernels/host/routing_omp.cpp)
// and, at E >= 2 top_k, the lane-maximum candidate filter of select_topk_row on 256-wide rows.
TEST(Route, ParallelPathAtLargeSizeMatchesReferenceForEveryStrategy) {
  const uint64_t seed = 123;
  const int64_t n = 4097;  // 4097 x 256 = 2^20 + 256 logits
  const std::vector<float> logits = test::skewed_logits(n, 256, seed, 16, 1.2);
  for (Gating g : all_gatings()) {
    RouterConfig cfg = config_for(g);
    if (g == Gating::group_limited || g == Gating::aux_free_bias) cfg.groups = 8, cfg.topk_groups = 4;
    RouterState s_omp, s_ref;
    const RouteRequest req = make_request(logits, n, 256, 8, seed);
    const Routing got = route_omp(cfg, req, &s_omp);
    const Routing want = route_ref(cfg, req, &s_ref);
    EXPECT_TRUE(test::same_routing(got, want)) << to_string(g);
  }
}

TEST(Route, ReportsTheCapacityOfItsScope) {
  const std::vector<float> logits = random_logits(100, 8, 3);
  RouterConfig cfg;
  cfg.capacity_factor = 1.0;
  RouteRequest req = make_request(logits, 100, 8, 2);
  req.sequence_length = 10;
  EXPECT_EQ(route_omp(cfg, req, nullptr).capacity, 25);  // ceil(100 * 2 / 8)
  cfg.capacity_scope = CapacityScope::sequence;
  EXPECT_EQ(route_omp(cfg, req, nullptr).capacity, 3);  // ceil(10 * 2 / 8)
  req.sequence_length = 0;                              // no sequence length: the whole batch
  EXPECT_EQ(route_omp(cfg, req, nullptr).capacity, 25);
  cfg.capacity_factor = 0.0;
  EXPECT_EQ(route_omp(cfg, req, nullptr).capacity, 0);
}

TEST(Route, StateCountsBatchesAndOnlyAuxFreeBiasUsesTheBias) {
  const std::vector<float> logits = random_logits(20, 8, 4);
  for (Gating g : all_gatings()) {
    RouterState state;
    for (int b = 0; b < 3; ++b) route_omp(config_for(g), make_request(logits, 20, 8, 2, b), &state);
    EXPECT_EQ(state.batches_seen, 3) << to_string(g);
    EXPECT_EQ(state.expert_bias.size(), g == Gating::aux_free_bias ? 8u : 0u) << to_string(g);
  }
}

TEST(Route, LogitFreeStrategiesAcceptNullLogits) {
  for (Gating g : {Gating::hash, Gating::random, Gating::balanced}) {
    for (auto fn : {&route_omp, &route_ref}) {
      const Routing r = fn(config_for(g), make_request({}, 9, 4, 2, 1), nullptr);
      EXPECT_EQ(r.num_assignments(), 18) << to_string(g);
    }
  }
}

TEST(Route, RejectsBrokenPreconditions) {
  const std::vector<float> logits = random_logits(4, 4, 1);
  RouterConfig cfg;
  for (auto fn : {&route_omp, &route_ref}) {
    EXPECT_THROW(fn(cfg, make_request(logits, 4, 4, 5), nullptr), PreconditionError);  // top_k > E
    EXPECT_THROW(fn(cfg, make_request(logits, 4, 4, 0), nullptr), PreconditionError);  // top_k 0
    EXPECT_THROW(fn(cfg, make_request(logits, 4, 0, 1), nullptr), PreconditionError);  // no experts
    EXPECT_THROW(fn(cfg, make_request({}, 4, 4, 2), nullptr), PreconditionError);      // null logits
    std::vector<float> bad = logits;
    bad[5] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_THROW(fn(cfg, make_request(bad, 4, 4, 2), nullptr), PreconditionError);
    bad[5] = std::numeric_limits<float>::infinity();
    EXPECT_THROW(fn(cfg, make_request(bad, 4, 4, 2), nullptr), PreconditionError);
    RouteRequest req = make_request(logits, 4, 4, 2);
    req.sequence_length = -1;
    EXPECT_THROW(fn(cfg, req, nullptr), PreconditionError);
    RouterConfig c = cfg;
    c.capacity_factor = -1.0;
    EXPECT_THROW(fn(c, make_request(logits, 4, 4, 2), nullptr), PreconditionError);
    c = cfg;
    c.routed_scaling_factor = 0.0;
    EXPECT_THROW(fn(c, make_request(logits, 4, 4, 2), nullptr), PreconditionError);
    c = cfg;
    c.gating = Gating::sinkhorn;
    c.sinkhorn_iterations = 0;
    EXPECT_THROW(fn(c, make_request(logits, 4, 4, 2), nullptr), PreconditionError);
    c = cfg;
    c.gating = Gating::noisy_top_k;
    c.noise_std = -1.0;
    EXPECT_THROW(fn(c, make_request(logits, 4, 4, 2), nullptr), PreconditionError);
  }
}

// The non-finite scan runs in parallel chunks over large inputs; the message must name the first bad
// logit at any thread count, wherever it sits (chunk edges, the last element), and -0, subnormals and
// FLT_MAX are finite.
TEST(Route, NamesTheFirstNonFiniteLogitOfALargeInput) {
  const int64_t n = 1100, e = 256;  // 281600 logits: above the parallel threshold, 69 chunks of 4096
  std::vector<float> logits = random_logits(n, e, 3);
  logits[7] = -0.0f;
  logits[8] = std::numeric_limits<float>::denorm_min();
  logits[9] = std::numeric_limits<float>::max();
  logits[10] = -std::numeric_limits<float>::max();
  RouterConfig cfg;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    EXPECT_NO_THROW(route_omp(cfg, make_request(logits, n, e, 2), nullptr));
    for (int64_t at : {int64_t{0}, int64_t{4095}, int64_t{4096}, int64_t{150000}, n * e - 1}) {
      std::vector<float> bad = logits;
      bad[at] = at % 2 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
      bad[n * e - 1 - (at == n * e - 1 ? 0 : 1)] = std::numeric_limits<float>::infinity();  // a later one too
      try {
        route_omp(cfg, make_request(bad, n, e, 2), nullptr);
        ADD_FAILURE() << "no error for a non-finite logit at " << at;
      } catch (const PreconditionError& err) {
        const std::string want = "logit " + std::to_string(at / e) + "," + std::to_string(at % e) + " is not finite";
        EXPECT_NE(std::string(err.what()).find(want), std::string::npos) << err.what();
      }
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace moesim
