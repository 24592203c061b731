// Tests of gather and combine (kernels/gather.hpp, kernels/combine.hpp on Thrust OpenMP): gather equals
// gather_rows_ref bytewise; permute then un-permute is the identity; combine against combine_ref on
// token-major routings with drops and on expert-major routings; unrouted tokens get zeros.
#include <gtest/gtest.h>


#include <cstdint>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "kernels/host/streaming_rows.hpp"
#include "kernels/combine.hpp"
#include "kernels/moe_layer.hpp"
#include "kernels/moe_ref.hpp"
#include "kernels/permute_ref.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

using test::describe;
using test::layout_name;

struct LayoutCase {
  Layout layout;
  int block_size;
};
const LayoutCase kLayouts[] = {{Layout::dropless, 1}, {Layout::block, 4}, {Layout::block, 32}, {Layout::capacity, 0}};

std::vector<Routing> sample_routings(uint64_t seed) {
  std::vector<Routing> out;
  out.push_back(test::random_token_choice(seed, 0, 4, 2, 0.0));
  out.push_back(test::random_token_choice(seed + 1, 1, 3, 3, 0.0));
  out.push_back(test::random_token_choice(seed + 2, 57, 7, 2, 0.3));
  out.push_back(test::random_token_choice(seed + 3, 40, 60, 4, 0.1));
  out.push_back(test::random_token_choice(seed + 4, 20, 5, 5, 0.0));
  out.push_back(test::single_expert_routing(30, 6, 5));
  out.push_back(test::expert_choice_routing(seed + 5, 25, 6, 7));
  Routing capped = test::random_token_choice(seed + 6, 80, 9, 2, 0.0, 2.0);
  test::apply_capacity(capped, 12);
  out.push_back(capped);
  return out;
}

TEST(DispatchGather, MatchesReferenceBytewise) {
  const uint64_t seed = 5100;
  const int64_t hidden = 19;
  for (const Routing& r : sample_routings(seed)) {
    const std::vector<float> x = test::random_floats(seed, r.num_tokens * hidden, -3.0f, 3.0f);
    for (const LayoutCase& c : kLayouts) {
      SCOPED_TRACE(describe(seed, r) + " layout=" + layout_name(c.layout));
      const DispatchPlan plan = plan_dispatch_omp(r, c.layout, c.block_size);
      std::vector<float> got(plan.rows * hidden, -7.0f);
      std::vector<float> ref(plan.rows * hidden, 5.0f);
      gather_rows_omp(x.data(), hidden, r, plan, got.data());
      gather_rows_ref(x.data(), hidden, r, plan, ref.data());
      EXPECT_TRUE(test::same_bytes(got, ref));
    }
  }
}

// The streaming gather (kernels/host/streaming_rows.hpp, taken above 64 MiB of output) on its own: the same
// bytes as gather_rows_ref for every routing and layout, at widths that leave rows unaligned (1, 13, 17, 1003) and
// aligned (16, 64), written into a buffer whose start is misaligned too.
TEST(DispatchGather, StreamingGatherMatchesReferenceBytewise) {
  const uint64_t seed = 5150;
  for (int64_t hidden : {1, 13, 16, 17, 64, 1003}) {
    for (const Routing& r : sample_routings(seed)) {
      const std::vector<float> x = test::random_floats(seed, r.num_tokens * hidden, -3.0f, 3.0f);
      for (const LayoutCase& c : kLayouts) {
        SCOPED_TRACE(describe(seed, r) + " layout=" + layout_name(c.layout) + " hidden=" + std::to_string(hidden));
        const DispatchPlan plan = plan_dispatch_omp(r, c.layout, c.block_size);
        std::vector<float> buffer(plan.rows * hidden + 3, -7.0f);
        float* got = buffer.data() + 3;  // 12 bytes off the allocation's alignment
        std::vector<float> ref(plan.rows * hidden, 5.0f);
        gather_rows_streaming(x.data(), hidden, r.token.data(), plan.row_assignment.data(), plan.rows, got);
        gather_rows_ref(x.data(), hidden, r, plan, ref.data());
        EXPECT_TRUE(test::same_bytes(std::vector<float>(got, got + ref.size()), ref));
      }
    }
  }
}

