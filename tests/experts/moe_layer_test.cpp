// Tests of the whole host MoE layer (kernels/moe_layer.hpp): moe_forward_omp against moe_forward_ref in
// every layout, with drops, expert-major routings, shared experts and edge shapes; bytewise identical
// results at 1 and 2 OpenMP threads; reproducible seeded weights; phase times; plan mismatch rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/moe_layer.hpp"
#include "kernels/moe_ref.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

using test::describe;
using test::layout_name;

// Tolerance 1e-4 + 1e-3 * |ref| per element: float32 BLAS (sums of hidden and ffn terms), float exp and a
// float combine against a double reference; errors are ~1e-6 relative, the bound allows for cancellation.
constexpr double kAbsTol = 1e-4;
constexpr double kRelTol = 1e-3;

TEST(MoeLayer, ForwardMatchesReferenceInEveryLayout) {
  const uint64_t seed = 7100;
  const int64_t hidden = 32;
  const int64_t ffn = 48;
  std::vector<Routing> routings;
  routings.push_back(test::random_token_choice(seed, 0, 4, 2, 0.0));
  routings.push_back(test::random_token_choice(seed + 1, 1, 4, 2, 0.0));
  routings.push_back(test::random_token_choice(seed + 2, 70, 7, 2, 0.2));
  routings.push_back(test::random_token_choice(seed + 3, 30, 1, 1, 0.1));
  routings.push_back(test::random_token_choice(seed + 4, 24, 60, 3, 0.0));
  routings.push_back(test::random_token_choice(seed + 5, 12, 5, 5, 0.3));
  routings.push_back(test::single_expert_routing(40, 6, 2));
  routings.push_back(test::expert_choice_routing(seed + 6, 20, 5, 6));
  Routing capped = test::random_token_choice(seed + 7, 64, 8, 2, 0.0, 2.0);
  test::apply_capacity(capped, 10);
  routings.push_back(capped);

  const ExpertWeights shared = make_expert_weights(2, hidden, ffn, seed + 100);
  for (const Routing& r : routings) {
    const ExpertWeights w = make_expert_weights(r.num_experts, hidden, ffn, seed + r.num_experts);
    const std::vector<float> x = test::random_floats(seed + r.num_tokens, r.num_tokens * hidden, -1.0f, 1.0f);
    for (const ExpertWeights* sh : {static_cast<const ExpertWeights*>(nullptr), &shared}) {
      std::vector<float> ref(r.num_tokens * hidden);
      moe_forward_ref(w, sh, x.data(), r, ref.data());
      for (Layout layout : {Layout::dropless, Layout::block, Layout::capacity}) {
        SCOPED_TRACE(describe(seed, r) + " layout=" + layout_name(layout) + (sh ? " shared=2" : " shared=0"));
        const DispatchPlan plan = plan_dispatch_omp(r, layout, 8);
        std::vector<float> y(r.num_tokens * hidden, 123.0f);
        moe_forward_omp(w, sh, x.data(), r, plan, y.data(), nullptr);
        EXPECT_TRUE(test::all_near(y, ref, kAbsTol, kRelTol));
      }
    }
  }
}

// Large enough that OpenBLAS threads the big experts (m * n * k well over its threading threshold) while
// the small ones run across experts; every phase must give the same bytes at 1 and 2 threads.
TEST(MoeLayer, SameBytesAtOneTwoAndThreeThreads) {
  const uint64_t seed = 7200;
  const Routing r = test::random_token_choice(seed, 300, 9, 2, 0.1, 3.0);
  const ExpertWeights w = make_expert_weights(9, 64, 128, seed);
  const ExpertWeights shared = make_expert_weights(1, 64, 128, seed + 1);
  const std::vector<float> x = test::random_floats(seed + 2, r.num_tokens * 64, -1.0f, 1.0f);
  for (Layout layout : {Layout::dropless, Layout::block, Layout::capacity}) {
    std::vector<float> y[3];
    for (int threads : {1, 2, 3}) {
      test::ScopedOmpThreads scoped(threads);
      const DispatchPlan plan = plan_dispatch_omp(r, layout, 16);
      y[threads - 1].assign(r.num_tokens * 64, 0.0f);
      moe_forward_omp(w, &shared, x.data(), r, plan, y[threads - 1].data(), nullptr);
    }
    EXPECT_TRUE(test::same_bytes(y[0], y[1])) << describe(seed, r) << " layout=" << layout_name(layout);
    EXPECT_TRUE(test::same_bytes(y[0], y[2])) << describe(seed, r) << " layout=" << layout_name(layout) << " (3 threads)";
  }
}

