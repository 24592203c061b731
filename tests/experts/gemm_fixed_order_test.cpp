// Tests of the fixed-order GEMM (kernels/gemm_fixed_order.hpp): equal to its plain-loop reference to the
// bit on fresh random floats of awkward shapes (edges of the 4 x 16 register block, k = 1, empty
// products, leading dimensions wider than the matrix), the same bits at 1, 2 and 3 threads through the
// tiled OpenMP entry, and close to a double-accumulated product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/gemm_fixed_order.hpp"
#include "kernels/gemm_fixed_order_ref.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

struct Shape {
  int64_t m, k, n;
};

// Register-block edges (m % 4, n % 16), panel edges (m around 64), tile edges of the OpenMP entry
// (n around 256), k = 1 and prime k, and degenerate products.
const std::vector<Shape> kShapes = {{1, 1, 1},    {3, 7, 5},     {4, 16, 16},   {5, 17, 17},  {63, 33, 15},
                                    {64, 64, 64}, {65, 1, 257},  {130, 97, 31}, {7, 256, 8},  {1, 512, 300},
                                    {0, 5, 9},    {9, 0, 11},    {67, 131, 513}};

TEST(GemmFixedOrder, EqualsReferenceToTheBit) {
  std::mt19937_64 seeds(std::random_device{}());
  for (const Shape& s : kShapes) {
    const uint64_t seed = seeds();
    const int64_t lda = s.k + 3, ldb = s.n + 5, ldc = s.n + 2;  // wider than the matrix: strides honoured
    const std::vector<float> a = test::random_floats(seed, std::max<int64_t>(1, s.m * lda), -2.0f, 2.0f);
    const std::vector<float> b = test::random_floats(seed + 1, std::max<int64_t>(1, s.k * ldb), -2.0f, 2.0f);
    std::vector<float> ref(std::max<int64_t>(1, s.m * ldc), 9.0f), got = ref;
    sgemm_fixed_order_ref(a.data(), lda, b.data(), ldb, ref.data(), ldc, s.m, s.k, s.n);
    sgemm_fixed_order(a.data(), lda, b.data(), ldb, got.data(), ldc, s.m, s.k, s.n);
    EXPECT_TRUE(test::same_bytes(got, ref)) << "seed=" << seed << " m=" << s.m << " k=" << s.k << " n=" << s.n;
    std::vector<float> base(ref.size(), 9.0f);
    sgemm_fixed_order_baseline(a.data(), lda, b.data(), ldb, base.data(), ldc, s.m, s.k, s.n);
    EXPECT_TRUE(test::same_bytes(base, ref)) << "baseline body, seed=" << seed << " m=" << s.m << " n=" << s.n;
  }
}

// The AVX2 body against the baseline one (SSE2 vectors): the same bits.
TEST(GemmFixedOrder, Avx2AndBaselineBodiesAgree) {
  if (!fixed_order_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2: only the baseline body runs here";
  const uint64_t seed = std::random_device{}();
  for (const Shape& s : kShapes) {
    const std::vector<float> a = test::random_floats(seed, std::max<int64_t>(1, s.m * s.k), -3.0f, 3.0f);
    const std::vector<float> b = test::random_floats(seed + 1, std::max<int64_t>(1, s.k * s.n), -3.0f, 3.0f);
    std::vector<float> x(std::max<int64_t>(1, s.m * s.n), 5.0f), y = x;
    sgemm_fixed_order_avx2(a.data(), s.k, b.data(), s.n, x.data(), s.n, s.m, s.k, s.n);
    sgemm_fixed_order_baseline(a.data(), s.k, b.data(), s.n, y.data(), s.n, s.m, s.k, s.n);
    EXPECT_TRUE(test::same_bytes(x, y)) << "seed=" << seed << " m=" << s.m << " k=" << s.k << " n=" << s.n;
  }
}

TEST(GemmFixedOrder, SameBitsAtOneTwoAndThreeThreads) {
  std::mt19937_64 seeds(std::random_device{}());
  for (const Shape& s : {Shape{300, 64, 128}, Shape{517, 129, 300}, Shape{8, 256, 1031}}) {
    const uint64_t seed = seeds();
    const std::vector<float> a = test::random_floats(seed, s.m * s.k, -1.0f, 1.0f);
    const std::vector<float> b = test::random_floats(seed + 1, s.k * s.n, -1.0f, 1.0f);
    std::vector<float> ref(s.m * s.n);
    sgemm_fixed_order_ref(a.data(), s.k, b.data(), s.n, ref.data(), s.n, s.m, s.k, s.n);
    for (int threads : {1, 2, 3}) {
      test::ScopedOmpThreads scoped(threads);
      std::vector<float> got(s.m * s.n, -1.0f);
      sgemm_fixed_order_omp(a.data(), b.data(), got.data(), s.m, s.k, s.n);
      EXPECT_TRUE(test::same_bytes(got, ref)) << "seed=" << seed << " threads=" << threads << " m=" << s.m;
    }
  }
}

// Against a double accumulator: |got - exact| <= k * 2^-23 * sum |a b| per element (the standard bound
// for a float sum of k products, each rounded once, accumulated in order).
TEST(GemmFixedOrder, CloseToTheDoubleProduct) {
  const uint64_t seed = std::random_device{}();
  const int64_t m = 37, k = 301, n = 45;
  const std::vector<float> a = test::random_floats(seed, m * k, -1.0f, 1.0f);
  const std::vector<float> b = test::random_floats(seed + 1, k * n, -1.0f, 1.0f);
  std::vector<float> got(m * n);
  sgemm_fixed_order_omp(a.data(), b.data(), got.data(), m, k, n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        exact += static_cast<double>(a[i * k + p]) * b[p * n + j];
        magnitude += std::fabs(static_cast<double>(a[i * k + p]) * b[p * n + j]);
      }
      ASSERT_LE(std::fabs(got[i * n + j] - exact), k * std::ldexp(1.0, -23) * magnitude)
          << "seed=" << seed << " at (" << i << ", " << j << ")";
    }
  }
}

}  // namespace
}  // namespace moesim
