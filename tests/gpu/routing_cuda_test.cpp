// route_cuda (kernels/cuda/routing_cuda.cu) against route_omp on fresh seeded logits: every gating
// strategy, every shape of the router sweep (0, 1, 7, 333 tokens; 1, 3, 8, 60 experts; k in {1, 2, E})
// and every capacity variant; integers exactly, weights within test::kWeightTolerance (the device exp
// may differ from the host libm in the last bit of a double). Also the fused softmax + top-k kernel
// against token_choice_gating_ref on wide rows and ties, and run-to-run determinism.
// Label gpu; each test skips with the reason when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tests/gpu/cuda_test_support.hpp"
#include "kernels/cuda_backend.hpp"
#include "router/route.hpp"
#include "router/topk_gating_ref.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

struct GatingCase {
  std::string name;  // PascalCase test-name suffix
  RouterConfig cfg;
  // Logits rounded to halves (ties everywhere) when the strategy's selection compares raw logits or
  // per-token scores. Expert choice compares softmax scores across tokens: mathematically equal scores of
  // different tokens are sums of the same exponentials in different orders, which the device's exp and
  // the host's libm may round apart, so it runs on continuous logits only.
  bool ties = true;
};

// Test names and failure messages show the case name, not the bytes of the struct.
void PrintTo(const GatingCase& c, std::ostream* os) { *os << c.name; }

std::vector<GatingCase> gating_cases() {
  std::vector<GatingCase> cases;
  auto add = [&](const std::string& name, Gating g, auto tweak, bool ties = true) {
    RouterConfig cfg;
    cfg.gating = g;
    tweak(cfg);
    cases.push_back({name, cfg, ties});
  };
  add("TokenChoiceSoftmax", Gating::token_choice, [](RouterConfig&) {});
  add("TokenChoiceSoftmaxOverChosen", Gating::token_choice, [](RouterConfig& c) { c.pre_softmax = false; });
  add("TokenChoiceSoftmaxRenormalized", Gating::token_choice, [](RouterConfig& c) { c.renormalize = true; });
  add("TokenChoiceSigmoidScaled", Gating::token_choice, [](RouterConfig& c) {
    c.score = ScoreFunction::sigmoid;
    c.renormalize = true;
    c.routed_scaling_factor = 2.5;
  });
  add("NoisyTopK", Gating::noisy_top_k, [](RouterConfig& c) { c.noise_std = 0.5; });
  add("ExpertChoiceSoftmax", Gating::expert_choice, [](RouterConfig&) {}, false);
  add("ExpertChoiceSigmoid", Gating::expert_choice, [](RouterConfig& c) { c.score = ScoreFunction::sigmoid; }, false);
  add("Sinkhorn", Gating::sinkhorn, [](RouterConfig& c) { c.sinkhorn_iterations = 20; });
  add("Hash", Gating::hash, [](RouterConfig&) {});
  add("Random", Gating::random, [](RouterConfig&) {});
  add("Balanced", Gating::balanced, [](RouterConfig&) {});
  add("GroupLimitedSigmoid", Gating::group_limited, [](RouterConfig& c) { c.score = ScoreFunction::sigmoid; });
  add("GroupLimitedSoftmaxZeroFill", Gating::group_limited, [](RouterConfig& c) {
    c.group_mask_fill = GroupMaskFill::zero;
    c.renormalize = true;
  });
  add("AuxFreeBias", Gating::aux_free_bias, [](RouterConfig& c) {
    c.score = ScoreFunction::sigmoid;
    c.bias_update_rate = 0.05;
  });
  // router.semantics megatron: float capacity, kept counts, float32 bias arithmetic.
  add("AuxFreeBiasMegatron", Gating::aux_free_bias, [](RouterConfig& c) {
    c.semantics = RoutingSemantics::megatron;
    c.score = ScoreFunction::sigmoid;
    apply_semantics_preset(c, 2, {"score"});
    c.bias_update_rate = 0.05;
  });
  return cases;
}

class RouteCuda : public test::CudaTestWithParam<GatingCase> {};

// The router sweep of tests/router with route_cuda in place of route_ref. aux_free_bias runs three
// batches through one state per backend, so the biases, and the routing they steer, must agree.
TEST_P(RouteCuda, MatchesOmpOnEveryShapeAndCapacityVariant) {
  const GatingCase& gc = GetParam();
  const uint64_t seed = 20240611;
  for (const test::SweepShape& s : test::sweep_shapes()) {
    const std::vector<RouterConfig> variants = test::capacity_variants(gc.cfg);
    for (size_t v = 0; v < variants.size(); ++v) {
      RouterConfig cfg = variants[v];
      const bool ties = gc.ties && v % 2 == 1;
      if (cfg.gating == Gating::group_limited || cfg.gating == Gating::aux_free_bias) {
        test::set_groups(cfg, s.num_experts, s.top_k);
      }
      const uint64_t case_seed = seed + 1000003ull * static_cast<uint64_t>(s.num_tokens) +
                                 10007ull * static_cast<uint64_t>(s.num_experts) + static_cast<uint64_t>(s.top_k);
      RouterState state_cuda, state_omp;
      const int batches = cfg.gating == Gating::aux_free_bias ? 3 : 1;
      for (int b = 0; b < batches; ++b) {
        std::vector<float> logits = b == 0 ? test::random_logits(s.num_tokens, s.num_experts, case_seed + b)
                                           : test::skewed_logits(s.num_tokens, s.num_experts, case_seed + b, 1, 2.0);
        if (ties) {
          for (float& x : logits) x = std::round(x * 2.0f) / 2.0f;
        }
        std::vector<int64_t> ids(static_cast<size_t>(s.num_tokens));
        for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int64_t>((t * 7919u + case_seed) % 32000u);
        RouteRequest req = test::make_request(logits, s.num_tokens, s.num_experts, s.top_k, case_seed + b);
        req.token_ids = ids.empty() ? nullptr : ids.data();
        req.sequence_length = 5;
        const Routing got = route_cuda(cfg, req, &state_cuda);
        const Routing want = route_omp(cfg, req, &state_omp);
        ASSERT_TRUE(test::same_routing(got, want))
            << test::describe(cfg, s, case_seed) << " batch " << b << " ties " << ties;
        ASSERT_EQ(state_cuda.expert_bias, state_omp.expert_bias) << test::describe(cfg, s, case_seed);
        ASSERT_EQ(state_cuda.batches_seen, state_omp.batches_seen) << test::describe(cfg, s, case_seed);
      }
    }
  }
}

