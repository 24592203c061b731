// Tests of the dispatch plan: plan_dispatch_omp (kernels/permute.hpp on Thrust OpenMP) against
// plan_dispatch_ref, exactly, on seeded random routings with drops and on edge shapes; plan invariants;
// the vLLM moe_align_block_size docstring example; the capacity layout; thread-count determinism.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/moe_layer.hpp"
#include "kernels/permute_ref.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

using test::describe;
using test::layout_name;

// Checks the plan contract directly (not through the reference): segments, stability, padding.
::testing::AssertionResult plan_invariants(const Routing& r, const DispatchPlan& p, int block_size) {
  const int E = r.num_experts;
  if (p.offsets.size() != static_cast<size_t>(E + 1) || p.offsets[0] != 0) {
    return ::testing::AssertionFailure() << "offsets malformed";
  }
  int64_t kept = 0;
  for (int64_t a = 0; a < r.num_assignments(); ++a) kept += r.kept[a] ? 1 : 0;
  if (p.num_kept != kept || p.offsets[E] != kept) {
    return ::testing::AssertionFailure() << "num_kept " << p.num_kept << ", expected " << kept;
  }
  std::vector<int> seen(r.num_assignments(), 0);
  for (int e = 0; e < E; ++e) {
    if (p.offsets[e + 1] - p.offsets[e] != p.counts[e]) return ::testing::AssertionFailure() << "count " << e;
    for (int64_t j = p.offsets[e]; j < p.offsets[e + 1]; ++j) {
      const int32_t a = p.order[j];
      if (!r.kept[a] || r.expert[a] != e) return ::testing::AssertionFailure() << "order[" << j << "] = " << a;
      if (j > p.offsets[e] && p.order[j - 1] >= a) {
        return ::testing::AssertionFailure() << "not stable in expert " << e << " at " << j;
      }
      seen[a] += 1;
    }
    int64_t padded = p.counts[e];
    if (p.layout == Layout::block) padded = (p.counts[e] + block_size - 1) / block_size * block_size;
    if (p.layout == Layout::capacity) padded = p.rows / E;
    if (p.padded_offsets[e + 1] - p.padded_offsets[e] != padded) {
      return ::testing::AssertionFailure() << "padded segment of expert " << e;
    }
    for (int64_t k = 0; k < padded; ++k) {
      const int32_t want = k < p.counts[e] ? p.order[p.offsets[e] + k] : kPaddingRow;
      if (p.row_assignment[p.padded_offsets[e] + k] != want) {
        return ::testing::AssertionFailure() << "row_assignment of expert " << e << " row " << k;
      }
    }
  }
  for (int64_t a = 0; a < r.num_assignments(); ++a) {
    if (seen[a] != (r.kept[a] ? 1 : 0)) return ::testing::AssertionFailure() << "assignment " << a << " seen " << seen[a];
  }
  if (p.layout == Layout::dropless && p.rows != kept) return ::testing::AssertionFailure() << "dropless rows";
  if (p.layout == Layout::capacity && p.rows % E != 0) return ::testing::AssertionFailure() << "capacity rows";
  return ::testing::AssertionSuccess();
}

void check_all_layouts(uint64_t seed, const Routing& r) {
  struct Case {
    Layout layout;
    int block_size;
  };
  const Case cases[] = {{Layout::dropless, 64}, {Layout::block, 1}, {Layout::block, 4},
                        {Layout::block, 64},    {Layout::capacity, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(seed, r) + " layout=" + layout_name(c.layout) + " block_size=" + std::to_string(c.block_size));
    const DispatchPlan ref = plan_dispatch_ref(r, c.layout, c.block_size);
    const DispatchPlan omp = plan_dispatch_omp(r, c.layout, c.block_size);
    EXPECT_TRUE(test::plans_equal(omp, ref));
    EXPECT_TRUE(plan_invariants(r, omp, c.block_size));
  }
}

