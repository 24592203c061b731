// Tests of capacity and drop policies (router/capacity.hpp, capacity_ref.hpp): the capacity formula,
// hand-worked kept masks for every drop policy and both priorities, per-sequence capacity,
// renormalisation after drops, and the template against the reference on random assignments.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <thrust/system/omp/execution_policy.h>

#include "router/capacity.hpp"
#include "router/capacity_ref.hpp"
#include "src/common/counter_rng.hpp"
#include "router/route.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;

struct Case {
  std::vector<int32_t> expert;
  std::vector<float> weight;
  int64_t num_tokens;
  int top_k;
  int num_experts;
};

// N 4, k 2, E 2, token-major:
//   i:      0    1    2    3    4    5    6    7
//   token:  0    0    1    1    2    2    3    3
//   expert: 0    1    0    1    1    0    0    1
//   weight: .6   .4   .7   .3   .8   .2   .9   .1
// Expert 0 holds i 0, 2, 5, 6; expert 1 holds i 1, 3, 4, 7.
const Case kHand = {{0, 1, 0, 1, 1, 0, 0, 1}, {.6f, .4f, .7f, .3f, .8f, .2f, .9f, .1f}, 4, 2, 2};

std::vector<uint8_t> kept_omp(const Case& c, int64_t capacity, int64_t scope, DropPolicy drop, Priority priority,
                              uint64_t seed = 0) {
  const int64_t m = c.num_tokens * c.top_k;
  std::vector<int64_t> perm(m), segment(m), rank(m);
  std::vector<uint8_t> kept(m, 7);
  apply_capacity(thrust::omp::par, c.expert.data(), c.weight.data(), c.num_tokens, c.top_k, c.num_experts, capacity,
                 scope, drop, priority, seed, kept.data(), CapacityScratch{perm.data(), segment.data(), rank.data()});
  return kept;
}

std::vector<uint8_t> kept_ref(const Case& c, int64_t capacity, int64_t scope, DropPolicy drop, Priority priority,
                              uint64_t seed = 0) {
  std::vector<uint8_t> kept;
  apply_capacity_ref(c.expert, c.weight, c.num_tokens, c.top_k, c.num_experts, capacity, scope, drop, priority, seed,
                     kept);
  return kept;
}

void expect_kept(const Case& c, int64_t capacity, int64_t scope, DropPolicy drop, Priority priority,
                 const std::vector<uint8_t>& want) {
  EXPECT_EQ(kept_omp(c, capacity, scope, drop, priority), want)
      << "omp " << to_string(drop) << " " << to_string(priority) << " C " << capacity << " scope " << scope;
  EXPECT_EQ(kept_ref(c, capacity, scope, drop, priority), want)
      << "ref " << to_string(drop) << " " << to_string(priority) << " C " << capacity << " scope " << scope;
}

TEST(Capacity, FormulaMatchesTheFrameworks) {
  RouterConfig cfg;
  EXPECT_EQ(expert_capacity(cfg, 1000, 2, 8), 0);  // cf 0: dropless
  cfg.min_capacity = 4;
  EXPECT_EQ(expert_capacity(cfg, 1000, 2, 8), 0);  // ... whatever min_capacity says
  cfg.min_capacity = 0;
  cfg.capacity_factor = 1.25;
  EXPECT_EQ(expert_capacity(cfg, 8, 2, 8), 3);      // ceil(2.5)
  EXPECT_EQ(expert_capacity(cfg, 1024, 2, 8), 320);  // exact: 1.25 * 256
  cfg.capacity_factor = 1.0;
  EXPECT_EQ(expert_capacity(cfg, 7, 2, 3), 5);  // ceil(4.67)
  EXPECT_EQ(expert_capacity(cfg, 1, 1, 60), 1);
  cfg.capacity_factor = 1.1;
  EXPECT_EQ(expert_capacity(cfg, 100, 1, 1), 110);  // 1.1 * 100 is 110.00000000000001 in binary
  cfg.capacity_factor = 0.25;
  cfg.min_capacity = 3;
  EXPECT_EQ(expert_capacity(cfg, 4, 2, 2), 3);  // ceil(1) raised to min_capacity
}

TEST(Capacity, PositionKMajorKeepsFirstChoicesFirst) {
  // k-major order: slot 0 of t0..t3 (i 0, 2, 4, 6), then slot 1 (i 1, 3, 5, 7).
  // Expert 0 sees i 0, 2, 6, 5 -> keeps 0, 2. Expert 1 sees i 4, 1, 3, 7 -> keeps 4, 1.
  expect_kept(kHand, 2, 0, DropPolicy::position, Priority::k_major, {1, 1, 1, 0, 1, 0, 0, 0});
}

