// The router on the CUDA backend: route_with (router/route_driver.hpp) instantiated with CudaRouteTraits,
// so every gating strategy, capacity and drop policy runs the backend-neutral Thrust templates on the
// CUDA policy; token_choice is served by a fused softmax + top-k kernel (one warp per token row) found by
// argument-dependent lookup as an exact-policy overload of token_choice_gating.
// Host memory in and out. Integers equal route_omp's; weights within 1e-6 relative.
// nvcc only. Tests: tests/gpu/routing_cuda_test.cpp.
#include <cfloat>
#include <climits>
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "router/route_driver.hpp"

namespace moesim {
namespace cuda_detail {

constexpr int kWarp = 32;
constexpr int kTopkWarpsPerBlock = 4;

// (value, expert) ordered by value descending, then expert ascending: the order of select_topk.
// expert == INT_MAX marks "no candidate", ranked after every real one.
struct Candidate {
  float value;
  int expert;
};

__device__ __forceinline__ bool ranks_before(const Candidate& a, const Candidate& b) {
  if (a.expert == INT_MAX) return false;
  if (b.expert == INT_MAX) return true;
  return a.value > b.value || (a.value == b.value && a.expert < b.expert);
}

// Butterfly reduction: every lane ends with the warp's first-ranked candidate.
__device__ __forceinline__ Candidate warp_best(Candidate c) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    Candidate o;
    o.value = __shfl_xor_sync(0xffffffffu, c.value, offset);
    o.expert = __shfl_xor_sync(0xffffffffu, c.expert, offset);
    if (ranks_before(o, c)) c = o;
  }
  return c;
}

__device__ __forceinline__ double warp_max(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per token row. Round j picks the first-ranked expert among those ranked after round j-1's
// pick, so the k picks are the first k of the (value desc, expert asc) order: exactly select_topk's
// result on the same floats (comparisons are exact; no arithmetic touches the selection).
// Weights: softmax over all E (pre_softmax) with the row max and denominator reduced across the warp
// in double, then gating_common's write_weights; sigmoid and softmax-over-the-chosen use gate_weights
// (they read only the k chosen logits).
__global__ void token_choice_topk_kernel(const float* __restrict__ logits, int64_t num_tokens, int num_experts,
                                         int top_k, GateWeightRule rule, int32_t* __restrict__ expert,
                                         float* __restrict__ weight) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp; t < num_tokens;
       t += warps_total) {
    const float* row = logits + t * num_experts;
    int32_t* ex = expert + t * top_k;
    Candidate prev{FLT_MAX, -1};
    for (int j = 0; j < top_k; ++j) {
      Candidate best{0.0f, INT_MAX};
      for (int e = lane; e < num_experts; e += kWarp) {
        const Candidate c{__ldg(row + e), e};
        const bool after_prev = j == 0 || ranks_before(prev, c);
        if (after_prev && ranks_before(c, best)) best = c;
      }
      best = warp_best(best);
      if (lane == 0) ex[j] = best.expert;
      prev = best;
    }
    if (rule.score == ScoreFunction::softmax && rule.pre_softmax) {
      double m = router_detail::neg_infinity();
      for (int e = lane; e < num_experts; e += kWarp) m = fmax(m, static_cast<double>(__ldg(row + e)));
      m = warp_max(m);
      double den = 0.0;
      for (int e = lane; e < num_experts; e += kWarp) den += exp(static_cast<double>(__ldg(row + e)) - m);
      den = warp_sum(den);
      if (lane == 0) {
        router_detail::write_weights(router_detail::FullSoftmaxWeight{row, ex, m, den}, top_k, rule.renormalize,
                                     rule.scaling, weight + t * top_k);
      }
    } else if (lane == 0) {
      router_detail::gate_weights(row, num_experts, ex, top_k, rule, weight + t * top_k);
    }
  }
}

void launch_token_choice_topk(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                              const GateWeightRule& rule, int32_t* expert, float* weight) {
  if (num_tokens == 0) return;
  const int threads = kWarp * kTopkWarpsPerBlock;
  token_choice_topk_kernel<<<grid_blocks(num_tokens, kTopkWarpsPerBlock), threads, 0, stream()>>>(
      logits, num_tokens, num_experts, top_k, rule, expert, weight);
  MOESIM_CUDA_LAUNCH_CHECK(token_choice_topk_kernel);
}

}  // namespace cuda_detail

// The token-choice step of route_with on the CUDA policy. A non-template exact match for the policy
// lvalue route_with passes, so overload resolution prefers it to the Thrust template of topk_gating.hpp
// (found by argument-dependent lookup through GateWeightRule). key_scratch is not needed.
void token_choice_gating(cuda_detail::CudaPolicy& policy, const float* logits, int64_t num_tokens, int num_experts,
                         int top_k, const GateWeightRule& rule, int32_t* expert, float* weight, double* key_scratch) {
  (void)policy;
  (void)key_scratch;
  cuda_detail::launch_token_choice_topk(logits, num_tokens, num_experts, top_k, rule, expert, weight);
}

inline namespace MOESIM_CUDA_API_NS {

Routing route_cuda(const RouterConfig& cfg, const RouteRequest& req, RouterState* state) {
  cuda_detail::require_device();
  return route_with<cuda_detail::CudaRouteTraits>(cfg, req, state);
}

void token_choice_topk_cuda(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                            const GateWeightRule& rule, int32_t* expert, float* weight) {
  MOESIM_REQUIRE(num_experts >= 1 && top_k >= 1 && top_k <= num_experts,
                 "token_choice_topk_cuda needs 1 <= top_k <= num_experts, got top_k " << top_k << ", num_experts "
                                                                                       << num_experts);
  MOESIM_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got " << num_tokens);
  cuda_detail::require_device();
  if (num_tokens == 0) return;
  using cuda_detail::DeviceBuffer;
  const size_t m = static_cast<size_t>(num_tokens) * top_k;
  DeviceBuffer<float> d_logits = cuda_detail::to_device(logits, static_cast<size_t>(num_tokens) * num_experts);
  DeviceBuffer<int32_t> d_expert(m);
  DeviceBuffer<float> d_weight(m);
  cuda_detail::launch_token_choice_topk(d_logits.get(), num_tokens, num_experts, top_k, rule, d_expert.get(),
                                        d_weight.get());
  cuda_detail::copy_to_host(expert, d_expert.get(), m);
  cuda_detail::copy_to_host(weight, d_weight.get(), m);
}

}  // inline namespace MOESIM_CUDA_API_NS

}  // namespace moesim
