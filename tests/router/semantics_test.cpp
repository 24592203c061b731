// Tests of router.semantics (src/config/semantics.cpp through route_omp and route_ref): exact keeps the
// routing of moesim before semantics existed bit for bit; megatron, huggingface and deepseek each give
// the values worked by hand from that framework's formula on awkward inputs: the capacity grid edge
// (Megatron's float ceiling, 111 against 110), the 6 x 3 bias case (kept against demand counts), the
// -rate then +rate residue (float32 gives 0), ties, masked group fill, renormalisation after top-k and
// after drops, score defaults and the drop priority order. One test per row of docs/routing-semantics.md.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "router/route.hpp"
#include "src/config/experiment.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

using test::make_request;

using test::kBoth;
using test::kNames;
using test::RouteFn;
const RoutingSemantics kAll[] = {RoutingSemantics::exact, RoutingSemantics::megatron, RoutingSemantics::huggingface,
                                 RoutingSemantics::deepseek};

// A RouterConfig of `gating` under the preset of `s`, nothing given explicitly.
RouterConfig preset(RoutingSemantics s, Gating gating, int top_k) {
  RouterConfig cfg;
  cfg.gating = gating;
  cfg.semantics = s;
  apply_semantics_preset(cfg, top_k, {});
  return cfg;
}

double sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// ---- exact: today's numbers, bit for bit -----------------------------------------------------------

uint64_t fnv_bytes(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

// The logits: 400 tokens x 8 experts from a fixed LCG, every 7th row all equal (ties), every 11th row
// two equal maxima.
std::vector<float> digest_logits(int64_t n, int e) {
  std::vector<float> v(n * e);
  uint64_t s = 12345;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 24) * 4.0 - 2.0);
  }
  for (int64_t t = 0; t < n; t += 7)
    for (int j = 0; j < e; ++j) v[t * e + j] = 0.5f;
  for (int64_t t = 3; t < n; t += 11) v[t * e + 2] = v[t * e + 5] = 3.0f;
  return v;
}

// Every gating under a spread of the keys semantics presets touch, three batches through one state.
template <class Fn>
uint64_t exact_routing_digest(Fn route) {
  const int64_t n = 400;
  const int e = 8;
  const std::vector<float> logits = digest_logits(n, e);
  std::vector<int64_t> ids(n);
  for (int64_t t = 0; t < n; ++t) ids[t] = (t * 37) % 1000;
  uint64_t h = 1469598103934665603ull;
  const Gating gatings[] = {Gating::token_choice, Gating::noisy_top_k, Gating::expert_choice,
                            Gating::sinkhorn,     Gating::hash,        Gating::random,
                            Gating::balanced,     Gating::group_limited, Gating::aux_free_bias};
  for (Gating g : gatings) {
    for (int variant = 0; variant < 12; ++variant) {
      RouterConfig cfg;
      cfg.gating = g;
      cfg.groups = 2;
      cfg.topk_groups = 1;
      cfg.bias_update_rate = 0.01;
      cfg.capacity_factor = (variant % 3 == 0) ? 0.0 : (variant % 3 == 1 ? 1.1 : 1.25);
      cfg.score = (variant / 3) % 2 ? ScoreFunction::sigmoid : ScoreFunction::softmax;
      cfg.renormalize = variant % 2 == 1;
      cfg.pre_softmax = variant % 4 != 3;
      cfg.drop_policy = variant % 5 == 1 ? DropPolicy::score : (variant % 5 == 2 ? DropPolicy::random : DropPolicy::position);
      cfg.priority = variant >= 6 ? Priority::token_major : Priority::k_major;
      cfg.renormalize_after_drop = variant % 4 == 2;
      cfg.group_mask_fill = variant % 2 ? GroupMaskFill::zero : GroupMaskFill::neg_inf;
      RouterState state;
      for (int b = 0; b < 3; ++b) {
        RouteRequest req;
        req.logits = logits.data();
        req.num_tokens = n;
        req.num_experts = e;
        req.top_k = 2;
        req.token_ids = ids.data();
        req.seed = 7 + b;
        const Routing r = route(cfg, req, &state);
        h = fnv_bytes(h, &r.capacity, sizeof r.capacity);
        h = fnv_bytes(h, r.token.data(), r.token.size() * sizeof(int32_t));
        h = fnv_bytes(h, r.expert.data(), r.expert.size() * sizeof(int32_t));
        h = fnv_bytes(h, r.weight.data(), r.weight.size() * sizeof(float));
        h = fnv_bytes(h, r.kept.data(), r.kept.size());
        h = fnv_bytes(h, state.expert_bias.data(), state.expert_bias.size() * sizeof(float));
      }
    }
  }
  return h;
}

