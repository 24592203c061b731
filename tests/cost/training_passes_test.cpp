// Tests src/cost/training_passes: the backward terms of a forward launch, field by field (twice the forward's
// compute, K steps, launches and traffic, plus the fp32 gradient accumulation), through the kernel model on a
// compute-bound toy whose times are worked by hand. Host only.
#include "src/cost/training_passes.hpp"

#include <gtest/gtest.h>

#include "tests/support/cost_support.hpp"

namespace moesim {
namespace {

TEST(TrainingPasses, BackwardIsTwiceTheForwardPlusTheGradientAccumulation) {
  KernelTerms f;
  f.memory_s = 1e-6;
  f.compute_s = 3e-6;
  f.ideal_compute_s = 2.5e-6;
  f.k_steps = 7;
  f.kernels = 5;
  const KernelTerms b = backward_terms(f, 0.5e-6);
  EXPECT_DOUBLE_EQ(b.memory_s, 2.5e-6);  // 2 x 1 us + 0.5 us
  EXPECT_DOUBLE_EQ(b.compute_s, 6e-6);
  EXPECT_DOUBLE_EQ(b.ideal_compute_s, 5e-6);
  EXPECT_DOUBLE_EQ(b.k_steps, 14);
  EXPECT_EQ(b.kernels, 10);
  // On the toy (launch 1 us, efficiencies 1, overlap 1, no K-step floor) the forward costs 5 x 1 + max(1, 3) = 8 us
  // and the backward 10 x 1 + max(2.5, 6) = 16 us.
  const KernelFigures k = KernelFigures::of(test::toy_profile());
  EXPECT_NEAR(kernel_time_s(f, k), 8e-6, 1e-18);
  EXPECT_NEAR(kernel_time_s(b, k), 16e-6, 1e-18);
}

}  // namespace
}  // namespace moesim