// Scatter the gathered rows back to assignments through order: each kept assignment must get back
// exactly its token's row of x, and every padding row must be zeros.
TEST(DispatchGather, PermuteThenUnpermuteIsIdentity) {
  const uint64_t seed = 5200;
  const int64_t hidden = 8;
  for (const Routing& r : sample_routings(seed)) {
    const std::vector<float> x = test::random_floats(seed + 9, r.num_tokens * hidden, -1.0f, 1.0f);
    for (const LayoutCase& c : kLayouts) {
      SCOPED_TRACE(describe(seed, r) + " layout=" + layout_name(c.layout));
      const DispatchPlan plan = plan_dispatch_omp(r, c.layout, c.block_size);
      std::vector<float> xg(plan.rows * hidden);
      gather_rows_omp(x.data(), hidden, r, plan, xg.data());
      std::vector<float> back(r.num_assignments() * hidden, 0.0f);
      std::vector<uint8_t> filled(r.num_assignments(), 0);
      std::vector<uint8_t> real_row(plan.rows, 0);
      for (int e = 0; e < r.num_experts; ++e) {
        for (int64_t j = plan.offsets[e]; j < plan.offsets[e + 1]; ++j) {
          const int64_t row = plan.padded_offsets[e] + (j - plan.offsets[e]);
          const int32_t a = plan.order[j];
          real_row[row] = 1;
          filled[a] += 1;
          for (int64_t h = 0; h < hidden; ++h) back[a * hidden + h] = xg[row * hidden + h];
        }
      }
      for (int64_t a = 0; a < r.num_assignments(); ++a) {
        ASSERT_EQ(filled[a], r.kept[a] ? 1 : 0) << "assignment " << a;
        if (!r.kept[a]) continue;
        for (int64_t h = 0; h < hidden; ++h) {
          ASSERT_EQ(back[a * hidden + h], x[r.token[a] * hidden + h]) << "assignment " << a << " column " << h;
        }
      }
      for (int64_t row = 0; row < plan.rows; ++row) {
        if (real_row[row]) continue;
        for (int64_t h = 0; h < hidden; ++h) ASSERT_EQ(xg[row * hidden + h], 0.0f) << "padding row " << row;
      }
    }
  }
}

// Top-1, weight 1, no drops: combine(gather(x)) = 0 + 1 * x, exact in float.
TEST(DispatchGather, CombineOfGatherRestoresTokens) {
  const uint64_t seed = 5300;
  const int64_t hidden = 13;
  for (int num_experts : {1, 5, 60}) {
    Routing r = test::random_token_choice(seed + num_experts, 77, num_experts, 1, 0.0);
    for (float& w : r.weight) w = 1.0f;
    const std::vector<float> x = test::random_floats(seed, r.num_tokens * hidden, -2.0f, 2.0f);
    for (const LayoutCase& c : kLayouts) {
      SCOPED_TRACE(describe(seed + num_experts, r) + " layout=" + layout_name(c.layout));
      const DispatchPlan plan = plan_dispatch_omp(r, c.layout, c.block_size);
      std::vector<float> xg(plan.rows * hidden);
      gather_rows_omp(x.data(), hidden, r, plan, xg.data());
      std::vector<float> y(r.num_tokens * hidden, 99.0f);
      combine_omp(r, plan, xg.data(), nullptr, hidden, y.data());
      EXPECT_TRUE(test::same_bytes(y, x));
    }
  }
}