// expert_capacity over a grid of tokens, experts, k and capacity factors.
uint64_t exact_capacity_digest() {
  uint64_t h = 1469598103934665603ull;
  RouterConfig cfg;
  for (double cf : {0.5, 1.0, 1.1, 1.2, 1.25, 1.3, 1.5, 2.0}) {
    cfg.capacity_factor = cf;
    for (int e : {3, 7, 8, 16, 64}) {
      for (int k = 1; k <= 3; ++k) {
        for (int64_t n = 1; n <= 512; ++n) {
          const int64_t c = expert_capacity(cfg, n, k, e);
          h = fnv_bytes(h, &c, sizeof c);
          const int64_t ec = expert_choice_capacity(cfg, n, k, e);
          h = fnv_bytes(h, &ec, sizeof ec);
        }
      }
    }
  }
  return h;
}

// The digests were recorded by the same two functions built against moesim at commit ace1278, before
// router.semantics existed, with route_omp and route_ref (equal there at 1 and 2 threads).
TEST(RoutingSemantics, ExactKeepsTheRoutingOfBeforeBitForBit) {
  EXPECT_EQ(exact_routing_digest(&route_omp), 0x48e33807f87531f7ull);
  EXPECT_EQ(exact_routing_digest(&route_ref), 0x48e33807f87531f7ull);
  EXPECT_EQ(exact_capacity_digest(), 0x4871a682ad1bb9e6ull);
  // exact changes no key.
  RouterConfig given;
  given.score = ScoreFunction::sigmoid;
  given.priority = Priority::token_major;
  RouterConfig cfg = given;
  apply_semantics_preset(cfg, 2, {});
  EXPECT_EQ(cfg.score, ScoreFunction::sigmoid);
  EXPECT_EQ(cfg.priority, Priority::token_major);
  EXPECT_EQ(cfg.capacity_rounding, CapacityRounding::decimal);
  EXPECT_EQ(cfg.bias_update_counts, BiasUpdateCounts::demand);
  EXPECT_EQ(cfg.bias_update_arithmetic, BiasArithmetic::float64);
}

// ---- capacity rounding ------------------------------------------------------------------------------

TEST(RoutingSemantics, CapacityMegatronCeilsTheFloatProduct) {
  // Megatron get_capacity: ceil((400 * 2 / 8) * 1.1) = ceil(100 * 1.1) = ceil(110.00000000000001) = 111;
  // the exact decimal product is 110.
  const int64_t want[] = {110, 111, 110, 110};  // exact, megatron, huggingface, deepseek
  for (int i = 0; i < 4; ++i) {
    RouterConfig cfg = preset(kAll[i], Gating::token_choice, 2);
    cfg.capacity_factor = 1.1;
    EXPECT_EQ(expert_capacity(cfg, 400, 2, 8), want[i]) << to_string(kAll[i]);
    // And through the router, on 400 tokens all sent to expert 0 (drops at capacity).
    std::vector<float> logits(400 * 8, 0.0f);
    for (int t = 0; t < 400; ++t) logits[t * 8] = 1.0f;
    for (int b = 0; b < 2; ++b) {
      const Routing r = kBoth[b](cfg, make_request(logits, 400, 8, 2), nullptr);
      EXPECT_EQ(r.capacity, want[i]) << to_string(kAll[i]) << " " << kNames[b];
      EXPECT_EQ(test::expert_loads(r)[0], want[i]) << to_string(kAll[i]) << " " << kNames[b];
    }
  }
  // 100 tokens, one expert, cf 1.1: float 110.00000000000001 -> 111; exact 110.
  RouterConfig m = preset(RoutingSemantics::megatron, Gating::token_choice, 1);
  m.capacity_factor = 1.1;
  EXPECT_EQ(expert_capacity(m, 100, 1, 1), 111);
  m.capacity_rounding = CapacityRounding::decimal;
  EXPECT_EQ(expert_capacity(m, 100, 1, 1), 110);
}

