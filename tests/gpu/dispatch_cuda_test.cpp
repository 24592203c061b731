// Dispatch on the CUDA backend against the host path on fresh seeded routings: plan_dispatch_cuda equals
// plan_dispatch_omp in every field, exactly (CUB radix sort over ceil(log2(E+1)) bits, CUB histogram,
// scans, padding), in the dropless, block and capacity layouts; gather_rows_cuda equals gather_rows_omp
// byte for byte (pure copies); combine_cuda equals combine_omp byte for byte (same float operations in
// the same order, no FMA contraction). Edge shapes: 0 and 1 tokens, E not a power of two, top_k == E,
// everything on one expert, everything dropped, expert-major routings (the token index sorts).
// Label gpu; each test skips with the reason when no CUDA device is present.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/cuda_test_support.hpp"
#include "kernels/cuda_backend.hpp"
#include "kernels/moe_layer.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

struct LayoutCase {
  Layout layout;
  int block_size;
};

const std::vector<LayoutCase>& layouts() {
  static const std::vector<LayoutCase> all = {
      {Layout::dropless, 1}, {Layout::block, 1}, {Layout::block, 16}, {Layout::block, 64}, {Layout::capacity, 1}};
  return all;
}

// Seeded routings covering the edge shapes; each entry is (label, routing).
std::vector<std::pair<std::string, Routing>> routings(uint64_t seed) {
  std::vector<std::pair<std::string, Routing>> out;
  for (int64_t n : {0, 1, 7, 513}) {
    for (int num_e : {1, 6, 8, 60, 300}) {
      for (int k : {1, 2, num_e}) {
        if (k > num_e || (k == num_e && num_e > 8 && n > 7)) continue;  // keep top_k == E rows small
        const uint64_t s = seed + 131 * n + 7 * num_e + k;
        out.emplace_back("random", test::random_token_choice(s, n, num_e, k, 0.2));
        Routing capped = test::random_token_choice(s + 1, n, num_e, k, 0.0, 1.5);
        test::apply_capacity(capped, std::max<int64_t>(1, n * k / (2 * num_e)));
        out.emplace_back("capacity", capped);
      }
    }
    out.emplace_back("one_expert", test::single_expert_routing(n, 5, 3));
    out.emplace_back("expert_choice", test::expert_choice_routing(seed + n, n, 7, std::max<int64_t>(1, n / 3)));
    Routing dropped = test::random_token_choice(seed + 2 * n, n, 4, 2, 1.0);  // every assignment dropped
    out.emplace_back("all_dropped", dropped);
  }
  return out;
}

class DispatchCuda : public test::CudaTest {};

TEST_F(DispatchCuda, PlanEqualsOmpInEveryLayout) {
  const uint64_t seed = 4242;
  for (const auto& [label, r] : routings(seed)) {
    for (const LayoutCase& lc : layouts()) {
      const DispatchPlan want = plan_dispatch_omp(r, lc.layout, lc.block_size);
      const DispatchPlan got = plan_dispatch_cuda(r, lc.layout, lc.block_size);
      ASSERT_TRUE(test::plans_equal(got, want)) << label << " " << test::describe(seed, r) << " layout "
                                                << test::layout_name(lc.layout) << " block " << lc.block_size;
    }
  }
}

TEST_F(DispatchCuda, GatherEqualsOmpBytewise) {
  const uint64_t seed = 515;
  for (const auto& [label, r] : routings(seed)) {
    for (int64_t hidden : {1, 4, 6, 64}) {  // 4 and 64: 16-byte vector path; 1 and 6: scalar path
      const DispatchPlan plan = plan_dispatch_omp(r, Layout::block, 16);
      const std::vector<float> x = test::random_floats(seed + hidden, r.num_tokens * hidden, -3.0f, 3.0f);
      std::vector<float> want(static_cast<size_t>(plan.rows * hidden)), got(want.size(), -1.0f);
      gather_rows_omp(x.data(), hidden, r, plan, want.data());
      gather_rows_cuda(x.data(), hidden, r, plan, got.data());
      ASSERT_TRUE(test::same_bytes(got, want)) << label << " " << test::describe(seed, r) << " hidden " << hidden;
    }
  }
}