// Tolerance: combine sums at most E float32 products of magnitude <= 1 in float, the reference in double;
// the rounding error stays below E * 2^-24 per term, far under 1e-5.
TEST(DispatchCombine, MatchesReference) {
  const uint64_t seed = 5400;
  const int64_t hidden = 11;
  for (const Routing& r : sample_routings(seed)) {
    for (const LayoutCase& c : kLayouts) {
      SCOPED_TRACE(describe(seed, r) + " layout=" + layout_name(c.layout));
      const DispatchPlan plan = plan_dispatch_omp(r, c.layout, c.block_size);
      const std::vector<float> expert_out = test::random_floats(seed + 1, plan.rows * hidden, -1.0f, 1.0f);
      const std::vector<float> shared_out = test::random_floats(seed + 2, r.num_tokens * hidden, -1.0f, 1.0f);
      for (const float* shared : {static_cast<const float*>(nullptr), shared_out.data()}) {
        std::vector<float> got(r.num_tokens * hidden, 42.0f);
        std::vector<float> ref(r.num_tokens * hidden, -42.0f);
        combine_omp(r, plan, expert_out.data(), shared, hidden, got.data());
        combine_ref(r, plan, expert_out.data(), shared, hidden, ref.data());
        EXPECT_TRUE(test::all_near(got, ref, 1e-5, 1e-5)) << (shared ? "with" : "without") << " shared";
      }
    }
  }
}

// The paths only large inputs take (kernels/host/moe_layer_omp.cpp): gather and combine on the OpenMP
// threads (>= 2^21 floats), gathered rows written with streaming stores (>= 2^22 floats) and the combine
// accumulating 64 floats of a token at a time into a streamed output (>= 2^23 floats), on a hidden size
// with a tail after the last full vector, with drops, at 1 and 2 threads.
TEST(DispatchCombine, LargeInputsTakeTheParallelAndStreamingPaths) {
  const uint64_t seed = 5600;
  const int64_t hidden = 1003;
  const Routing r = test::random_token_choice(seed, 8400, 16, 2, 0.1);  // 8.4 M output floats, ~15 M gathered
  const DispatchPlan plan = plan_dispatch_omp(r, Layout::dropless, 1);
  ASSERT_GE(plan.rows * hidden, int64_t{1} << 22);
  ASSERT_GE(r.num_tokens * hidden, int64_t{1} << 23);
  const std::vector<float> x = test::random_floats(seed + 1, r.num_tokens * hidden, -2.0f, 2.0f);
  std::vector<float> gathered_ref(plan.rows * hidden, 5.0f);
  gather_rows_ref(x.data(), hidden, r, plan, gathered_ref.data());
  const std::vector<float> shared_out = test::random_floats(seed + 2, r.num_tokens * hidden, -1.0f, 1.0f);
  std::vector<float> combined_ref(r.num_tokens * hidden, -42.0f);
  combine_ref(r, plan, gathered_ref.data(), shared_out.data(), hidden, combined_ref.data());
  for (int threads : {1, 2}) {
    test::ScopedOmpThreads scoped(threads);
    std::vector<float> gathered(plan.rows * hidden, -7.0f);
    gather_rows_omp(x.data(), hidden, r, plan, gathered.data());
    EXPECT_TRUE(test::same_bytes(gathered, gathered_ref)) << "threads " << threads;
    std::vector<float> combined(r.num_tokens * hidden, 42.0f);
    combine_omp(r, plan, gathered.data(), shared_out.data(), hidden, combined.data());
    EXPECT_TRUE(test::all_near(combined, combined_ref, 1e-5, 1e-5)) << "threads " << threads;
  }
}

TEST(DispatchCombine, UnroutedTokensGetZerosOrSharedOnly) {
  Routing r = test::random_token_choice(5500, 6, 4, 2, 0.0);
  r.kept[2] = r.kept[3] = 0;  // token 1 loses both assignments
  const int64_t hidden = 5;
  const DispatchPlan plan = plan_dispatch_omp(r, Layout::block, 4);
  const std::vector<float> expert_out = test::random_floats(5501, plan.rows * hidden, -1.0f, 1.0f);
  const std::vector<float> shared_out = test::random_floats(5502, r.num_tokens * hidden, -1.0f, 1.0f);
  std::vector<float> y(r.num_tokens * hidden, 3.0f);
  combine_omp(r, plan, expert_out.data(), nullptr, hidden, y.data());
  for (int64_t h = 0; h < hidden; ++h) EXPECT_EQ(y[1 * hidden + h], 0.0f);
  combine_omp(r, plan, expert_out.data(), shared_out.data(), hidden, y.data());
  for (int64_t h = 0; h < hidden; ++h) EXPECT_EQ(y[1 * hidden + h], shared_out[1 * hidden + h]);
}

}  // namespace
}  // namespace moesim
