// Tests of token_choice and noisy_top_k gating (router/topk_gating.hpp, topk_gating_ref.hpp):
// route_omp against route_ref over the shape/capacity sweep, hand-worked weights for every weight rule,
// the tie rule, and the noise contract (counter RNG keyed on seed, token, expert; Shazeer weights).
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "src/common/counter_rng.hpp"
#include "router/route.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;
using test::random_logits;

using test::kBoth;
using test::kNames;
using test::RouteFn;

// Hand values below are written in double; the router rounds each weight to float once.
constexpr double kHandTolerance = 1e-6;

double sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }

void expect_routing(const Routing& r, const std::vector<int32_t>& experts, const std::vector<double>& weights,
                    const char* name) {
  ASSERT_EQ(r.expert, experts) << name;
  ASSERT_EQ(r.weight.size(), weights.size()) << name;
  for (size_t i = 0; i < weights.size(); ++i) EXPECT_NEAR(r.weight[i], weights[i], kHandTolerance) << name << " " << i;
  for (size_t i = 0; i < r.kept.size(); ++i) EXPECT_EQ(r.kept[i], 1) << name;
  EXPECT_EQ(r.capacity, 0) << name;
}

// Token 0: logits 1 3 2 0 -> experts 1, 2. Token 1: 0.5 0.5 2 0.5 -> expert 2, then the three-way tie
// at 0.5 goes to the lowest expert, 0.
const std::vector<float> kHandLogits = {1.f, 3.f, 2.f, 0.f, 0.5f, 0.5f, 2.f, 0.5f};
const std::vector<int32_t> kHandExperts = {1, 2, 2, 0};

TEST(TopKGating, OmpMatchesReferenceOnSweep) {
  std::vector<RouterConfig> bases;
  RouterConfig c;
  c.gating = Gating::token_choice;
  bases.push_back(c);  // softmax over all E, no renormalisation (Switch/GShard)
  c.renormalize = true;
  c.routed_scaling_factor = 2.5;
  bases.push_back(c);  // Mixtral-style renormalised, scaled
  c.renormalize = false;
  c.routed_scaling_factor = 1.0;
  c.pre_softmax = false;
  bases.push_back(c);  // top-k on logits, softmax over the k
  c.pre_softmax = true;
  c.score = ScoreFunction::sigmoid;
  c.renormalize = true;
  bases.push_back(c);
  test::sweep_omp_against_ref(bases, 101);
}

TEST(TopKGating, HandWorkedSoftmaxOverAllExperts) {
  RouterConfig cfg;
  const double den0 = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  const double den1 = 3.0 * std::exp(0.5) + std::exp(2.0);
  const std::vector<double> want = {std::exp(3.0) / den0, std::exp(2.0) / den0, std::exp(2.0) / den1,
                                    std::exp(0.5) / den1};
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](cfg, make_request(kHandLogits, 2, 4, 2), nullptr);
    expect_routing(r, kHandExperts, want, kNames[b]);
    EXPECT_EQ(r.token, (std::vector<int32_t>{0, 0, 1, 1})) << kNames[b];
  }
}

TEST(TopKGating, HandWorkedRenormalizedAndPreSoftmaxFalseAgree) {
  const double a = std::exp(3.0) + std::exp(2.0), b = std::exp(2.0) + std::exp(0.5);
  const std::vector<double> want = {std::exp(3.0) / a, std::exp(2.0) / a, std::exp(2.0) / b, std::exp(0.5) / b};
  RouterConfig renorm;
  renorm.renormalize = true;
  RouterConfig post;
  post.pre_softmax = false;
  for (int i = 0; i < 2; ++i) {
    expect_routing(kBoth[i](renorm, make_request(kHandLogits, 2, 4, 2), nullptr), kHandExperts, want, kNames[i]);
    expect_routing(kBoth[i](post, make_request(kHandLogits, 2, 4, 2), nullptr), kHandExperts, want, kNames[i]);
  }
}

TEST(TopKGating, HandWorkedSigmoidAndScaling) {
  RouterConfig cfg;
  cfg.score = ScoreFunction::sigmoid;
  cfg.routed_scaling_factor = 2.5;
  const std::vector<double> raw = {sig(3.0), sig(2.0), sig(2.0), sig(0.5)};
  std::vector<double> want;
  for (double v : raw) want.push_back(2.5 * v);
  cfg.renormalize = true;
  const std::vector<double> want_renorm = {2.5 * raw[0] / (raw[0] + raw[1]), 2.5 * raw[1] / (raw[0] + raw[1]),
                                           2.5 * raw[2] / (raw[2] + raw[3]), 2.5 * raw[3] / (raw[2] + raw[3])};
  for (int b = 0; b < 2; ++b) {
    expect_routing(kBoth[b](cfg, make_request(kHandLogits, 2, 4, 2), nullptr), kHandExperts, want_renorm, kNames[b]);
  }
  cfg.renormalize = false;
  for (int b = 0; b < 2; ++b) {
    expect_routing(kBoth[b](cfg, make_request(kHandLogits, 2, 4, 2), nullptr), kHandExperts, want, kNames[b]);
  }
}

TEST(TopKGating, TiesGoToLowerExpert) {
  // Row 0: all equal -> 0, 1, 2. Row 1: 2 at experts 4 and 1, 1 at 3 and 0 -> 1, 4, 0.
  const std::vector<float> logits = {0.f, 0.f, 0.f, 0.f, 0.f, 1.f, 2.f, -1.f, 1.f, 2.f};
  for (int b = 0; b < 2; ++b) {
    for (ScoreFunction score : {ScoreFunction::softmax, ScoreFunction::sigmoid}) {
      RouterConfig cfg;
      cfg.score = score;
      const Routing r = kBoth[b](cfg, make_request(logits, 2, 5, 3), nullptr);
      EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 2, 1, 4, 0})) << kNames[b];
    }
  }
}

