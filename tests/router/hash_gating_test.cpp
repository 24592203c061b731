// Tests of hash gating (router/hash_gating.hpp, hash_gating_ref.hpp): route_omp against route_ref over
// the sweep, the documented hash and forward probing, and that the experts are a function of the
// token id alone (not of position, batch, seed or logits).
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "src/common/counter_rng.hpp"
#include "router/route.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;

using test::kBoth;
using test::kNames;
using test::RouteFn;

RouterConfig hash() {
  RouterConfig cfg;
  cfg.gating = Gating::hash;
  return cfg;
}

int32_t slot_hash(int64_t id, int slot, int num_e) {
  return static_cast<int32_t>(counter_hash(kHashGatingKey, kStreamHashBase + slot, static_cast<uint64_t>(id)) % num_e);
}

TEST(HashGating, OmpMatchesReferenceOnSweep) {
  RouterConfig c = hash();
  c.routed_scaling_factor = 3.0;
  test::sweep_omp_against_ref({hash(), c}, 505);
}

TEST(HashGating, FirstSlotIsTheHashOfTheTokenId) {
  const std::vector<int64_t> ids = {0, 1, 2, 31999, 12345, 7, 7};
  RouteRequest req = make_request({}, 7, 60, 1);
  req.token_ids = ids.data();
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](hash(), req, nullptr);
    for (int t = 0; t < 7; ++t) {
      EXPECT_EQ(r.expert[t], slot_hash(ids[t], 0, 60)) << kNames[b] << " id " << ids[t];
      EXPECT_FLOAT_EQ(r.weight[t], 1.0f);
    }
  }
}

TEST(HashGating, CollisionProbesForwardToTheNextFreeExpert) {
  // Find ids whose slot-1 hash equals their slot-0 hash under E = 3 (about one id in three).
  int found = 0;
  std::vector<int64_t> ids;
  for (int64_t id = 0; found < 4 && id < 1000; ++id) {
    if (slot_hash(id, 0, 3) == slot_hash(id, 1, 3)) {
      ids.push_back(id);
      ++found;
    }
  }
  ASSERT_EQ(found, 4);
  RouteRequest req = make_request({}, 4, 3, 3);
  req.token_ids = ids.data();
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](hash(), req, nullptr);
    for (int t = 0; t < 4; ++t) {
      const int32_t e0 = slot_hash(ids[t], 0, 3);
      EXPECT_EQ(r.expert[t * 3], e0) << kNames[b];
      EXPECT_EQ(r.expert[t * 3 + 1], (e0 + 1) % 3) << kNames[b] << " id " << ids[t];
      // k == E: the three slots are a permutation of the experts.
      EXPECT_EQ(r.expert[t * 3] + r.expert[t * 3 + 1] + r.expert[t * 3 + 2], 3) << kNames[b];
      for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(r.weight[t * 3 + j], 1.0f / 3.0f);
    }
  }
}

TEST(HashGating, DependsOnlyOnTheTokenId) {
  std::vector<int64_t> ids(50);
  for (int t = 0; t < 50; ++t) ids[t] = (t * 37) % 11;  // repeated ids at different positions
  const std::vector<float> logits_a = test::random_logits(50, 8, 1);
  const std::vector<float> logits_b = test::random_logits(50, 8, 2);
  RouteRequest a = make_request(logits_a, 50, 8, 2, 1);
  a.token_ids = ids.data();
  RouteRequest b = make_request(logits_b, 50, 8, 2, 99);
  b.token_ids = ids.data();
  const Routing ra = route_omp(hash(), a, nullptr);
  const Routing rb = route_omp(hash(), b, nullptr);
  EXPECT_EQ(ra.expert, rb.expert);
  for (int t = 0; t < 50; ++t) {
    for (int u = 0; u < t; ++u) {
      if (ids[t] != ids[u]) continue;
      EXPECT_EQ(ra.expert[t * 2], ra.expert[u * 2]);
      EXPECT_EQ(ra.expert[t * 2 + 1], ra.expert[u * 2 + 1]);
    }
  }
  // Slot 0 does not depend on k.
  RouteRequest one = a;
  one.top_k = 1;
  const Routing r1 = route_omp(hash(), one, nullptr);
  for (int t = 0; t < 50; ++t) EXPECT_EQ(r1.expert[t], ra.expert[t * 2]);
}

TEST(HashGating, NullIdsHashTheTokenIndex) {
  std::vector<int64_t> index(20);
  for (int t = 0; t < 20; ++t) index[t] = t;
  RouteRequest with = make_request({}, 20, 8, 2);
  with.token_ids = index.data();
  const RouteRequest without = make_request({}, 20, 8, 2);
  EXPECT_EQ(route_omp(hash(), with, nullptr).expert, route_omp(hash(), without, nullptr).expert);
}

TEST(HashGating, SpreadsDistinctIdsEvenly) {
  std::vector<int64_t> ids(8000);
  for (int t = 0; t < 8000; ++t) ids[t] = t;
  RouteRequest req = make_request({}, 8000, 16, 2);
  req.token_ids = ids.data();
  const Routing r = route_omp(hash(), req, nullptr);
  // 16000 assignments over 16 experts: 1000 each on average, binomial std ~ 31.
  for (int64_t load : test::expert_loads(r)) {
    EXPECT_GT(load, 850);
    EXPECT_LT(load, 1150);
  }
}

}  // namespace
}  // namespace moesim