TEST(Capacity, PositionTokenMajorKeepsEarlierTokensFirst) {
  // Token order: expert 0 sees i 0, 2, 5, 6 -> keeps 0, 2; expert 1 sees 1, 3, 4, 7 -> keeps 1, 3.
  expect_kept(kHand, 2, 0, DropPolicy::position, Priority::token_major, {1, 1, 1, 1, 0, 0, 0, 0});
}

TEST(Capacity, ScoreKeepsTheHighestWeights) {
  // Expert 0: .9 (i6), .7 (i2) kept; .6, .2 dropped. Expert 1: .8 (i4), .4 (i1) kept.
  for (Priority p : {Priority::k_major, Priority::token_major}) {
    expect_kept(kHand, 2, 0, DropPolicy::score, p, {0, 1, 1, 0, 1, 0, 1, 0});
  }
}

TEST(Capacity, ScoreTiesFollowThePriorityOrder) {
  Case ties = kHand;
  std::fill(ties.weight.begin(), ties.weight.end(), 0.5f);
  expect_kept(ties, 2, 0, DropPolicy::score, Priority::k_major, {1, 1, 1, 0, 1, 0, 0, 0});
  expect_kept(ties, 2, 0, DropPolicy::score, Priority::token_major, {1, 1, 1, 1, 0, 0, 0, 0});
}

TEST(Capacity, RandomKeepsTheSmallestCounterHashes) {
  for (uint64_t seed : {1ull, 2ull, 3ull}) {
    // Expected: per expert, the two assignments with the smallest counter_hash(seed, kStreamRandomDrop, i).
    std::vector<uint8_t> want(8, 0);
    for (int e = 0; e < 2; ++e) {
      std::vector<int64_t> mine;
      for (int64_t i = 0; i < 8; ++i) {
        if (kHand.expert[i] == e) mine.push_back(i);
      }
      std::sort(mine.begin(), mine.end(), [&](int64_t a, int64_t b) {
        return counter_hash(seed, kStreamRandomDrop, a) < counter_hash(seed, kStreamRandomDrop, b);
      });
      want[mine[0]] = want[mine[1]] = 1;
    }
    for (Priority p : {Priority::k_major, Priority::token_major}) {
      EXPECT_EQ(kept_omp(kHand, 2, 0, DropPolicy::random, p, seed), want) << "seed " << seed;
      EXPECT_EQ(kept_ref(kHand, 2, 0, DropPolicy::random, p, seed), want) << "seed " << seed;
    }
  }
}

TEST(Capacity, SequenceScopeAppliesCapacityPerSequence) {
  // Sequences {t0, t1} and {t2, t3}, C = 1 per expert per sequence, k-major:
  // seq 0: e0 sees i 0, 2 -> 0; e1 sees i 1, 3 -> 1. seq 1: e0 sees i 6, 5 -> 6; e1 sees i 4, 7 -> 4.
  expect_kept(kHand, 1, 2, DropPolicy::position, Priority::k_major, {1, 1, 0, 0, 1, 0, 1, 0});
  // Token-major: seq 0: e0 -> 0, e1 -> 1; seq 1: e0 sees 5, 6 -> 5; e1 sees 4, 7 -> 4.
  expect_kept(kHand, 1, 2, DropPolicy::position, Priority::token_major, {1, 1, 0, 0, 1, 1, 0, 0});
  // A short last sequence: sequences of 3 tokens {t0, t1, t2} and {t3}; C = 1.
  // seq 0 k-major: e0 sees 0, 2, 5 -> 0; e1 sees 4, 1, 3 -> 4. seq 1: t3 keeps both (6, 7).
  expect_kept(kHand, 1, 3, DropPolicy::position, Priority::k_major, {1, 0, 0, 0, 1, 0, 1, 1});
}

TEST(Capacity, CapacityAtOrAboveDemandKeepsEverything) {
  for (int64_t c : {4, 5, 100}) {
    for (DropPolicy d : {DropPolicy::position, DropPolicy::score, DropPolicy::random}) {
      expect_kept(kHand, c, 0, d, Priority::k_major, std::vector<uint8_t>(8, 1));
    }
  }
  expect_kept(kHand, 0, 0, DropPolicy::position, Priority::k_major, std::vector<uint8_t>(8, 1));  // dropless
}