TEST(DispatchPermute, OmpMatchesReferenceOnRandomRoutings) {
  struct Shape {
    int64_t num_tokens;
    int num_experts;
    int top_k;
    double drop_prob;
  };
  const Shape shapes[] = {
      {0, 4, 2, 0.0},    {1, 4, 2, 0.0},     {1, 1, 1, 0.0},    {37, 1, 1, 0.2},   {100, 7, 2, 0.1},
      {64, 60, 4, 0.3},  {5, 60, 2, 0.0},    {33, 8, 8, 0.25},  {17, 5, 5, 0.0},   {200, 16, 2, 0.5},
      {3000, 13, 3, 0.1}, {128, 7, 1, 1.0},
  };
  uint64_t seed = 1000;
  for (const Shape& s : shapes) {
    ++seed;
    const Routing r = test::random_token_choice(seed, s.num_tokens, s.num_experts, s.top_k, s.drop_prob);
    check_all_layouts(seed, r);
  }
}

TEST(DispatchPermute, CapacityDroppedRoutingsMatchReference) {
  uint64_t seed = 2000;
  for (int64_t capacity : {1, 3, 10, 50}) {
    ++seed;
    Routing r = test::random_token_choice(seed, 120, 9, 2, 0.0, 1.5);
    test::apply_capacity(r, capacity);
    check_all_layouts(seed, r);
    SCOPED_TRACE(describe(seed, r));
    const DispatchPlan p = plan_dispatch_omp(r, Layout::capacity, 0);
    EXPECT_EQ(p.rows, 9 * capacity);
    for (int e = 0; e <= 9; ++e) EXPECT_EQ(p.padded_offsets[e], e * capacity);
  }
}

TEST(DispatchPermute, ExpertMajorRoutingMatchesReference) {
  uint64_t seed = 3000;
  for (int64_t capacity : {1, 4, 40}) {
    ++seed;
    const Routing r = test::expert_choice_routing(seed, 25, 6, capacity);
    check_all_layouts(seed, r);
    // Already expert-major: the stable sort must leave the order untouched.
    const DispatchPlan p = plan_dispatch_omp(r, Layout::dropless, 1);
    for (int64_t j = 0; j < p.num_kept; ++j) ASSERT_EQ(p.order[j], j) << describe(seed, r);
  }
}

TEST(DispatchPermute, AllTokensOnOneExpert) {
  const Routing r = test::single_expert_routing(50, 7, 3);
  check_all_layouts(0, r);
  const DispatchPlan block = plan_dispatch_omp(r, Layout::block, 16);
  EXPECT_EQ(block.counts, (std::vector<int64_t>{0, 0, 0, 50, 0, 0, 0}));
  EXPECT_EQ(block.padded_offsets, (std::vector<int64_t>{0, 0, 0, 0, 64, 64, 64, 64}));
  EXPECT_EQ(block.rows, 64);
  for (int64_t row = 0; row < 64; ++row) EXPECT_EQ(block.row_assignment[row], row < 50 ? row : -1);
  // No router capacity: the capacity layout takes the largest load, so E x 50 rows.
  EXPECT_EQ(plan_dispatch_omp(r, Layout::capacity, 0).rows, 7 * 50);
}

// vLLM moe_align_block_size docstring (ROUTING-SEMANTICS.md 2.7), translated to moesim: its expert ids
// are 1-based (vLLM expert k is moesim expert k - 1); flat index i = token * top_k + slot is the
// assignment index in both; vLLM's pad sentinel T * k = 12 is moesim's -1 (kPaddingRow).
TEST(DispatchPermute, BlockLayoutMatchesVllmDocstringExample) {
  const int32_t topk_ids[4][3] = {{1, 2, 3}, {0, 1, 3}, {0, 2, 3}, {0, 1, 2}};
  Routing r;
  r.num_tokens = 4;
  r.num_experts = 4;
  r.top_k = 3;
  for (int t = 0; t < 4; ++t) {
    for (int s = 0; s < 3; ++s) {
      r.token.push_back(t);
      r.expert.push_back(topk_ids[t][s]);
      r.weight.push_back(1.0f);
      r.kept.push_back(1);
    }
  }
  // vLLM: sorted_token_ids = [3,6,9,12, 0,4,10,12, 1,7,11,12, 2,5,8,12], num_tokens_post_padded = 16.
  const std::vector<int32_t> expected = {3, 6, 9, -1, 0, 4, 10, -1, 1, 7, 11, -1, 2, 5, 8, -1};
  for (const DispatchPlan& p : {plan_dispatch_omp(r, Layout::block, 4), plan_dispatch_ref(r, Layout::block, 4)}) {
    EXPECT_EQ(p.rows, 16);
    EXPECT_EQ(p.row_assignment, expected);
    EXPECT_EQ(p.padded_offsets, (std::vector<int64_t>{0, 4, 8, 12, 16}));
    EXPECT_EQ(p.counts, (std::vector<int64_t>{3, 3, 3, 3}));
  }
}

