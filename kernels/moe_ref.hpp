// Serial references of gather, grouped GEMM, SwiGLU experts and combine: plain loops, double accumulators,
// no BLAS, no Thrust. x, y: [num_tokens, hidden]; weights as in ExpertWeights (kernels/moe_layer.hpp).
// The oracle of gather_rows_omp, grouped_gemm_omp, grouped_swiglu_omp, combine_omp and moe_forward_omp.
// Host only, header only. Covered by tests/dispatch/gather_test.cpp, tests/experts/*_test.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/moe_layer.hpp"

namespace moesim {

// xg[row] = x[token[row_assignment[row]]], zeros for padding rows. xg: [plan.rows, hidden].
inline void gather_rows_ref(const float* x, int64_t hidden, const Routing& r, const DispatchPlan& plan, float* xg) {
  for (int64_t row = 0; row < plan.rows; ++row) {
    const int32_t a = plan.row_assignment[row];
    for (int64_t c = 0; c < hidden; ++c) {
      xg[row * hidden + c] = a < 0 ? 0.0f : x[static_cast<int64_t>(r.token[a]) * hidden + c];
    }
  }
}

// y[t] = sum over t's kept assignments a (assignment order) of weight[a] * expert_out[row of a], + shared_out[t]
// when non-null, summed in double. expert_out: [plan.rows, hidden]; shared_out, y: [r.num_tokens, hidden].
inline void combine_ref(const Routing& r, const DispatchPlan& plan, const float* expert_out, const float* shared_out,
                        int64_t hidden, float* y) {
  std::vector<int64_t> row_of(r.num_assignments(), -1);
  for (int64_t row = 0; row < plan.rows; ++row) {
    if (plan.row_assignment[row] >= 0) row_of[plan.row_assignment[row]] = row;
  }
  std::vector<double> acc(static_cast<size_t>(r.num_tokens * hidden), 0.0);
  for (int64_t a = 0; a < r.num_assignments(); ++a) {
    if (!r.kept[a]) continue;
    for (int64_t c = 0; c < hidden; ++c) {
      acc[r.token[a] * hidden + c] += static_cast<double>(r.weight[a]) * expert_out[row_of[a] * hidden + c];
    }
  }
  for (size_t i = 0; i < acc.size(); ++i) {
    y[i] = static_cast<float>(acc[i] + (shared_out != nullptr ? static_cast<double>(shared_out[i]) : 0.0));
  }
}

// For each group g: C rows [offsets[g], offsets[g+1]) = A rows * B_g, summed in double.
// a: [offsets[G], k]; b: [G, k, n]; c: [offsets[G], n].
inline void grouped_gemm_ref(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k,
                             int64_t n, float* c) {
  for (int g = 0; g < num_groups; ++g) {
    const float* bg = b + static_cast<int64_t>(g) * k * n;
    for (int64_t row = offsets[g]; row < offsets[g + 1]; ++row) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(a[row * k + i]) * bg[i * n + j];
        c[row * n + j] = static_cast<float>(acc);
      }
    }
  }
}

// One token through SwiGLU expert e of w, in double: out[hidden] = (silu(x W1_e) * (x W3_e)) W2_e.
inline void swiglu_token_ref(const ExpertWeights& w, int e, const float* x, std::vector<double>& out) {
  const int64_t hidden = w.hidden;
  const int64_t ffn = w.ffn;
  const float* w1 = w.w1.data() + e * hidden * ffn;
  const float* w3 = w.w3.data() + e * hidden * ffn;
  const float* w2 = w.w2.data() + e * ffn * hidden;
  std::vector<double> h(ffn);
  for (int64_t j = 0; j < ffn; ++j) {
    double g = 0.0;
    double u = 0.0;
    for (int64_t i = 0; i < hidden; ++i) {
      g += static_cast<double>(x[i]) * w1[i * ffn + j];
      u += static_cast<double>(x[i]) * w3[i * ffn + j];
    }
    h[j] = g / (1.0 + std::exp(-g)) * u;
  }
  out.assign(hidden, 0.0);
  for (int64_t j = 0; j < ffn; ++j) {
    for (int64_t c = 0; c < hidden; ++c) out[c] += h[j] * w2[j * hidden + c];
  }
}

// The whole layer, token by token: y[t] = sum over t's kept assignments (assignment order) of
// weight * expert(x[t]) + sum over shared experts of expert(x[t]). The layout does not enter: padding
// rows never reach a token. shared may be null. y: [r.num_tokens, w.hidden].
inline void moe_forward_ref(const ExpertWeights& w, const ExpertWeights* shared, const float* x, const Routing& r,
                            float* y) {
  require_valid_routing(r);
  require_valid_weights(w);
  MOESIM_REQUIRE(w.num_experts == r.num_experts,
                 "expert weights have " << w.num_experts << " experts, routing " << r.num_experts);
  const int64_t hidden = w.hidden;
  std::vector<double> acc(static_cast<size_t>(r.num_tokens * hidden), 0.0);
  std::vector<double> out;
  for (int64_t a = 0; a < r.num_assignments(); ++a) {
    if (!r.kept[a]) continue;
    const int64_t t = r.token[a];
    swiglu_token_ref(w, r.expert[a], x + t * hidden, out);
    for (int64_t c = 0; c < hidden; ++c) acc[t * hidden + c] += static_cast<double>(r.weight[a]) * out[c];
  }
  if (shared != nullptr) {
    require_valid_weights(*shared);
    MOESIM_REQUIRE(shared->hidden == hidden, "shared experts have hidden " << shared->hidden << ", routed " << hidden);
    for (int64_t t = 0; t < r.num_tokens; ++t) {
      for (int s = 0; s < shared->num_experts; ++s) {
        swiglu_token_ref(*shared, s, x + t * hidden, out);
        for (int64_t c = 0; c < hidden; ++c) acc[t * hidden + c] += out[c];
      }
    }
  }
  for (size_t i = 0; i < acc.size(); ++i) y[i] = static_cast<float>(acc[i]);
}

}  // namespace moesim
