// Tests router/balance_metrics: hand-worked E=4, N=8 cases (arithmetic in the comments), drops,
// padding layouts, degenerate shapes, and an independent recomputation of every docs/design.md formula
// on seeded random routings. Host only.
#include "router/balance_metrics.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "src/common/error.hpp"
#include "router/route.hpp"

namespace moesim {
namespace {

// Token-major routing from per-token expert lists; every assignment kept unless kept_mask says not.
Routing make_routing(int64_t num_tokens, int num_experts, int top_k, const std::vector<std::vector<int>>& experts,
                     int64_t capacity = 0, const std::vector<uint8_t>& kept_mask = {}) {
  Routing r;
  r.num_tokens = num_tokens;
  r.num_experts = num_experts;
  r.top_k = top_k;
  r.capacity = capacity;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int e : experts[t]) {
      r.token.push_back(static_cast<int32_t>(t));
      r.expert.push_back(e);
      r.weight.push_back(1.0f / top_k);
    }
  }
  r.kept = kept_mask.empty() ? std::vector<uint8_t>(r.expert.size(), 1) : kept_mask;
  return r;
}

// E=4, N=8, k=2: loads [8, 4, 3, 1]. Every token picks expert 0 first; second choices: tokens 0-3 -> 1,
// tokens 4-6 -> 2, token 7 -> 3.
std::vector<std::vector<int>> skewed_choices() {
  return {{0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 2}, {0, 2}, {0, 2}, {0, 3}};
}

// Logits whose softmax is [1/2, 1/4, 1/8, 1/8] for every token: z = ln [4, 2, 1, 1].
std::vector<float> skewed_logits(int num_tokens) {
  std::vector<float> z;
  for (int t = 0; t < num_tokens; ++t) {
    for (double w : {4.0, 2.0, 1.0, 1.0}) z.push_back(static_cast<float>(std::log(w)));
  }
  return z;
}

// Float logits rounded to float: softmax is exact only to about 1e-7 relative.
constexpr double kLogitTol = 1e-6;

TEST(BalanceMetrics, UniformAssignmentIsPerfectlyBalanced) {
  // E=4, N=8, k=2: token t -> experts (2t mod 4, 2t+1 mod 4), so every expert has load 4.
  std::vector<std::vector<int>> choices;
  for (int t = 0; t < 8; ++t) choices.push_back({(2 * t) % 4, (2 * t + 1) % 4});
  const Routing r = make_routing(8, 4, 2, choices);
  const std::vector<float> logits(8 * 4, 0.0f);  // uniform router: P[e] = 1/4
  const BalanceMetrics m = compute_balance_metrics(r, logits.data(), Layout::dropless, 64);
  EXPECT_EQ(m.load, (std::vector<int64_t>{4, 4, 4, 4}));
  EXPECT_EQ(m.demand, m.load);
  EXPECT_DOUBLE_EQ(m.imbalance, 1.0);  // 4 / (16/4)
  EXPECT_DOUBLE_EQ(m.demand_imbalance, 1.0);
  EXPECT_DOUBLE_EQ(m.cv, 0.0);
  EXPECT_NEAR(m.entropy_norm, 1.0, 1e-15);  // ln 4 / ln 4, summed in 4 terms
  EXPECT_EQ(m.active_experts, 4);
  EXPECT_EQ(m.dead_experts, 0);
  EXPECT_EQ(m.dropped, 0);
  EXPECT_DOUBLE_EQ(m.drop_rate, 0.0);
  EXPECT_EQ(m.tokens_unrouted, 0);
  ASSERT_TRUE(m.has_logits);
  // aux_loss = E * sum_e (demand/N) P = 4 * 4 * (4/8) * (1/4) = 2 = k.
  EXPECT_DOUBLE_EQ(m.aux_loss, 2.0);
  // aux_loss_switch = E * sum_e demand/(N k) * P = 4 * 4 * (4/16) * (1/4) = 1.
  EXPECT_DOUBLE_EQ(m.aux_loss_switch, 1.0);
  // Each token's own top-1 is its first choice, 2t mod 4: counts [4, 0, 4, 0];
  // aux_loss_gshard = 4 * (4/8 * 1/4 + 4/8 * 1/4) = 1.
  EXPECT_DOUBLE_EQ(m.aux_loss_gshard, 1.0);
  // z_loss = (logsumexp of four zeros)^2 = (ln 4)^2 = 1.9218120556728056.
  EXPECT_NEAR(m.z_loss, 1.9218120556728056, 1e-14);
  // ceil(0.2 * 4) = 1 expert on each side, each holding 4 of 16 = 0.25.
  EXPECT_DOUBLE_EQ(m.top20_share, 0.25);
  EXPECT_DOUBLE_EQ(m.bottom20_share, 0.25);
  EXPECT_EQ(m.utilization, (std::vector<double>{1.0, 1.0, 1.0, 1.0}));  // 4 / (8*2/4)
  EXPECT_EQ(m.padding_waste, 0);
}