TEST_F(DispatchCuda, CombineEqualsOmpBytewise) {
  const uint64_t seed = 616;
  for (const auto& [label, r] : routings(seed)) {
    for (int64_t hidden : {3, 8, 40}) {
      for (bool with_shared : {false, true}) {
        const DispatchPlan plan = plan_dispatch_omp(r, Layout::capacity, 1);
        const std::vector<float> expert_out = test::random_floats(seed + hidden, plan.rows * hidden, -2.0f, 2.0f);
        const std::vector<float> shared = test::random_floats(seed + 1, r.num_tokens * hidden, -1.0f, 1.0f);
        const float* shared_ptr = with_shared ? shared.data() : nullptr;
        std::vector<float> want(static_cast<size_t>(r.num_tokens * hidden)), got(want.size(), -1.0f);
        combine_omp(r, plan, expert_out.data(), shared_ptr, hidden, want.data());
        combine_cuda(r, plan, expert_out.data(), shared_ptr, hidden, got.data());
        ASSERT_TRUE(test::same_bytes(got, want))
            << label << " " << test::describe(seed, r) << " hidden " << hidden << " shared " << with_shared;
      }
    }
  }
}

// 40000 tokens sort on 16 key bits in the token index of an expert-major routing: the radix sort must
// stay stable across passes.
TEST_F(DispatchCuda, LargeExpertMajorRoutingCombinesBytewise) {
  const uint64_t seed = 717;
  const Routing r = test::expert_choice_routing(seed, 40000, 24, 5000);
  const int64_t hidden = 8;
  const DispatchPlan want_plan = plan_dispatch_omp(r, Layout::dropless, 1);
  const DispatchPlan got_plan = plan_dispatch_cuda(r, Layout::dropless, 1);
  ASSERT_TRUE(test::plans_equal(got_plan, want_plan)) << test::describe(seed, r);
  const std::vector<float> expert_out = test::random_floats(seed, want_plan.rows * hidden, -1.0f, 1.0f);
  std::vector<float> want(static_cast<size_t>(r.num_tokens * hidden)), got(want.size());
  combine_omp(r, want_plan, expert_out.data(), nullptr, hidden, want.data());
  combine_cuda(r, want_plan, expert_out.data(), nullptr, hidden, got.data());
  EXPECT_TRUE(test::same_bytes(got, want)) << test::describe(seed, r);
}

TEST_F(DispatchCuda, InvalidInputsAreRejected) {
  Routing r = test::random_token_choice(1, 10, 4, 2, 0.0);
  EXPECT_THROW(plan_dispatch_cuda(r, Layout::block, 0), PreconditionError);
  r.expert[3] = 4;  // out of range and kept
  EXPECT_THROW(plan_dispatch_cuda(r, Layout::dropless, 1), PreconditionError);
}

// gather and combine check the plan against the routing with the host's require_plan_matches.
TEST_F(DispatchCuda, PlanNotOfTheRoutingIsRejected) {
  const Routing r = test::random_token_choice(2, 10, 4, 2, 0.0);
  const int64_t hidden = 4;
  DispatchPlan plan = plan_dispatch_omp(r, Layout::dropless, 1);
  std::vector<float> x(static_cast<size_t>(r.num_tokens * hidden)), xg(static_cast<size_t>(plan.rows * hidden));
  std::vector<float> y(x.size());
  plan.order.pop_back();  // num_kept no longer equals the length of order
  EXPECT_THROW(gather_rows_cuda(x.data(), hidden, r, plan, xg.data()), PreconditionError);
  EXPECT_THROW(combine_cuda(r, plan, xg.data(), nullptr, hidden, y.data()), PreconditionError);
}

}  // namespace
}  // namespace moesim