TEST(RoutingSemantics, CapacityFloatDiffersFromDecimalOnlyByOneMore) {
  // Over a grid, the float ceiling is the decimal one or one more, never less; it is more on some points.
  RouterConfig dec, flt;
  flt.capacity_rounding = CapacityRounding::float64;
  int64_t differ = 0;
  for (double cf : {1.0, 1.1, 1.2, 1.25, 1.3, 1.5, 2.0}) {
    dec.capacity_factor = flt.capacity_factor = cf;
    for (int e : {3, 8, 16, 64})
      for (int k = 1; k <= 4; ++k)
        for (int64_t n = 1; n <= 400; ++n) {
          const int64_t a = expert_capacity(dec, n, k, e), b = expert_capacity(flt, n, k, e);
          ASSERT_TRUE(b == a || b == a + 1) << "n " << n << " e " << e << " k " << k << " cf " << cf;
          differ += b != a;
        }
  }
  EXPECT_GT(differ, 0);
}

// ---- bias update: demand or kept counts, float64 or float32 -----------------------------------------

// 6 tokens x 3 experts, k 1, cf 1.0 (C = 2): tokens 0-3 prefer e0, 4-5 e1. Demand (4, 2, 0), kept (2, 2, 0).
std::vector<float> six_by_three() {
  std::vector<float> l(6 * 3, 0.0f);
  for (int t = 0; t < 4; ++t) l[t * 3 + 0] = 2.0f;
  for (int t = 4; t < 6; ++t) l[t * 3 + 1] = 2.0f;
  return l;
}

TEST(RoutingSemantics, BiasMegatronUpdatesFromKeptCounts) {
  // Megatron (kept (2, 2, 0), mean 4/3): signs (-, -, +) -> (-0.001, -0.001, +0.001) in float32.
  // exact and huggingface (demand (4, 2, 0), mean 2): signs (-, 0, +) -> (-0.001, 0, +0.001), each
  // float(0 + rate * sign) = +-0.001f; deepseek counts the demand in float32, the same floats here.
  const std::vector<float> logits = six_by_three();
  const std::vector<std::vector<float>> want = {
      {-0.001f, 0.0f, 0.001f}, {-0.001f, -0.001f, 0.001f}, {-0.001f, 0.0f, 0.001f}, {-0.001f, 0.0f, 0.001f}};
  for (int i = 0; i < 4; ++i) {
    RouterConfig cfg = preset(kAll[i], Gating::aux_free_bias, 1);
    cfg.capacity_factor = 1.0;
    for (int b = 0; b < 2; ++b) {
      RouterState state;
      const Routing r = kBoth[b](cfg, make_request(logits, 6, 3, 1), &state);
      EXPECT_EQ(r.capacity, 2);
      EXPECT_EQ(test::expert_loads(r, false), (std::vector<int64_t>{4, 2, 0})) << to_string(kAll[i]);
      EXPECT_EQ(test::expert_loads(r, true), (std::vector<int64_t>{2, 2, 0})) << to_string(kAll[i]);
      EXPECT_EQ(state.expert_bias, want[i]) << to_string(kAll[i]) << " " << kNames[b];
    }
  }
  // The key alone, under exact: bias_update_counts kept gives Megatron's bias.
  RouterConfig cfg = preset(RoutingSemantics::exact, Gating::aux_free_bias, 1);
  cfg.capacity_factor = 1.0;
  cfg.bias_update_counts = BiasUpdateCounts::kept;
  RouterState state;
  route_omp(cfg, make_request(logits, 6, 3, 1), &state);
  EXPECT_EQ(state.expert_bias, (std::vector<float>{-0.001f, -0.001f, 0.001f}));
}