// One expert with most of the rows (600, one tile of gemm_tiles) beside five 40-row experts: the threads
// take the large tile and the small ones from one list. The layer must match the reference at 1 and 2
// threads.
TEST(MoeLayer, DominantExpertBesideSmallOnesMatchesReference) {
  const uint64_t seed = 7300;
  const int64_t n = 600, hidden = 64, ffn = 96;
  Routing r;
  r.num_tokens = n;
  r.num_experts = 6;
  r.top_k = 2;
  for (int64_t t = 0; t < n; ++t) {
    // Slot 0: expert 0 (600 rows); slot 1: experts 1-5, kept for a third of the tokens (40 rows each).
    for (int s = 0; s < 2; ++s) {
      r.token.push_back(static_cast<int32_t>(t));
      r.expert.push_back(s == 0 ? 0 : static_cast<int32_t>(1 + t % 5));
      r.weight.push_back(s == 0 ? 0.75f : 0.25f);
      r.kept.push_back(s == 0 || t % 3 == 0 ? 1 : 0);
    }
  }
  const ExpertWeights w = make_expert_weights(6, hidden, ffn, seed);
  const std::vector<float> x = test::random_floats(seed + 1, n * hidden, -1.0f, 1.0f);
  std::vector<float> ref(n * hidden);
  moe_forward_ref(w, nullptr, x.data(), r, ref.data());
  const DispatchPlan plan = plan_dispatch_omp(r, Layout::dropless, 1);
  for (int threads : {1, 2}) {
    test::ScopedOmpThreads scoped(threads);
    std::vector<float> y(n * hidden, 9.0f);
    moe_forward_omp(w, nullptr, x.data(), r, plan, y.data(), nullptr);
    EXPECT_TRUE(test::all_near(y, ref, kAbsTol, kRelTol)) << "threads " << threads;
  }
}

TEST(MoeLayer, WeightsAreSeededAndScaled) {
  const ExpertWeights a = make_expert_weights(4, 64, 128, 99);
  ExpertWeights b;
  {
    test::ScopedOmpThreads scoped(1);
    b = make_expert_weights(4, 64, 128, 99);
  }
  EXPECT_TRUE(test::same_bytes(a.w1, b.w1));
  EXPECT_TRUE(test::same_bytes(a.w3, b.w3));
  EXPECT_TRUE(test::same_bytes(a.w2, b.w2));
  const ExpertWeights c = make_expert_weights(4, 64, 128, 100);
  EXPECT_NE(a.w1, c.w1);
  EXPECT_NE(a.w1, a.w3);  // tensors draw from different streams
  // N(0, 1/fan_in): with n = 32768 draws the sample mean is within 6 standard errors of 0 and the
  // sample variance within 5% of 1/fan_in (its relative standard error is sqrt(2/n) < 1%).
  auto check = [](const std::vector<float>& v, double fan_in, const char* name) {
    double sum = 0.0;
    double sq = 0.0;
    for (float f : v) {
      sum += f;
      sq += static_cast<double>(f) * f;
    }
    const double n = static_cast<double>(v.size());
    const double mean = sum / n;
    const double var = sq / n - mean * mean;
    EXPECT_LT(std::fabs(mean), 6.0 * std::sqrt(1.0 / fan_in / n)) << name;
    EXPECT_NEAR(var * fan_in, 1.0, 0.05) << name;
  };
  check(a.w1, 64, "w1");
  check(a.w3, 64, "w3");
  check(a.w2, 128, "w2");
}

TEST(MoeLayer, PhaseTimesAreFilled) {
  const Routing r = test::random_token_choice(7300, 50, 4, 2, 0.0);
  const ExpertWeights w = make_expert_weights(4, 16, 16, 7300);
  const std::vector<float> x = test::random_floats(7301, 50 * 16, -1.0f, 1.0f);
  const DispatchPlan plan = plan_dispatch_omp(r, Layout::dropless, 1);
  std::vector<float> y(50 * 16);
  MoePhaseTimes times{-1.0, -1.0, -1.0};
  moe_forward_omp(w, nullptr, x.data(), r, plan, y.data(), &times);
  EXPECT_GE(times.dispatch_s, 0.0);
  EXPECT_GE(times.experts_s, 0.0);
  EXPECT_GE(times.combine_s, 0.0);
  EXPECT_LT(times.dispatch_s + times.experts_s + times.combine_s, 60.0);
}

TEST(MoeLayer, MismatchedInputsAreRejected) {
  const Routing r = test::random_token_choice(7400, 10, 4, 2, 0.0);
  const Routing other = test::random_token_choice(7401, 10, 5, 2, 0.0);
  const ExpertWeights w = make_expert_weights(4, 8, 8, 1);
  const std::vector<float> x(10 * 8, 0.5f);
  std::vector<float> y(10 * 8);
  EXPECT_THROW(moe_forward_omp(w, nullptr, x.data(), r, plan_dispatch_omp(other, Layout::dropless, 1), y.data(),
                               nullptr),
               PreconditionError);
  const ExpertWeights wrong_hidden = make_expert_weights(1, 16, 8, 1);
  EXPECT_THROW(moe_forward_omp(w, &wrong_hidden, x.data(), r, plan_dispatch_omp(r, Layout::dropless, 1), y.data(),
                               nullptr),
               PreconditionError);
  EXPECT_THROW(moe_forward_ref(make_expert_weights(5, 8, 8, 1), nullptr, x.data(), r, y.data()), PreconditionError);
}

}  // namespace
}  // namespace moesim