TEST(TopKGating, TopKEqualsExpertsTakesEveryExpertInScoreOrder) {
  const std::vector<float> logits = random_logits(7, 5, 11);
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](RouterConfig{}, make_request(logits, 7, 5, 5), nullptr);
    for (int64_t t = 0; t < 7; ++t) {
      double sum = 0.0;
      for (int j = 0; j < 5; ++j) {
        sum += r.weight[t * 5 + j];
        if (j > 0) {
          EXPECT_GE(logits[t * 5 + r.expert[t * 5 + j - 1]], logits[t * 5 + r.expert[t * 5 + j]]) << kNames[b];
          EXPECT_GE(r.weight[t * 5 + j - 1], r.weight[t * 5 + j]) << kNames[b];
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-6) << kNames[b] << " token " << t;  // the softmax over all E, all taken
    }
  }
}

TEST(TopKGating, AllTokensOnOneExpert) {
  std::vector<float> logits(16 * 6, 0.f);
  for (int t = 0; t < 16; ++t) logits[t * 6 + 4] = 5.f;
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](RouterConfig{}, make_request(logits, 16, 6, 1), nullptr);
    EXPECT_EQ(test::expert_loads(r), (std::vector<int64_t>{0, 0, 0, 0, 16, 0})) << kNames[b];
    // Capacity overflow: C = ceil(16 / 6) = 3, so expert 4 keeps tokens 0, 1, 2 and drops the rest.
    RouterConfig cfg;
    cfg.capacity_factor = 1.0;
    const Routing capped = kBoth[b](cfg, make_request(logits, 16, 6, 1), nullptr);
    EXPECT_EQ(capped.capacity, 3) << kNames[b];
    EXPECT_EQ(test::expert_loads(capped), (std::vector<int64_t>{0, 0, 0, 0, 3, 0})) << kNames[b];
    for (int t = 0; t < 16; ++t) EXPECT_EQ(capped.kept[t], t < 3 ? 1 : 0) << kNames[b];
  }
}

TEST(NoisyTopK, OmpMatchesReferenceOnSweep) {
  std::vector<RouterConfig> bases;
  RouterConfig c;
  c.gating = Gating::noisy_top_k;
  c.noise_std = 1.0;
  bases.push_back(c);
  c.noise_std = 0.3;
  c.routed_scaling_factor = 1.5;
  bases.push_back(c);
  test::sweep_omp_against_ref(bases, 202);
}

TEST(NoisyTopK, ZeroNoiseIsTopKThenSoftmaxOverTheChosen) {
  const std::vector<float> logits = random_logits(33, 8, 5);
  RouterConfig noisy;
  noisy.gating = Gating::noisy_top_k;
  noisy.noise_std = 0.0;
  RouterConfig plain;
  plain.pre_softmax = false;
  for (int b = 0; b < 2; ++b) {
    const Routing a = kBoth[b](noisy, make_request(logits, 33, 8, 2, 9), nullptr);
    const Routing c = kBoth[b](plain, make_request(logits, 33, 8, 2, 9), nullptr);
    EXPECT_TRUE(test::same_routing(a, c)) << kNames[b];
  }
}

TEST(NoisyTopK, SelectionIsTopKOfLogitsPlusCounterNoise) {
  const int64_t n = 40;
  const int num_e = 6, k = 2;
  const uint64_t seed = 77;
  const std::vector<float> logits = random_logits(n, num_e, 3);
  RouterConfig cfg;
  cfg.gating = Gating::noisy_top_k;
  cfg.noise_std = 2.0;
  for (int b = 0; b < 2; ++b) {
    const Routing r = kBoth[b](cfg, make_request(logits, n, num_e, k, seed), nullptr);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> h(num_e);
      for (int e = 0; e < num_e; ++e) {
        h[e] = logits[t * num_e + e] + 2.0 * counter_normal(seed, kStreamNoise, static_cast<uint64_t>(t * num_e + e));
      }
      int best = 0, second = -1;
      for (int e = 1; e < num_e; ++e) {
        if (h[e] > h[best]) best = e;
      }
      for (int e = 0; e < num_e; ++e) {
        if (e != best && (second < 0 || h[e] > h[second])) second = e;
      }
      ASSERT_EQ(r.expert[t * k], best) << kNames[b] << " token " << t;
      ASSERT_EQ(r.expert[t * k + 1], second) << kNames[b] << " token " << t;
      const double w0 = 1.0 / (1.0 + std::exp(h[second] - h[best]));
      EXPECT_NEAR(r.weight[t * k], w0, kHandTolerance) << kNames[b];
      EXPECT_NEAR(r.weight[t * k + 1], 1.0 - w0, kHandTolerance) << kNames[b];
    }
  }
}

TEST(NoisyTopK, SameSeedSameRoutingOtherSeedDiffers) {
  const std::vector<float> logits = random_logits(200, 8, 4);
  RouterConfig cfg;
  cfg.gating = Gating::noisy_top_k;
  const Routing a = route_omp(cfg, make_request(logits, 200, 8, 2, 1), nullptr);
  const Routing b = route_omp(cfg, make_request(logits, 200, 8, 2, 1), nullptr);
  const Routing c = route_omp(cfg, make_request(logits, 200, 8, 2, 2), nullptr);
  EXPECT_EQ(a.expert, b.expert);
  EXPECT_EQ(a.weight, b.weight);
  EXPECT_NE(a.expert, c.expert);
}

}  // namespace
}  // namespace moesim