TEST(RoutingSemantics, BiasFloat32LeavesNoResidueAndTheResidueBreaksTies) {
  // 2 tokens, 2 experts, k 1, rate 0.01. Batch 1 sends both to e1: bias (+r, -r). Batch 2 sends both to
  // e0: bias (+r - r, -r + r). float64: float(double(0.01f) - 0.01) = -2.2351741790771484e-10 on e0 and
  // +2.2351741790771484e-10 on e1; float32: 0.01f - 0.01f = 0 exactly. Batch 3 has equal logits: float64
  // picks e1 by its residue, float32 sees a tie and takes the lower expert, e0.
  const std::vector<float> to_e1 = {0.0f, 2.0f, 0.0f, 2.0f}, to_e0 = {2.0f, 0.0f, 2.0f, 0.0f},
                           tie = {0.0f, 0.0f, 0.0f, 0.0f};
  const float residue = static_cast<float>(static_cast<double>(0.01f) - 0.01);
  EXPECT_NEAR(residue, -2.2351741790771484e-10, 2e-17);  // a float's rounding at 2.2e-10 is under 1e-17
  for (int i = 0; i < 4; ++i) {
    RouterConfig cfg = preset(kAll[i], Gating::aux_free_bias, 1);
    cfg.bias_update_rate = 0.01;
    const bool f32 = cfg.bias_update_arithmetic == BiasArithmetic::float32;
    EXPECT_EQ(f32, kAll[i] == RoutingSemantics::megatron || kAll[i] == RoutingSemantics::deepseek);
    for (int b = 0; b < 2; ++b) {
      RouterState state;
      kBoth[b](cfg, make_request(to_e1, 2, 2, 1), &state);
      kBoth[b](cfg, make_request(to_e0, 2, 2, 1), &state);
      const std::vector<float> want = f32 ? std::vector<float>{0.0f, 0.0f} : std::vector<float>{residue, -residue};
      EXPECT_EQ(state.expert_bias, want) << to_string(kAll[i]) << " " << kNames[b];
      const Routing r = kBoth[b](cfg, make_request(tie, 2, 2, 1), &state);
      EXPECT_EQ(r.expert, std::vector<int32_t>(2, f32 ? 0 : 1)) << to_string(kAll[i]) << " " << kNames[b];
    }
  }
}

// ---- ties ----------------------------------------------------------------------------------------

TEST(RoutingSemantics, TiesGoToTheLowerExpertAndGroupUnderEverySemantics) {
  // Equal logits: top-2 of 6 is (0, 1) for token choice; with 3 groups of 2 and one kept, group 0 wins
  // the tie and its experts (0, 1) are chosen.
  const std::vector<float> logits(2 * 6, 0.25f);
  for (RoutingSemantics s : kAll) {
    for (Gating g : {Gating::token_choice, Gating::group_limited, Gating::aux_free_bias}) {
      RouterConfig cfg = preset(s, g, 2);
      cfg.groups = 3;
      cfg.topk_groups = 1;
      for (int b = 0; b < 2; ++b) {
        RouterState state;
        const Routing r = kBoth[b](cfg, make_request(logits, 2, 6, 2), &state);
        EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 1, 0, 1})) << to_string(s) << " " << to_string(g) << " "
                                                                << kNames[b];
      }
    }
  }
}

// ---- masked group fill -----------------------------------------------------------------------------