TEST(BalanceMetrics, SkewedCaseByHand) {
  const Routing r = make_routing(8, 4, 2, skewed_choices());
  const std::vector<float> logits = skewed_logits(8);
  const BalanceMetrics m = compute_balance_metrics(r, logits.data(), Layout::dropless, 64);
  EXPECT_EQ(m.load, (std::vector<int64_t>{8, 4, 3, 1}));
  // mean = 16/4 = 4; imbalance = 8/4 = 2.
  EXPECT_DOUBLE_EQ(m.imbalance, 2.0);
  // deviations 4, 0, -1, -3 -> squares 16 + 0 + 1 + 9 = 26; var = 26/4 = 6.5; cv = sqrt(6.5)/4.
  EXPECT_NEAR(m.cv, 0.6373774391990981, 1e-15);
  // p = [.5, .25, .1875, .0625]; H = .5 ln2 + .25 ln4 + .1875 ln(16/3) + .0625 ln16 = 1.18030455699462;
  // entropy_norm = H / ln 4 = 0.8514097655573916.
  EXPECT_NEAR(m.entropy_norm, 0.8514097655573916, 1e-14);
  EXPECT_EQ(m.active_experts, 4);
  ASSERT_TRUE(m.has_logits);
  // P = [1/2, 1/4, 1/8, 1/8]; demand/N = [1, 1/2, 3/8, 1/8].
  // aux_loss = 4 * (1/2 + 1/8 + 3/64 + 1/64) = 4 * 0.6875 = 2.75.
  EXPECT_NEAR(m.aux_loss, 2.75, 2.75 * kLogitTol);
  // aux_loss_switch = aux_loss / k = 1.375.
  EXPECT_NEAR(m.aux_loss_switch, 1.375, 1.375 * kLogitTol);
  // every token's first choice is expert 0: counts [8,0,0,0]; aux_loss_gshard = 4 * 1 * 1/2 = 2.
  EXPECT_NEAR(m.aux_loss_gshard, 2.0, 2.0 * kLogitTol);
  // logsumexp = ln(4 + 2 + 1 + 1) = ln 8; z_loss = (ln 8)^2 = 4.324077125263812.
  EXPECT_NEAR(m.z_loss, 4.324077125263812, 4.33 * kLogitTol);
  // one expert on each side: top 8/16, bottom 1/16.
  EXPECT_DOUBLE_EQ(m.top20_share, 0.5);
  EXPECT_DOUBLE_EQ(m.bottom20_share, 0.0625);
  // utilization = load / (8*2/4) = load / 4.
  EXPECT_EQ(m.utilization, (std::vector<double>{2.0, 1.0, 0.75, 0.25}));
}