// Two runs on the same inputs give the same bytes (no atomics, fixed reduction orders).
TEST_P(RouteCuda, SameInputsSameBytes) {
  const uint64_t seed = 99;
  RouterConfig cfg = GetParam().cfg;
  cfg.capacity_factor = 1.0;
  cfg.drop_policy = DropPolicy::random;
  test::set_groups(cfg, 64, 6);
  const std::vector<float> logits = test::skewed_logits(2000, 64, seed, 3, 1.5);
  RouterState s1, s2;
  const Routing a = route_cuda(cfg, test::make_request(logits, 2000, 64, 6, seed), &s1);
  const Routing b = route_cuda(cfg, test::make_request(logits, 2000, 64, 6, seed), &s2);
  EXPECT_EQ(a.expert, b.expert) << "seed " << seed;
  EXPECT_EQ(a.token, b.token) << "seed " << seed;
  EXPECT_EQ(a.kept, b.kept) << "seed " << seed;
  EXPECT_EQ(a.weight, b.weight) << "seed " << seed;
  EXPECT_EQ(s1.expert_bias, s2.expert_bias) << "seed " << seed;
}

INSTANTIATE_TEST_SUITE_P(Gatings, RouteCuda, ::testing::ValuesIn(gating_cases()),
                         [](const ::testing::TestParamInfo<GatingCase>& info) { return info.param.name; });

class TokenChoiceTopKCuda : public test::CudaTest {};

// Rows wider than a warp (a lane holds several experts), k up to E, ties from rounding: the chosen experts
// equal the reference's exactly, weights within kWeightTolerance.
TEST_F(TokenChoiceTopKCuda, MatchesReferenceOnWideRowsAndTies) {
  const uint64_t seed = 777;
  for (int num_e : {1, 31, 32, 33, 257}) {
    for (int k : {1, 8, num_e}) {
      if (k > num_e) continue;
      for (int64_t n : {0, 1, 100}) {
        for (bool ties : {false, true}) {
          for (int rule_id = 0; rule_id < 3; ++rule_id) {
            GateWeightRule rule;
            rule.pre_softmax = rule_id != 1;
            rule.score = rule_id == 2 ? ScoreFunction::sigmoid : ScoreFunction::softmax;
            rule.renormalize = rule_id == 2;
            std::vector<float> logits = test::random_logits(n, num_e, seed + num_e * 31 + k + n);
            if (ties) {
              for (float& x : logits) x = std::round(x);  // a handful of distinct values per row
            }
            std::vector<int32_t> expert(static_cast<size_t>(n * k), -7);
            std::vector<float> weight(static_cast<size_t>(n * k), -7.0f);
            token_choice_topk_cuda(logits.data(), n, num_e, k, rule, expert.data(), weight.data());
            std::vector<int32_t> want_expert;
            std::vector<float> want_weight;
            token_choice_gating_ref(logits.data(), n, num_e, k, rule, want_expert, want_weight);
            const std::string what = "E " + std::to_string(num_e) + " k " + std::to_string(k) + " N " +
                                     std::to_string(n) + " ties " + std::to_string(ties) + " rule " +
                                     std::to_string(rule_id) + " seed " + std::to_string(seed);
            ASSERT_EQ(expert, want_expert) << what;
            for (size_t i = 0; i < weight.size(); ++i) {
              ASSERT_TRUE(test::weight_close(weight[i], want_weight[i]))
                  << what << " weight " << i << ": " << weight[i] << " vs " << want_weight[i];
            }
          }
        }
      }
    }
  }
}

TEST_F(TokenChoiceTopKCuda, TiesGoToLowerExpert) {
  const int num_e = 40, k = 5;
  // Row 0: all equal -> experts 0..4. Row 1: experts 7, 20, 39 share the maximum, 3 and 30 the next value.
  std::vector<float> logits(2 * num_e, 0.0f);
  for (int e : {7, 20, 39}) logits[num_e + e] = 2.0f;
  for (int e : {30, 3}) logits[num_e + e] = 1.0f;
  std::vector<int32_t> expert(2 * k);
  std::vector<float> weight(2 * k);
  token_choice_topk_cuda(logits.data(), 2, num_e, k, GateWeightRule{}, expert.data(), weight.data());
  EXPECT_EQ(expert, (std::vector<int32_t>{0, 1, 2, 3, 4, 7, 20, 39, 3, 30}));
  for (int j = 1; j < k; ++j) EXPECT_EQ(weight[j], weight[0]) << "equal logits, equal weights";
}

}  // namespace
}  // namespace moesim