TEST(RoutingSemantics, MaskedGroupFillHuggingFaceZeroOthersMinusInfinity) {
  // 4 experts in 2 groups, 1 group kept, k 2, logits 0 (s = 0.5 sigmoid, 0.25 softmax), bias
  // (-2, -2, -3, -3), rate 0: s' = (s - 2, s - 2, s - 3, s - 3), group 1 scores lower and is masked.
  // -inf: experts (0, 1). 0.0 (HF DeepseekV3TopkRouter): s' = (s - 2, s - 2, 0, 0), so the masked
  // experts (2, 3) win.
  const std::vector<float> logits(4, 0.0f);
  for (RoutingSemantics s : kAll) {
    RouterConfig cfg = preset(s, Gating::aux_free_bias, 2);
    cfg.groups = 2;
    cfg.topk_groups = 1;
    cfg.bias_update_rate = 0.0;
    const bool zero = s == RoutingSemantics::huggingface;
    EXPECT_EQ(cfg.group_mask_fill, zero ? GroupMaskFill::zero : GroupMaskFill::neg_inf) << to_string(s);
    for (int b = 0; b < 2; ++b) {
      RouterState state;
      state.expert_bias = {-2.0f, -2.0f, -3.0f, -3.0f};
      const Routing r = kBoth[b](cfg, make_request(logits, 1, 4, 2), &state);
      EXPECT_EQ(r.expert, zero ? (std::vector<int32_t>{2, 3}) : (std::vector<int32_t>{0, 1}))
          << to_string(s) << " " << kNames[b];
    }
  }
}

// ---- renormalisation after top-k and score defaults ----------------------------------------------

TEST(RoutingSemantics, RenormalisationAfterTopKAndScoreDefaults) {
  // One token, logits (2, 1, 0, 0), k 2 (experts 0, 1), token choice.
  //  exact: softmax over all 4 at (0, 1), not renormalised: e^2/D, e/D with D = e^2 + e + 2.
  //  megatron: pre_softmax false, softmax over the two chosen logits: e/(e+1), 1/(e+1).
  //  huggingface (Mixtral): softmax over all, renormalised: the same e/(e+1), 1/(e+1).
  //  deepseek: sigmoid, renormalised: s(2)/(s(2)+s(1)), s(1)/(s(2)+s(1)).
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, 0.0f};
  const double e = std::exp(1.0), d = std::exp(2.0) + e + 2.0;
  const std::vector<std::vector<double>> want = {{std::exp(2.0) / d, e / d},
                                                 {e / (e + 1), 1 / (e + 1)},
                                                 {e / (e + 1), 1 / (e + 1)},
                                                 {sig(2) / (sig(2) + sig(1)), sig(1) / (sig(2) + sig(1))}};
  for (int i = 0; i < 4; ++i) {
    const RouterConfig cfg = preset(kAll[i], Gating::token_choice, 2);
    for (int b = 0; b < 2; ++b) {
      const Routing r = kBoth[b](cfg, make_request(logits, 1, 4, 2), nullptr);
      ASSERT_EQ(r.expert, (std::vector<int32_t>{0, 1})) << to_string(kAll[i]);
      for (int j = 0; j < 2; ++j) {
        // One float rounding of a double computation: 1 ulp of a weight in (0, 1).
        EXPECT_NEAR(r.weight[j], want[i][j], 1.2e-7) << to_string(kAll[i]) << " slot " << j << " " << kNames[b];
      }
    }
  }
  // Score defaults: megatron softmax; deepseek sigmoid; huggingface softmax for token choice (Mixtral) and
  // sigmoid for DeepSeek-V3's group routing.
  // Megatron refuses the expert bias with any score function but sigmoid (transformer_config.py).
  EXPECT_EQ(preset(RoutingSemantics::megatron, Gating::aux_free_bias, 2).score, ScoreFunction::sigmoid);
  EXPECT_EQ(preset(RoutingSemantics::deepseek, Gating::token_choice, 2).score, ScoreFunction::sigmoid);
  EXPECT_EQ(preset(RoutingSemantics::huggingface, Gating::token_choice, 2).score, ScoreFunction::softmax);
  EXPECT_EQ(preset(RoutingSemantics::huggingface, Gating::group_limited, 2).score, ScoreFunction::sigmoid);
  // Megatron renormalises sigmoid scores only when top_k > 1: with k 1 the weight is s(2), not 1.
  RouterConfig one;
  one.semantics = RoutingSemantics::megatron;
  one.score = ScoreFunction::sigmoid;
  apply_semantics_preset(one, 1, {"score"});
  EXPECT_FALSE(one.renormalize);
  const Routing r1 = route_omp(one, make_request(logits, 1, 4, 1), nullptr);
  EXPECT_NEAR(r1.weight[0], sig(2), 1.2e-7);
  RouterConfig two = one;
  apply_semantics_preset(two, 2, {"score"});
  EXPECT_TRUE(two.renormalize);
}

