// Host MoE layer: gather (kernels/gather.hpp) and combine (kernels/combine.hpp) on Thrust's OpenMP
// backend, the routed and shared SwiGLU experts on OpenBLAS, the seeded expert weights.
// x, y: [num_tokens, hidden] float32. Bytewise deterministic at any thread count.
// Host only (g++). Covered by tests/experts/moe_layer_test.cpp and tests/dispatch/gather_test.cpp.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include <thrust/system/omp/execution_policy.h>

#include "kernels/combine.hpp"
#include "kernels/gather.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_layer.hpp"

namespace moesim {

namespace {

// Counter-based generator (the SplitMix64 finaliser): value i of a stream depends on (key, i) only.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1) from the top 53 bits.
double unit_open(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// Fills out[i] = scale * N(0, 1), element i from counters (2i, 2i+1) of stream (seed, tensor) (Box-Muller).
void fill_normal(std::vector<float>& out, uint64_t seed, uint64_t tensor, double scale) {
  const uint64_t key = mix64(seed ^ mix64(tensor + 0x51ed270b27a3f1e5ULL));
  const int64_t n = static_cast<int64_t>(out.size());
  constexpr double kTwoPi = 6.283185307179586476925286766559;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double u1 = unit_open(mix64(key + 2 * static_cast<uint64_t>(i)));
    const double u2 = unit_open(mix64(key + 2 * static_cast<uint64_t>(i) + 1));
    out[i] = static_cast<float>(scale * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void require_plan_matches(const Routing& r, const DispatchPlan& plan) {
  MOESIM_REQUIRE(plan.num_experts == r.num_experts,
                 "dispatch plan has " << plan.num_experts << " experts, routing " << r.num_experts);
  MOESIM_REQUIRE(static_cast<int64_t>(plan.padded_offsets.size()) == plan.num_experts + 1 &&
                     plan.padded_offsets[plan.num_experts] == plan.rows &&
                     static_cast<int64_t>(plan.row_assignment.size()) == plan.rows,
                 "dispatch plan is inconsistent: rows " << plan.rows << ", row_assignment "
                                                        << plan.row_assignment.size());
  MOESIM_REQUIRE(static_cast<int64_t>(plan.order.size()) == plan.num_kept,
                 "dispatch plan is inconsistent: num_kept " << plan.num_kept << ", order " << plan.order.size());
  for (int32_t a : plan.row_assignment) {
    MOESIM_REQUIRE(a >= -1 && a < r.num_assignments(), "dispatch plan row holds assignment " << a
                                                           << ", routing has " << r.num_assignments());
  }
}

}  // namespace

void require_valid_weights(const ExpertWeights& w) {
  MOESIM_REQUIRE(w.num_experts >= 0 && w.hidden >= 1 && w.ffn >= 1,
                 "expert weights need num_experts >= 0, hidden, ffn >= 1; got " << w.num_experts << ", " << w.hidden
                                                                                 << ", " << w.ffn);
  const size_t per_tensor = static_cast<size_t>(w.num_experts) * w.hidden * w.ffn;
  MOESIM_REQUIRE(w.w1.size() == per_tensor && w.w3.size() == per_tensor && w.w2.size() == per_tensor,
                 "expert weights need " << per_tensor << " floats per tensor, got w1 " << w.w1.size() << ", w3 "
                                        << w.w3.size() << ", w2 " << w.w2.size());
}

ExpertWeights make_expert_weights(int num_experts, int64_t hidden, int64_t ffn, uint64_t seed) {
  MOESIM_REQUIRE(num_experts >= 0 && hidden >= 1 && ffn >= 1,
                 "make_expert_weights needs num_experts >= 0, hidden, ffn >= 1; got " << num_experts << ", "
                                                                                      << hidden << ", " << ffn);
  ExpertWeights w;
  w.num_experts = num_experts;
  w.hidden = hidden;
  w.ffn = ffn;
  const size_t per_tensor = static_cast<size_t>(num_experts) * hidden * ffn;
  w.w1.resize(per_tensor);
  w.w3.resize(per_tensor);
  w.w2.resize(per_tensor);
  fill_normal(w.w1, seed, 1, 1.0 / std::sqrt(static_cast<double>(hidden)));
  fill_normal(w.w3, seed, 3, 1.0 / std::sqrt(static_cast<double>(hidden)));
  fill_normal(w.w2, seed, 2, 1.0 / std::sqrt(static_cast<double>(ffn)));
  return w;
}

void gather_rows_omp(const float* x, int64_t hidden, const Routing& r, const DispatchPlan& plan, float* xg) {
  MOESIM_REQUIRE(hidden >= 1, "gather needs hidden >= 1, got " << hidden);
  require_plan_matches(r, plan);
  gather_rows(thrust::omp::par, x, hidden, r.token.data(), plan.row_assignment.data(), plan.rows, xg);
}

void combine_omp(const Routing& r, const DispatchPlan& plan, const float* expert_out, const float* shared_out,
                 int64_t hidden, float* y) {
  MOESIM_REQUIRE(hidden >= 1, "combine needs hidden >= 1, got " << hidden);
  require_plan_matches(r, plan);
  const auto& policy = thrust::omp::par;
  const int64_t n = r.num_assignments();
  std::vector<int32_t> keys(n);
  std::vector<int32_t> token_assign(n);
  std::vector<int64_t> token_offsets(r.num_tokens + 1);
  std::vector<int32_t> assignment_row(n);
  build_token_index(policy, r.token.data(), n, r.num_tokens, keys.data(), token_assign.data(), token_offsets.data());
  invert_row_assignment(policy, plan.row_assignment.data(), plan.rows, n, assignment_row.data());
  combine_rows(policy, expert_out, shared_out, r.weight.data(), r.kept.data(), token_assign.data(),
               token_offsets.data(), assignment_row.data(), r.num_tokens, hidden, y);
}

void moe_forward_omp(const ExpertWeights& w, const ExpertWeights* shared, const float* x, const Routing& r,
                     const DispatchPlan& plan, float* y, MoePhaseTimes* times) {
  require_valid_weights(w);
  MOESIM_REQUIRE(w.num_experts == r.num_experts,
                 "expert weights have " << w.num_experts << " experts, routing " << r.num_experts);
  if (shared != nullptr) {
    require_valid_weights(*shared);
    MOESIM_REQUIRE(shared->hidden == w.hidden,
                   "shared experts have hidden " << shared->hidden << ", routed experts " << w.hidden);
  }
  require_plan_matches(r, plan);
  const int64_t hidden = w.hidden;
  const bool has_shared = shared != nullptr && shared->num_experts > 0;

  // Buffers are allocated before the clock starts: the phases time the work, not the allocator.
  std::vector<float> xg(static_cast<size_t>(plan.rows * hidden));
  std::vector<float> expert_out(static_cast<size_t>(plan.rows * hidden));
  std::vector<float> scratch(static_cast<size_t>(2 * plan.rows * w.ffn));
  std::vector<float> shared_out(has_shared ? static_cast<size_t>(r.num_tokens * hidden) : 0);

  auto t0 = std::chrono::steady_clock::now();
  gather_rows_omp(x, hidden, r, plan, xg.data());
  const double dispatch_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  grouped_swiglu_omp(w, xg.data(), plan.padded_offsets.data(), expert_out.data(), scratch.data());
  if (has_shared) shared_experts_omp(*shared, x, r.num_tokens, shared_out.data());
  const double experts_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  combine_omp(r, plan, expert_out.data(), has_shared ? shared_out.data() : nullptr, hidden, y);
  const double combine_s = seconds_since(t0);

  if (times != nullptr) {
    times->dispatch_s = dispatch_s;
    times->experts_s = experts_s;
    times->combine_s = combine_s;
  }
}

}  // namespace moesim