TEST(BalanceMetrics, MaxVioByHand) {
  // MaxVio (Wang et al. 2024, arXiv:2408.15664): (max load - mean load) / mean load.
  // The skewed case: loads [8, 4, 3, 1], mean 16 / 4 = 4: (8 - 4) / 4 = 1 exactly (imbalance 2, minus 1).
  const Routing r = make_routing(8, 4, 2, skewed_choices());
  EXPECT_EQ(compute_balance_metrics(r, nullptr, Layout::dropless, 64).max_vio, 1.0);
  // Loads [3, 2, 1] of 3 tokens at k = 2: mean 2, (3 - 2) / 2 = 0.5; demand is not what it reads.
  const Routing three = make_routing(3, 3, 2, {{0, 1}, {0, 1}, {0, 2}});
  const BalanceMetrics m3 = compute_balance_metrics(three, nullptr, Layout::dropless, 64);
  EXPECT_EQ(m3.load, (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(m3.max_vio, 0.5);
  // Balanced loads give exactly 0 (the numerator is an integer): 4 tokens, k 1, one on each of 4 experts.
  const Routing even = make_routing(4, 4, 1, {{0}, {1}, {2}, {3}});
  EXPECT_EQ(compute_balance_metrics(even, nullptr, Layout::dropless, 64).max_vio, 0.0);
  // Loads [7, 0, 0] on E = 3: mean 7/3, (7 - 7/3) / (7/3) = (21 - 7) / 7 = 2 (E - 1: everything on one expert).
  const BalanceMetrics one = metrics_from_loads({7, 0, 0}, 7, 1);
  EXPECT_EQ(one.max_vio, 2.0);
  // An empty batch has no violation.
  EXPECT_EQ(compute_balance_metrics(make_routing(0, 3, 2, {}), nullptr, Layout::dropless, 64).max_vio, 0.0);
  // Loads [5, 4, 4, 4, 4, 4] (E 6, mean 25/6): (30 - 25) / 25 = 0.2; imbalance - 1 = 30/25 - 1 rounds apart.
  const BalanceMetrics six = metrics_from_loads({5, 4, 4, 4, 4, 4}, 25, 1);
  EXPECT_EQ(six.max_vio, 0.2);
  EXPECT_NEAR(six.imbalance - 1.0, 0.2, 1e-15);
}

TEST(BalanceMetrics, CapacityDropsAndUnroutedTokens) {
  // Every token picks experts 0 and 1 (demand [8, 8, 0, 0]); C = 3 keeps tokens 0-2 on both experts
  // and drops both assignments of tokens 3-7.
  std::vector<std::vector<int>> choices(8, std::vector<int>{0, 1});
  std::vector<uint8_t> kept;
  for (int t = 0; t < 8; ++t) kept.insert(kept.end(), {uint8_t(t < 3), uint8_t(t < 3)});
  const Routing r = make_routing(8, 4, 2, choices, 3, kept);
  const BalanceMetrics m = compute_balance_metrics(r, nullptr, Layout::capacity, 64);
  EXPECT_EQ(m.demand, (std::vector<int64_t>{8, 8, 0, 0}));
  EXPECT_EQ(m.load, (std::vector<int64_t>{3, 3, 0, 0}));
  EXPECT_EQ(m.capacity, 3);
  EXPECT_EQ(m.dropped, 10);                   // (8-3) + (8-3)
  EXPECT_DOUBLE_EQ(m.drop_rate, 10.0 / 16);   // dropped / (N k)
  EXPECT_EQ(m.tokens_unrouted, 5);            // tokens 3..7
  EXPECT_EQ(m.active_experts, 2);
  EXPECT_EQ(m.dead_experts, 2);
  EXPECT_DOUBLE_EQ(m.imbalance, 2.0);         // 3 / (6/4)
  EXPECT_DOUBLE_EQ(m.demand_imbalance, 2.0);  // 8 / (16/4)
  EXPECT_EQ(m.padding_waste, 6);              // E*C - sum(load) = 4*3 - 6
  EXPECT_FALSE(m.has_logits);
  // utilization = load / (16/4): [0.75, 0.75, 0, 0].
  EXPECT_EQ(m.utilization, (std::vector<double>{0.75, 0.75, 0.0, 0.0}));

  // The skewed case with C = 5: expert 0 keeps tokens 0-4; tokens 5-7 keep their second choice.
  std::vector<uint8_t> kept2;
  for (int t = 0; t < 8; ++t) kept2.insert(kept2.end(), {uint8_t(t < 5), 1});
  const Routing r2 = make_routing(8, 4, 2, skewed_choices(), 5, kept2);
  const BalanceMetrics m2 = compute_balance_metrics(r2, nullptr, Layout::capacity, 64);
  EXPECT_EQ(m2.load, (std::vector<int64_t>{5, 4, 3, 1}));
  EXPECT_EQ(m2.dropped, 3);
  EXPECT_DOUBLE_EQ(m2.drop_rate, 3.0 / 16);
  EXPECT_EQ(m2.tokens_unrouted, 0);
  EXPECT_EQ(m2.padding_waste, 4 * 5 - 13);
}

TEST(BalanceMetrics, PaddingWastePerLayout) {
  const Routing r = make_routing(8, 4, 2, skewed_choices());  // load [8, 4, 3, 1]
  EXPECT_EQ(compute_balance_metrics(r, nullptr, Layout::dropless, 4).padding_waste, 0);
  // block 4: round_up -> [8, 4, 4, 4] = 20; 20 - 16 = 4.
  EXPECT_EQ(compute_balance_metrics(r, nullptr, Layout::block, 4).padding_waste, 4);
  // block 3: [9, 6, 3, 3] = 21; 21 - 16 = 5.
  EXPECT_EQ(compute_balance_metrics(r, nullptr, Layout::block, 3).padding_waste, 5);
  // block 1 pads nothing.
  EXPECT_EQ(compute_balance_metrics(r, nullptr, Layout::block, 1).padding_waste, 0);
  // capacity layout of a dropless routing (C = 0): the buffer holds max(load) = 8 rows per expert.
  EXPECT_EQ(compute_balance_metrics(r, nullptr, Layout::capacity, 4).padding_waste, 4 * 8 - 16);
  Routing rc = r;
  rc.capacity = 10;  // 4*10 - 16
  EXPECT_EQ(compute_balance_metrics(rc, nullptr, Layout::capacity, 4).padding_waste, 24);
}

TEST(BalanceMetrics, ZLossMatchesDirectFormula) {
  // Large logits: the direct log(sum(exp)) in long double still fits, and checks the max shift.
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 8.0f);
  const int n = 37, e = 7;
  std::vector<float> logits(n * e);
  for (float& z : logits) z = normal(rng);
  std::vector<std::vector<int>> choices(n, std::vector<int>{3});
  const Routing r = make_routing(n, e, 1, choices);
  const BalanceMetrics m = compute_balance_metrics(r, logits.data(), Layout::dropless, 64);
  long double sum = 0;
  for (int t = 0; t < n; ++t) {
    long double s = 0;
    for (int j = 0; j < e; ++j) s += std::exp(static_cast<long double>(logits[t * e + j]));
    sum += std::log(s) * std::log(s);
  }
  const double expected = static_cast<double>(sum / n);
  EXPECT_NEAR(m.z_loss, expected, 1e-12 * expected);  // double vs long double summation
}

TEST(BalanceMetrics, EmptyBatchAndSingleExpert) {
  const Routing empty = make_routing(0, 3, 2, {});
  const float dummy = 0.0f;
  const BalanceMetrics m = compute_balance_metrics(empty, &dummy, Layout::block, 16);
  EXPECT_EQ(m.load, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(m.imbalance, 1.0);  // documented: an empty batch is not unbalanced
  EXPECT_DOUBLE_EQ(m.demand_imbalance, 1.0);
  EXPECT_DOUBLE_EQ(m.cv, 0.0);
  EXPECT_DOUBLE_EQ(m.entropy_norm, 1.0);
  EXPECT_DOUBLE_EQ(m.drop_rate, 0.0);
  EXPECT_DOUBLE_EQ(m.top20_share, 1.0 / 3);  // ceil(0.6) = 1 of 3 experts
  EXPECT_EQ(m.active_experts, 0);
  EXPECT_EQ(m.dead_experts, 3);
  EXPECT_FALSE(m.has_logits);  // no token to average over
  EXPECT_EQ(m.padding_waste, 0);
  EXPECT_EQ(m.utilization, (std::vector<double>{0.0, 0.0, 0.0}));

  // E = 1, k = 1 (a dense layer): everything on the one expert.
  std::vector<std::vector<int>> choices(5, std::vector<int>{0});
  const Routing one = make_routing(5, 1, 1, choices);
  const std::vector<float> logits(5, 3.0f);
  const BalanceMetrics m1 = compute_balance_metrics(one, logits.data(), Layout::dropless, 64);
  EXPECT_DOUBLE_EQ(m1.imbalance, 1.0);
  EXPECT_DOUBLE_EQ(m1.entropy_norm, 1.0);
  EXPECT_DOUBLE_EQ(m1.aux_loss, 1.0);         // 1 * (5/5) * 1
  EXPECT_DOUBLE_EQ(m1.aux_loss_gshard, 1.0);
  EXPECT_DOUBLE_EQ(m1.z_loss, 9.0);           // logsumexp of one logit 3 is 3
  EXPECT_DOUBLE_EQ(m1.top20_share, 1.0);
  EXPECT_DOUBLE_EQ(m1.bottom20_share, 1.0);
}

TEST(BalanceMetrics, AllTokensOnOneExpertAndTopKEqualsE) {
  // E = 5 (not a power of two), N = 6: all on expert 2.
  std::vector<std::vector<int>> choices(6, std::vector<int>{2});
  const BalanceMetrics m = compute_balance_metrics(make_routing(6, 5, 1, choices), nullptr, Layout::dropless, 1);
  EXPECT_DOUBLE_EQ(m.imbalance, 5.0);             // 6 / (6/5)
  EXPECT_NEAR(m.cv, 2.0, 1e-15);                  // std of [0,0,6,0,0] = sqrt((4*1.44+23.04)/5) = 2.4; / 1.2
  EXPECT_DOUBLE_EQ(m.entropy_norm, 0.0);
  EXPECT_DOUBLE_EQ(m.top20_share, 1.0);
  EXPECT_DOUBLE_EQ(m.bottom20_share, 0.0);
  EXPECT_EQ(m.dead_experts, 4);
  // top_k == E == 3: every expert gets every token: perfectly balanced.
  std::vector<std::vector<int>> all(4, std::vector<int>{2, 0, 1});
  const BalanceMetrics m3 = compute_balance_metrics(make_routing(4, 3, 3, all), nullptr, Layout::dropless, 1);
  EXPECT_DOUBLE_EQ(m3.imbalance, 1.0);
  EXPECT_DOUBLE_EQ(m3.cv, 0.0);
  EXPECT_EQ(m3.utilization, (std::vector<double>{1.0, 1.0, 1.0}));
}

TEST(BalanceMetrics, GshardCountsEachTokensOwnFirstChoice) {
  // Two tokens whose logits tie; the routing chose expert 1 for token 0 and expert 0 for token 1, and
  // those are the top-1 counts, whatever the logits' argmax.
  const std::vector<float> logits = {0.0f, 1.0f, 1.0f, 1.0f, 0.0f, 1.0f};
  const Routing r = make_routing(2, 3, 1, {{1}, {0}});
  const BalanceMetrics m = compute_balance_metrics(r, logits.data(), Layout::dropless, 1);
  // Each row's softmax is [a, b, b] up to order with a = 1/(1+2e), b = e/(1+2e); P = mean of rows.
  const double a = 1.0 / (1.0 + 2.0 * std::exp(1.0)), b = std::exp(1.0) / (1.0 + 2.0 * std::exp(1.0));
  const double p0 = (a + b) / 2, p1 = (b + a) / 2;
  // top-1 counts [1, 1, 0]: gshard = 3 * (p0/2 + p1/2).
  EXPECT_NEAR(m.aux_loss_gshard, 3.0 * (p0 / 2 + p1 / 2), 1e-12);
}

// aux_loss_gshard follows the strategy that routed the batch, worked by hand for three gatings whose
// top-1 differs from the logits' argmax. Every row's logits are ln [3, 1, 1, 1] (E = 4), so P = [1/2, 1/6,
// 1/6, 1/6] and the argmax is expert 0 for every token: the old, strategy-blind form was 4 * 1/2 = 2.
std::vector<float> argmax_zero_logits(int64_t n) {
  std::vector<float> z;
  for (int64_t t = 0; t < n; ++t)
    for (double w : {3.0, 1.0, 1.0, 1.0}) z.push_back(static_cast<float>(std::log(w)));
  return z;
}

// route_ref of `logits` [n, E] under one gating (capacity factor cf, token ids for hash), no state.
Routing route_small(Gating g, const std::vector<float>& logits, int64_t n, int E, int k,
                    const std::vector<int64_t>& token_ids = {}, double cf = 0) {
  RouterConfig cfg;
  cfg.gating = g;
  cfg.capacity_factor = cf;
  RouteRequest req;
  req.logits = logits.data();
  req.num_tokens = n;
  req.num_experts = E;
  req.top_k = k;
  req.token_ids = token_ids.empty() ? nullptr : token_ids.data();
  return route_ref(cfg, req, nullptr);
}

double gshard_of(const Routing& r, const std::vector<float>& logits) {
  return compute_balance_metrics(r, logits.data(), Layout::dropless, 1).aux_loss_gshard;
}

TEST(BalanceMetrics, GshardOfBalancedGatingByHand) {
  // Balanced, k = 1: token t -> expert t mod 4; 8 tokens give top-1 counts [2, 2, 2, 2].
  // gshard = 4 * (2/8 * 1/2 + 3 * 2/8 * 1/6) = 4 * (1/8 + 1/8) = 1.
  const std::vector<float> logits = argmax_zero_logits(8);
  EXPECT_NEAR(gshard_of(route_small(Gating::balanced, logits, 8, 4, 1), logits), 1.0, kLogitTol);
  // k = 2: the first choice of token t is expert 2t mod 4: counts [4, 0, 4, 0];
  // gshard = 4 * (4/8 * 1/2 + 4/8 * 1/6) = 4/3.
  EXPECT_NEAR(gshard_of(route_small(Gating::balanced, logits, 8, 4, 2), logits), 4.0 / 3.0, kLogitTol);
}

TEST(BalanceMetrics, GshardOfHashGatingByHand) {
  // Hash gating is a function of the token id only: four tokens with one id share one expert h, and
  // four with another id share h' (checked below, whatever the hash). With h != h' both 0: counts 4 and
  // 4, gshard = 4 * (4/8 * P[h] + 4/8 * P[h']).
  const std::vector<int64_t> ids = {7, 7, 7, 7, 11, 11, 11, 11};
  const std::vector<float> logits = argmax_zero_logits(8);
  const Routing r = route_small(Gating::hash, logits, 8, 4, 1, ids);
  const int h = r.expert[0], h2 = r.expert[4];
  for (int t = 0; t < 8; ++t) ASSERT_EQ(r.expert[t], t < 4 ? h : h2);
  const double P[4] = {0.5, 1.0 / 6, 1.0 / 6, 1.0 / 6};
  const double want = h == h2 ? 4.0 * P[h] : 4.0 * (0.5 * P[h] + 0.5 * P[h2]);
  EXPECT_NEAR(gshard_of(r, logits), want, kLogitTol);
  // The hash does not look at the logits: unless both ids land on expert 0, the value is not the
  // argmax form's 2.
  if (h != 0 || h2 != 0) EXPECT_LT(want, 2.0 - 1e-3);
}

TEST(BalanceMetrics, GshardOfExpertChoiceByHand) {
  // Expert choice, E = 2, 4 tokens, k = 1: capacity ceil(4 * 1 / 2) = 2 tokens per expert. Logits
  // [3,0], [2,0], [1,0], [0,0]: expert 0 takes the tokens with the highest softmax share, 0 and 1;
  // expert 1 takes 3 (share 1/2) and 2 (share 1 - s(1)). Each token has one expert, so top-1 counts are
  // [2, 2] while the argmax is expert 0 for all four. P0 = (s(3) + s(2) + s(1) + s(0)) / 4, P1 = 1 - P0
  // (s the logistic): gshard = 2 * (2/4 P0 + 2/4 P1) = 1; the argmax form gives 2 P0 = 1.532.
  const std::vector<float> logits = {3, 0, 2, 0, 1, 0, 0, 0};
  const Routing r = route_small(Gating::expert_choice, logits, 4, 2, 1);
  std::vector<int> expert_of(4, -1);
  for (int64_t i = 0; i < r.num_assignments(); ++i) expert_of[r.token[i]] = r.expert[i];
  ASSERT_EQ(expert_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_NEAR(gshard_of(r, logits), 1.0, 1e-6);
  // Capacity factor 0.5: one token per expert (0 and 3); tokens 1 and 2 have no top-1 and count in N
  // only: gshard = 2 * (1/4 P0 + 1/4 P1) = 1/2.
  const Routing half = route_small(Gating::expert_choice, logits, 4, 2, 1, {}, 0.5);
  EXPECT_EQ(compute_balance_metrics(half, logits.data(), Layout::dropless, 1).tokens_unrouted, 2);
  EXPECT_NEAR(gshard_of(half, logits), 0.5, 1e-6);
}

TEST(BalanceMetrics, MetricsFromLoads) {
  const BalanceMetrics m = metrics_from_loads({8, 4, 3, 1}, 8, 2);
  EXPECT_EQ(m.demand, m.load);
  EXPECT_DOUBLE_EQ(m.imbalance, 2.0);
  EXPECT_NEAR(m.cv, 0.6373774391990981, 1e-15);
  EXPECT_NEAR(m.entropy_norm, 0.8514097655573916, 1e-14);
  EXPECT_EQ(m.dropped, 0);
  EXPECT_EQ(m.tokens_unrouted, 0);
  EXPECT_FALSE(m.has_logits);
  EXPECT_EQ(m.utilization, (std::vector<double>{2.0, 1.0, 0.75, 0.25}));
  EXPECT_THROW(metrics_from_loads({}, 1, 1), PreconditionError);
  EXPECT_THROW(metrics_from_loads({1, -1}, 1, 1), PreconditionError);
}

TEST(BalanceMetrics, RejectsBadRouting) {
  Routing r = make_routing(2, 3, 1, {{1}, {2}});
  r.expert[1] = 3;
  EXPECT_THROW(compute_balance_metrics(r, nullptr, Layout::dropless, 1), PreconditionError);
  r = make_routing(2, 3, 1, {{1}, {2}});
  r.token[0] = 2;
  EXPECT_THROW(compute_balance_metrics(r, nullptr, Layout::dropless, 1), PreconditionError);
  r = make_routing(2, 3, 1, {{1}, {2}});
  r.kept.pop_back();
  EXPECT_THROW(compute_balance_metrics(r, nullptr, Layout::dropless, 1), PreconditionError);
  r = make_routing(2, 3, 1, {{1}, {2}});
  EXPECT_THROW(compute_balance_metrics(r, nullptr, Layout::block, 0), PreconditionError);
}

// ---- independent recomputation -------------------------------------------------------------
// A second, deliberately different implementation of the docs/design.md table: HF-style per-slot one-hot
// fractions for aux_loss, a per-token argmax by std::max_element, softmax without the max shift in
// long double, two-pass variance, sort-free top/bottom by partial sums over a sorted copy.
struct RefMetrics {
  std::vector<int64_t> load, demand;
  double imbalance, cv, entropy_norm, drop_rate, aux, aux_switch, aux_gshard, z, top20, bottom20;
  int64_t unrouted, padding;
};

RefMetrics reference_metrics(const Routing& r, const std::vector<float>& logits, Layout layout, int block) {
  const int E = r.num_experts, k = r.top_k;
  const int64_t N = r.num_tokens;
  RefMetrics m{};
  m.load.assign(E, 0);
  m.demand.assign(E, 0);
  for (size_t i = 0; i < r.expert.size(); ++i) {
    m.demand[r.expert[i]] += 1;
    m.load[r.expert[i]] += r.kept[i];
  }
  const double total = std::accumulate(m.load.begin(), m.load.end(), 0.0);
  const double mean = total / E;
  const double mx = static_cast<double>(*std::max_element(m.load.begin(), m.load.end()));
  m.imbalance = total > 0 ? mx / mean : 1.0;
  double var = 0;
  for (int e = 0; e < E; ++e) var += (m.load[e] - mean) * (m.load[e] - mean) / E;
  m.cv = total > 0 ? std::sqrt(var) / mean : 0.0;
  double h = 0;
  for (int e = 0; e < E; ++e)
    if (m.load[e] > 0) h += m.load[e] / total * std::log(total / m.load[e]);
  m.entropy_norm = E == 1 || total == 0 ? 1.0 : h / std::log(static_cast<double>(E));
  const double dropped = std::accumulate(m.demand.begin(), m.demand.end(), 0.0) - total;
  m.drop_rate = N * k > 0 ? dropped / (N * k) : 0.0;
  m.unrouted = 0;
  for (int64_t t = 0; t < N; ++t) {
    bool any = false;
    for (size_t i = 0; i < r.expert.size(); ++i) any = any || (r.token[i] == t && r.kept[i]);
    m.unrouted += any ? 0 : 1;
  }
  std::vector<int64_t> sorted = m.load;
  std::sort(sorted.begin(), sorted.end());
  const int tail = static_cast<int>(std::ceil(E / 5.0 - 1e-12));
  m.bottom20 = total > 0 ? std::accumulate(sorted.begin(), sorted.begin() + tail, 0.0) / total : tail / double(E);
  m.top20 = total > 0 ? std::accumulate(sorted.end() - tail, sorted.end(), 0.0) / total : tail / double(E);
  m.padding = 0;
  const int64_t cap = r.capacity > 0 ? r.capacity : *std::max_element(m.load.begin(), m.load.end());
  for (int e = 0; e < E; ++e) {
    if (layout == Layout::block) m.padding += (m.load[e] + block - 1) / block * block - m.load[e];
    if (layout == Layout::capacity) m.padding += std::max(cap, m.load[e]) - m.load[e];
  }
  // Losses (token-major routing: assignment t*k + j is slot j of token t).
  std::vector<long double> P(E, 0);
  std::vector<std::vector<double>> f(k, std::vector<double>(E, 0.0));
  std::vector<double> top1(E, 0.0);
  long double z = 0;
  for (int64_t t = 0; t < N; ++t) {
    const float* row = logits.data() + t * E;
    long double s = 0;
    for (int e = 0; e < E; ++e) s += std::exp(static_cast<long double>(row[e]));
    for (int e = 0; e < E; ++e) P[e] += std::exp(static_cast<long double>(row[e])) / s / N;
    z += std::log(s) * std::log(s) / N;
    top1[r.expert[t * k]] += 1.0 / N;  // the token's own first choice (token-major routing)
    for (int j = 0; j < k; ++j) f[j][r.expert[t * k + j]] += 1.0 / N;
  }
  m.aux = 0;
  m.aux_switch = 0;
  m.aux_gshard = 0;
  for (int e = 0; e < E; ++e) {
    for (int j = 0; j < k; ++j) m.aux += E * f[j][e] * static_cast<double>(P[e]);
    m.aux_gshard += E * top1[e] * static_cast<double>(P[e]);
  }
  m.aux_switch = m.aux / k;
  m.z = static_cast<double>(z);
  return m;
}

TEST(BalanceMetrics, MatchesIndependentRecomputationOnRandomRoutings) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  const int expert_counts[] = {1, 2, 3, 5, 8, 13};
  for (int trial = 0; trial < 200; ++trial) {
    const int E = expert_counts[rng() % 6];
    const int k = 1 + static_cast<int>(rng() % E);
    const int64_t N = static_cast<int64_t>(rng() % 40);  // includes 0 and 1
    const double keep_p = (rng() % 3 == 0) ? 1.0 : 0.7;
    std::vector<std::vector<int>> choices(N);
    std::vector<uint8_t> kept;
    std::vector<int> perm(E);
    for (auto& c : choices) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      c.assign(perm.begin(), perm.begin() + k);
      for (int j = 0; j < k; ++j) kept.push_back(std::uniform_real_distribution<>(0, 1)(rng) < keep_p);
    }
    const int64_t cap = rng() % 2 ? static_cast<int64_t>(rng() % 10) : 0;
    const Routing r = make_routing(N, E, k, choices, cap, kept);
    std::vector<float> logits(N * E);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (float& v : logits) v = normal(rng);
    const Layout layout = static_cast<Layout>(rng() % 3);
    const int block = 1 + static_cast<int>(rng() % 7);

    const BalanceMetrics m = compute_balance_metrics(r, logits.data(), layout, block);
    const RefMetrics ref = reference_metrics(r, logits, layout, block);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " trial " << trial << " E " << E << " k " << k
                                      << " N " << N);
    // Integer outputs exactly; floats to 1e-12 relative: different summation order and precision.
    ASSERT_EQ(m.load, ref.load);
    ASSERT_EQ(m.demand, ref.demand);
    EXPECT_EQ(m.tokens_unrouted, ref.unrouted);
    EXPECT_EQ(m.padding_waste, ref.padding);
    const double tol = 1e-12;
    EXPECT_NEAR(m.imbalance, ref.imbalance, tol * ref.imbalance);
    EXPECT_NEAR(m.cv, ref.cv, tol * (1 + ref.cv));
    EXPECT_NEAR(m.entropy_norm, ref.entropy_norm, tol);
    EXPECT_NEAR(m.drop_rate, ref.drop_rate, tol);
    EXPECT_NEAR(m.top20_share, ref.top20, tol);
    EXPECT_NEAR(m.bottom20_share, ref.bottom20, tol);
    ASSERT_EQ(m.has_logits, N > 0);
    if (N > 0) {
      EXPECT_NEAR(m.aux_loss, ref.aux, tol * (1 + ref.aux));
      EXPECT_NEAR(m.aux_loss_switch, ref.aux_switch, tol * (1 + ref.aux_switch));
      EXPECT_NEAR(m.aux_loss_gshard, ref.aux_gshard, tol * (1 + ref.aux_gshard));
      EXPECT_NEAR(m.z_loss, ref.z, tol * (1 + ref.z));
    }
  }
}