// ---- every preset on every gating its framework has ---------------------------------------------

// One token's experts and weights under `cfg` on `logits` (E experts, k), route_omp and route_ref alike.
void expect_routes(const RouterConfig& cfg, const std::vector<float>& logits, int64_t n, int e, int k,
                   const std::vector<int32_t>& experts, const std::vector<double>& weights, const char* what) {
  for (int b = 0; b < 2; ++b) {
    RouterState state;
    const Routing r = kBoth[b](cfg, make_request(logits, n, e, k), &state);
    ASSERT_EQ(r.expert, experts) << what << " " << kNames[b];
    ASSERT_EQ(r.weight.size(), weights.size()) << what;
    for (size_t j = 0; j < weights.size(); ++j)
      EXPECT_NEAR(r.weight[j], weights[j], 2.4e-7) << what << " slot " << j << " " << kNames[b];
  }
}

TEST(RoutingSemantics, EveryPresetRoutesAsItsFrameworkOnEveryGatingItHas) {
  // Values worked from each framework's code (docs/routing-semantics.md), on logits z = (2, 1, 0, 0), E 4, k 2,
  // groups {0, 1} and {2, 3} for the group gatings (one kept), the bias 0 of a first batch. s = sigmoid,
  // D = e^2 + e + 2 (the full softmax's denominator).
  const std::vector<float> z = {2.0f, 1.0f, 0.0f, 0.0f};
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), D = e2 + e1 + 2.0;
  const std::vector<double> softmax_of_two = {e1 / (e1 + 1), 1 / (e1 + 1)};  // = the full softmax renormalised
  const std::vector<double> sigmoid_renorm = {sig(2) / (sig(2) + sig(1)), sig(1) / (sig(2) + sig(1))};
  auto group = [](RouterConfig c) {
    c.groups = 2;
    c.topk_groups = 1;
    return c;
  };
  // Megatron-LM (moe_utils.py topk_routing_with_score_function; router.py): token choice and the group
  // gating take the top k of the logits (of the kept groups) and a softmax over those k; the expert bias needs
  // sigmoid scores (transformer_config.py), renormalised at k > 1.
  expect_routes(preset(RoutingSemantics::megatron, Gating::token_choice, 2), z, 1, 4, 2, {0, 1}, softmax_of_two,
                "megatron token_choice");
  expect_routes(group(preset(RoutingSemantics::megatron, Gating::group_limited, 2)), z, 1, 4, 2, {0, 1},
                softmax_of_two, "megatron group_limited");
  expect_routes(group(preset(RoutingSemantics::megatron, Gating::aux_free_bias, 2)), z, 1, 4, 2, {0, 1},
                sigmoid_renorm, "megatron aux_free_bias");
  // Megatron's Sinkhorn (router.py sinkhorn_load_balancing): the experts are the top k of sinkhorn(z), the
  // weights the full softmax of z at them (k > 1), never renormalised; at k = 1 the sigmoid. Four tokens
  // whose exp(z) is doubly balanced (every row and column sums to D), so Sinkhorn leaves the order of each
  // row as it is: tokens (2,1,0,0), (0,0,2,1), (1,2,0,0), (0,0,1,2) choose (0,1), (2,3), (1,0), (3,2).
  const std::vector<float> sz = {2, 1, 0, 0, 0, 0, 2, 1, 1, 2, 0, 0, 0, 0, 1, 2};
  const std::vector<double> full = {e2 / D, e1 / D};
  expect_routes(preset(RoutingSemantics::megatron, Gating::sinkhorn, 2), sz, 4, 4, 2, {0, 1, 2, 3, 1, 0, 3, 2},
                {full[0], full[1], full[0], full[1], full[0], full[1], full[0], full[1]}, "megatron sinkhorn k 2");
  expect_routes(preset(RoutingSemantics::megatron, Gating::sinkhorn, 1), sz, 4, 4, 1, {0, 2, 1, 3},
                {sig(2), sig(2), sig(2), sig(2)}, "megatron sinkhorn k 1");
  // Megatron refuses top-1 softmax without pre-softmax (its one weight would be 1): the preset takes the
  // softmax over all experts there, Megatron's use_pre_softmax, not renormalised.
  expect_routes(preset(RoutingSemantics::megatron, Gating::token_choice, 1), z, 1, 4, 1, {0}, {e2 / D},
                "megatron token_choice k 1");
  // Hugging Face: Mixtral's token choice (softmax over all, top-k, renormalised); DeepSeek-V3's group
  // routing (modeling_deepseek_v3.py: sigmoid, the bias for selection only, norm_topk_prob).
  expect_routes(preset(RoutingSemantics::huggingface, Gating::token_choice, 2), z, 1, 4, 2, {0, 1}, softmax_of_two,
                "huggingface token_choice");
  expect_routes(group(preset(RoutingSemantics::huggingface, Gating::group_limited, 2)), z, 1, 4, 2, {0, 1},
                sigmoid_renorm, "huggingface group_limited");
  expect_routes(group(preset(RoutingSemantics::huggingface, Gating::aux_free_bias, 2)), z, 1, 4, 2, {0, 1},
                sigmoid_renorm, "huggingface aux_free_bias");
  // DeepSeek-V3 inference/model.py Gate: sigmoid scores, renormalised; n_groups 1 is plain top-k.
  expect_routes(preset(RoutingSemantics::deepseek, Gating::token_choice, 2), z, 1, 4, 2, {0, 1}, sigmoid_renorm,
                "deepseek token_choice");
  expect_routes(group(preset(RoutingSemantics::deepseek, Gating::group_limited, 2)), z, 1, 4, 2, {0, 1},
                sigmoid_renorm, "deepseek group_limited");
  expect_routes(group(preset(RoutingSemantics::deepseek, Gating::aux_free_bias, 2)), z, 1, 4, 2, {0, 1},
                sigmoid_renorm, "deepseek aux_free_bias");
  // exact, for contrast: the full softmax, not renormalised, on every softmax gating (Sinkhorn included).
  expect_routes(preset(RoutingSemantics::exact, Gating::sinkhorn, 2), sz, 4, 4, 2, {0, 1, 2, 3, 1, 0, 3, 2},
                {full[0], full[1], full[0], full[1], full[0], full[1], full[0], full[1]}, "exact sinkhorn");
}