TEST(DispatchPermute, EmptyExpertsGetNoBlocks) {
  Routing r = test::single_expert_routing(3, 5, 4);
  r.expert[1] = 0;  // experts 0 and 4 used, 1..3 empty
  const DispatchPlan p = plan_dispatch_omp(r, Layout::block, 8);
  EXPECT_EQ(p.padded_offsets, (std::vector<int64_t>{0, 8, 8, 8, 8, 16}));
  EXPECT_TRUE(test::plans_equal(p, plan_dispatch_ref(r, Layout::block, 8)));
}

TEST(DispatchPermute, AllDroppedKeepsCapacityRows) {
  Routing r = test::random_token_choice(41, 10, 3, 2, 1.0);
  r.capacity = 4;
  const DispatchPlan p = plan_dispatch_omp(r, Layout::capacity, 0);
  EXPECT_EQ(p.num_kept, 0);
  EXPECT_EQ(p.rows, 12);
  for (int32_t a : p.row_assignment) EXPECT_EQ(a, kPaddingRow);
  EXPECT_TRUE(test::plans_equal(p, plan_dispatch_ref(r, Layout::capacity, 0)));
  EXPECT_EQ(plan_dispatch_omp(r, Layout::block, 4).rows, 0);
}

TEST(DispatchPermute, InvalidInputsAreRejected) {
  Routing over = test::single_expert_routing(3, 2, 1);
  over.capacity = 2;  // three kept assignments on expert 1
  EXPECT_THROW(plan_dispatch_omp(over, Layout::capacity, 0), PreconditionError);
  EXPECT_THROW(plan_dispatch_ref(over, Layout::capacity, 0), PreconditionError);
  EXPECT_NO_THROW(plan_dispatch_omp(over, Layout::dropless, 0));

  Routing bad_expert = test::single_expert_routing(3, 2, 1);
  bad_expert.expert[2] = 2;
  EXPECT_THROW(plan_dispatch_omp(bad_expert, Layout::dropless, 1), PreconditionError);
  bad_expert.kept[2] = 0;  // a dropped assignment's expert id is never read
  EXPECT_NO_THROW(plan_dispatch_omp(bad_expert, Layout::dropless, 1));

  Routing short_weight = test::single_expert_routing(3, 2, 1);
  short_weight.weight.pop_back();
  EXPECT_THROW(plan_dispatch_omp(short_weight, Layout::dropless, 1), PreconditionError);

  const Routing ok = test::single_expert_routing(3, 2, 1);
  EXPECT_THROW(plan_dispatch_omp(ok, Layout::block, 0), PreconditionError);
  EXPECT_THROW(plan_dispatch_ref(ok, Layout::block, 0), PreconditionError);
}

TEST(DispatchPermute, SameResultAtOneAndTwoThreads) {
  const uint64_t seed = 4242;
  const Routing r = test::random_token_choice(seed, 6000, 60, 4, 0.2);
  for (Layout layout : {Layout::dropless, Layout::block, Layout::capacity}) {
    DispatchPlan one;
    DispatchPlan two;
    {
      test::ScopedOmpThreads threads(1);
      one = plan_dispatch_omp(r, layout, 16);
    }
    {
      test::ScopedOmpThreads threads(2);
      two = plan_dispatch_omp(r, layout, 16);
    }
    EXPECT_TRUE(test::plans_equal(one, two)) << describe(seed, r) << " layout=" << layout_name(layout);
  }
}

}  // namespace
}  // namespace moesim
