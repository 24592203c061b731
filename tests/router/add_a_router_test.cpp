// README's "Add a new router in four steps", followed literally for a toy strategy, "stride gating":
// token t takes the k experts (t * 3 + j) mod E, j < k (distinct for k <= E), weighted by the softmax of
// their logits. Step 1 is the backend-neutral header (the template below, policy first, a MOESIM_HD
// functor), step 2 its plain-loop reference, step 3 its instantiation on the host policies (the
// OpenMP one and the serial one route_omp picks for small batches), step 4 this test: fast path
// against reference on fresh seeded logits of awkward shapes, exact on the expert ids. (Wiring a real
// strategy into RouterConfig also adds its Gating value and YAML name and a `case` in
// router/route_driver.hpp and router/route.cpp, which a test cannot do for a toy.) Host only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>

#include "src/common/portability.hpp"

namespace moesim {
namespace {

// ---- step 1: the header (router/stride_gating.hpp) ----
struct StrideGatingFunctor {
  const float* logits;  // [num_tokens, num_experts]
  int num_experts, top_k;
  int32_t* expert;      // [num_tokens * top_k]
  float* weight;        // [num_tokens * top_k]
  MOESIM_HD void operator()(int64_t t) const {
    const float* row = logits + t * num_experts;
    float top = -INFINITY;
    for (int j = 0; j < top_k; ++j) {
      const int e = static_cast<int>((t * 3 + j) % num_experts);
      expert[t * top_k + j] = e;
      top = row[e] > top ? row[e] : top;
    }
    float sum = 0;
    for (int j = 0; j < top_k; ++j) sum += expf(row[expert[t * top_k + j]] - top);
    for (int j = 0; j < top_k; ++j) weight[t * top_k + j] = expf(row[expert[t * top_k + j]] - top) / sum;
  }
};

template <class Policy>
void stride_gating(Policy&& policy, const float* logits, int64_t num_tokens, int num_experts, int top_k,
                   int32_t* expert, float* weight) {
  if (num_tokens == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   StrideGatingFunctor{logits, num_experts, top_k, expert, weight});
}

// ---- step 2: the reference (router/stride_gating_ref.hpp): plain loops, double accumulators ----
void stride_gating_ref(const std::vector<float>& logits, int64_t num_tokens, int num_experts, int top_k,
                       std::vector<int32_t>& expert, std::vector<double>& weight) {
  expert.assign(num_tokens * top_k, 0);
  weight.assign(num_tokens * top_k, 0);
  for (int64_t t = 0; t < num_tokens; ++t) {
    double top = -INFINITY, sum = 0;
    for (int j = 0; j < top_k; ++j) {
      expert[t * top_k + j] = static_cast<int32_t>((t * 3 + j) % num_experts);
      top = std::max(top, double(logits[t * num_experts + expert[t * top_k + j]]));
    }
    for (int j = 0; j < top_k; ++j) sum += std::exp(logits[t * num_experts + expert[t * top_k + j]] - top);
    for (int j = 0; j < top_k; ++j)
      weight[t * top_k + j] = std::exp(logits[t * num_experts + expert[t * top_k + j]] - top) / sum;
  }
}

// ---- step 3: the instantiations (kernels/host/routing_omp.cpp's two policies) ----
template <class Policy>
void route_stride(Policy&& policy, const std::vector<float>& logits, int64_t n, int E, int k,
                  std::vector<int32_t>& expert, std::vector<float>& weight) {
  expert.assign(n * k, -1);
  weight.assign(n * k, 0);
  stride_gating(policy, logits.data(), n, E, k, expert.data(), weight.data());
}

// ---- step 4: the test ----
TEST(AddARouter, StrideGatingMatchesItsReferenceOnAwkwardShapes) {
  struct Shape { int64_t n; int E, k; };
  const Shape shapes[] = {{0, 4, 2}, {1, 1, 1}, {1, 5, 5}, {7, 6, 2}, {33, 7, 3}, {1000, 13, 4}, {129, 64, 8}};
  for (const Shape& s : shapes) {
    const uint64_t seed = 20261201 + s.n * 31 + s.E;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> logits(s.n * s.E);
    for (float& v : logits) v = normal(rng);
    std::vector<int32_t> ref_expert, omp_expert, cpp_expert;
    std::vector<double> ref_weight;
    std::vector<float> omp_weight, cpp_weight;
    stride_gating_ref(logits, s.n, s.E, s.k, ref_expert, ref_weight);
    route_stride(thrust::omp::par, logits, s.n, s.E, s.k, omp_expert, omp_weight);
    route_stride(thrust::cpp::par, logits, s.n, s.E, s.k, cpp_expert, cpp_weight);
    EXPECT_EQ(omp_expert, ref_expert) << "seed " << seed;
    EXPECT_EQ(cpp_expert, ref_expert) << "seed " << seed;
    EXPECT_EQ(omp_weight, cpp_weight) << "seed " << seed << ": one elementwise template, the same bits";
    for (size_t i = 0; i < ref_weight.size(); ++i) {
      // float softmax of k terms against double: a few ulps of each term.
      EXPECT_NEAR(omp_weight[i], ref_weight[i], 1e-6 + 1e-6 * ref_weight[i]) << "seed " << seed << " at " << i;
    }
    for (int64_t t = 0; t < s.n; ++t)
      for (int a = 0; a < s.k; ++a)
        for (int b = a + 1; b < s.k; ++b) EXPECT_NE(omp_expert[t * s.k + a], omp_expert[t * s.k + b]);
  }
}

}  // namespace
}  // namespace moesim