// ---- renormalisation after drops ----------------------------------------------------------------

TEST(RoutingSemantics, NoFrameworkRenormalisesAfterDrops) {
  // 4 tokens, 3 experts, k 2: tokens 0, 1 have logits (1, 0, -9) and choose (e0, e1); tokens 2, 3 have
  // (1, -9, 0) and choose (e0, e2). Capacity ceil(0.5 * 4 * 2 / 3) = 2: e0 keeps tokens 0 and 1, so tokens
  // 2 and 3 keep only e2. No framework rescales what they keep: the weights stay as the gate wrote them
  // (with renormalize_after_drop they would change, checked as a control).
  std::vector<float> logits;
  for (int t = 0; t < 4; ++t) {
    if (t < 2) {
      logits.insert(logits.end(), {1.0f, 0.0f, -9.0f});
    } else {
      logits.insert(logits.end(), {1.0f, -9.0f, 0.0f});
    }
  }
  for (RoutingSemantics s : kAll) {
    RouterConfig cfg = preset(s, Gating::token_choice, 2);
    EXPECT_FALSE(cfg.renormalize_after_drop) << to_string(s);
    cfg.capacity_factor = 0.5;
    RouterConfig dropless = cfg;
    dropless.capacity_factor = 0.0;
    RouterConfig rescaled = cfg;
    rescaled.renormalize_after_drop = true;
    for (int b = 0; b < 2; ++b) {
      const Routing kept = kBoth[b](cfg, make_request(logits, 4, 3, 2), nullptr);
      const Routing all = kBoth[b](dropless, make_request(logits, 4, 3, 2), nullptr);
      EXPECT_EQ(kept.kept, (std::vector<uint8_t>{1, 1, 1, 1, 0, 1, 0, 1})) << to_string(s) << " " << kNames[b];
      EXPECT_EQ(kept.weight, all.weight) << to_string(s) << " " << kNames[b];
      EXPECT_NE(kBoth[b](rescaled, make_request(logits, 4, 3, 2), nullptr).weight, all.weight) << to_string(s);
    }
  }
}