TEST(BalanceMetrics, SameInputSameBytes) {
  const uint64_t seed = 2024;
  std::mt19937_64 rng(seed);
  const int N = 300, E = 7, k = 2;
  std::vector<std::vector<int>> choices(N);
  for (auto& c : choices) {
    const int a = static_cast<int>(rng() % E);
    c = {a, (a + 1 + static_cast<int>(rng() % (E - 1))) % E};
  }
  std::vector<float> logits(N * E);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : logits) v = normal(rng);
  const Routing r = make_routing(N, E, k, choices);
  const BalanceMetrics a = compute_balance_metrics(r, logits.data(), Layout::block, 16);
  const BalanceMetrics b = compute_balance_metrics(r, logits.data(), Layout::block, 16);
  const double xa[] = {a.imbalance, a.cv, a.entropy_norm, a.aux_loss, a.aux_loss_switch, a.aux_loss_gshard, a.z_loss};
  const double xb[] = {b.imbalance, b.cv, b.entropy_norm, b.aux_loss, b.aux_loss_switch, b.aux_loss_gshard, b.z_loss};
  EXPECT_EQ(std::memcmp(xa, xb, sizeof(xa)), 0) << "seed " << seed;
  EXPECT_EQ(std::memcmp(a.utilization.data(), b.utilization.data(), E * sizeof(double)), 0) << "seed " << seed;
}