TEST(Capacity, ThroughRouteWithTokenChoice) {
  // Logits that make token choice produce kHand's experts: t0, t1, t3 prefer e0, t2 prefers e1.
  const std::vector<float> logits = {1.f, 0.f, 1.f, 0.f, 0.f, 1.f, 1.f, 0.f};
  RouterConfig cfg;
  cfg.capacity_factor = 0.5;  // C = ceil(0.5 * 4 * 2 / 2) = 2
  for (auto fn : {&route_omp, &route_ref}) {
    cfg.priority = Priority::k_major;
    Routing r = fn(cfg, make_request(logits, 4, 2, 2), nullptr);
    EXPECT_EQ(r.expert, kHand.expert);
    EXPECT_EQ(r.capacity, 2);
    EXPECT_EQ(r.kept, (std::vector<uint8_t>{1, 1, 1, 0, 1, 0, 0, 0}));
    cfg.priority = Priority::token_major;
    r = fn(cfg, make_request(logits, 4, 2, 2), nullptr);
    EXPECT_EQ(r.kept, (std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0, 0}));
    // capacity_scope sequence with 2-token sequences: C = ceil(0.5 * 2 * 2 / 2) = 1 per sequence.
    cfg.priority = Priority::k_major;
    cfg.capacity_scope = CapacityScope::sequence;
    RouteRequest req = make_request(logits, 4, 2, 2);
    req.sequence_length = 2;
    r = fn(cfg, req, nullptr);
    EXPECT_EQ(r.capacity, 1);
    EXPECT_EQ(r.kept, (std::vector<uint8_t>{1, 1, 0, 0, 1, 0, 1, 0}));
    cfg.capacity_scope = CapacityScope::batch;
  }
}

TEST(Capacity, RenormalizeAfterDropRestoresEachTokensTotal) {
  // k-major, C 2: kept 1 1 1 0 1 0 0 0. t0 keeps both: unchanged. t1 keeps .7 of 1.0 -> 1.0.
  // t2 keeps .8 of 1.0 -> 1.0. t3 keeps nothing: unchanged. Dropped weights are left as they were.
  const std::vector<uint8_t> kept = {1, 1, 1, 0, 1, 0, 0, 0};
  const std::vector<float> want = {.6f, .4f, 1.f, .3f, 1.f, .2f, .9f, .1f};
  std::vector<float> w = kHand.weight;
  renormalize_kept_weights(thrust::omp::par, kept.data(), 4, 2, w.data());
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(w[i], want[i], 1e-6) << i;
  std::vector<float> w_ref = kHand.weight;
  renormalize_kept_weights_ref(kept, 4, 2, w_ref);
  EXPECT_EQ(w, w_ref);
  // A token whose weights summed to .5 before the drop keeps .5 after it.
  std::vector<float> half = {.3f, .2f};
  const std::vector<uint8_t> first = {1, 0};
  renormalize_kept_weights(thrust::omp::par, first.data(), 1, 2, half.data());
  EXPECT_NEAR(half[0], .5, 1e-6);
}

TEST(Capacity, TemplateMatchesReferenceOnRandomAssignments) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 gen(seed);
    Case c;
    c.num_tokens = 1 + static_cast<int64_t>(gen() % 300);
    c.num_experts = 1 + static_cast<int>(gen() % 12);
    c.top_k = 1 + static_cast<int>(gen() % c.num_experts);
    // Skewed distinct experts per token, and weights with many exact ties (multiples of 1/8).
    for (int64_t t = 0; t < c.num_tokens; ++t) {
      std::vector<int32_t> row(c.num_experts);
      std::iota(row.begin(), row.end(), 0);
      std::shuffle(row.begin() + 1, row.end(), gen);
      for (int j = 0; j < c.top_k; ++j) {
        c.expert.push_back(row[j]);
        c.weight.push_back(static_cast<float>(gen() % 8) / 8.0f);
      }
    }
    const int64_t capacity = 1 + static_cast<int64_t>(gen() % (c.num_tokens / 2 + 2));
    const int64_t scope = seed % 3 == 0 ? 1 + static_cast<int64_t>(gen() % 17) : 0;
    for (DropPolicy d : {DropPolicy::position, DropPolicy::score, DropPolicy::random}) {
      for (Priority p : {Priority::k_major, Priority::token_major}) {
        const std::vector<uint8_t> got = kept_omp(c, capacity, scope, d, p, seed);
        ASSERT_EQ(got, kept_ref(c, capacity, scope, d, p, seed))
            << "seed " << seed << " N " << c.num_tokens << " E " << c.num_experts << " k " << c.top_k << " C "
            << capacity << " scope " << scope << " " << to_string(d) << " " << to_string(p);
        // Every (sequence, expert) keeps min(C, demand).
        const int64_t seqs = scope > 0 ? (c.num_tokens + scope - 1) / scope : 1;
        std::vector<int64_t> demand(seqs * c.num_experts, 0), kept(seqs * c.num_experts, 0);
        for (int64_t i = 0; i < c.num_tokens * c.top_k; ++i) {
          const int64_t s = scope > 0 ? (i / c.top_k) / scope : 0;
          ++demand[s * c.num_experts + c.expert[i]];
          kept[s * c.num_experts + c.expert[i]] += got[i];
        }
        for (size_t g = 0; g < demand.size(); ++g) ASSERT_EQ(kept[g], std::min(demand[g], capacity)) << "seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace moesim