// ---- drop priority -------------------------------------------------------------------------------

TEST(RoutingSemantics, DropPriorityKMajorOrTokenMajor) {
  // 2 tokens, 3 experts, k 2, cf 0.5 (C = ceil(0.5 * 4 / 3) = 1). Token 0 picks (e0, e1), token 1 picks
  // (e1, e2): e1 holds token 0's second choice and token 1's first. k-major (exact, deepseek) keeps
  // token 1's first choice; token-major (huggingface; megatron's position policy, token order) keeps
  // token 0. Megatron's default policy is probs: the higher weight, token 1's first choice.
  const std::vector<float> logits = {2.0f, 1.0f, -5.0f, -5.0f, 2.0f, 1.0f};
  struct Case {
    RoutingSemantics s;
    bool position;  // drop_policy position given explicitly
    int keeps_e1;   // the token whose e1 assignment is kept
  };
  const Case cases[] = {{RoutingSemantics::exact, false, 1},       {RoutingSemantics::deepseek, false, 1},
                        {RoutingSemantics::huggingface, false, 0}, {RoutingSemantics::megatron, true, 0},
                        {RoutingSemantics::megatron, false, 1}};
  for (const Case& c : cases) {
    RouterConfig cfg;
    cfg.semantics = c.s;
    if (c.position) cfg.drop_policy = DropPolicy::position;
    apply_semantics_preset(cfg, 2, c.position ? std::vector<std::string>{"drop_policy"} : std::vector<std::string>{});
    cfg.capacity_factor = 0.5;
    for (int b = 0; b < 2; ++b) {
      const Routing r = kBoth[b](cfg, make_request(logits, 2, 3, 2), nullptr);
      ASSERT_EQ(r.expert, (std::vector<int32_t>{0, 1, 1, 2})) << to_string(c.s);
      const std::vector<uint8_t> want = c.keeps_e1 == 0 ? std::vector<uint8_t>{1, 1, 0, 1}
                                                        : std::vector<uint8_t>{1, 0, 1, 1};
      EXPECT_EQ(r.kept, want) << to_string(c.s) << (c.position ? " position" : "") << " " << kNames[b];
    }
  }
}

// ---- an explicit key overrides the preset -----------------------------------------------------------

TEST(RoutingSemantics, GivenKeysKeepTheirValues) {
  RouterConfig cfg;
  cfg.semantics = RoutingSemantics::megatron;
  cfg.capacity_rounding = CapacityRounding::decimal;
  cfg.priority = Priority::k_major;
  apply_semantics_preset(cfg, 2, {"capacity_rounding", "priority"});
  EXPECT_EQ(cfg.capacity_rounding, CapacityRounding::decimal);
  EXPECT_EQ(cfg.priority, Priority::k_major);
  EXPECT_EQ(cfg.bias_update_counts, BiasUpdateCounts::kept);  // not given: the preset's
  cfg.capacity_factor = 1.1;
  EXPECT_EQ(expert_capacity(cfg, 400, 2, 8), 110);
}

}  // namespace
}  // namespace moesim