TEST(Aggregate, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 20; i >= 1; --i) v.push_back(i);  // 1..20, given in reverse
  const Aggregate a = aggregate(v);
  EXPECT_DOUBLE_EQ(a.mean, 10.5);
  EXPECT_DOUBLE_EQ(a.p50, 10.0);  // rank ceil(0.5 * 20) = 10
  EXPECT_DOUBLE_EQ(a.p95, 19.0);  // rank ceil(0.95 * 20) = 19
  EXPECT_DOUBLE_EQ(a.max, 20.0);
  const Aggregate b = aggregate({3.0, 1.0, 2.0});
  EXPECT_DOUBLE_EQ(b.p50, 2.0);  // rank ceil(1.5) = 2
  EXPECT_DOUBLE_EQ(b.p95, 3.0);  // rank ceil(2.85) = 3
  const Aggregate c = aggregate({4.5});
  EXPECT_DOUBLE_EQ(c.mean, 4.5);
  EXPECT_DOUBLE_EQ(c.p50, 4.5);
  EXPECT_DOUBLE_EQ(c.p95, 4.5);
  EXPECT_DOUBLE_EQ(c.max, 4.5);
  const Aggregate d = aggregate({});
  EXPECT_DOUBLE_EQ(d.mean, 0.0);
  EXPECT_DOUBLE_EQ(d.max, 0.0);
}

}  // namespace
}  // namespace moesim
