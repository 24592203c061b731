// Grouped expert GEMMs on OpenBLAS (OpenMP build): cblas_sgemm per expert, float32, row-major.
// Small experts run in parallel across experts; large ones one after another on the threaded BLAS.
// Deterministic at any thread count: OpenBLAS splits a GEMM over M and N, never over K, so each output
// element keeps one summation order; elementwise SwiGLU and the shared sum are per element.
// Host only (g++). Covered by tests/experts/grouped_gemm_test.cpp and tests/experts/moe_layer_test.cpp.
#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/grouped_gemm.hpp"

namespace moesim {

namespace {

// C[m, n] = A[m, k] * B[k, n], row-major, no transposes.
void sgemm_rows(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
}

// Runs run(g, inner_parallel) for every group with rows[g] > 0. Groups for which
// run_expert_across_experts() holds share one OpenMP loop (one group per thread; OpenBLAS's OpenMP build
// runs single-threaded inside a parallel region, it checks omp_in_parallel(), so no
// openblas_set_num_threads call is needed, which would also reset the OpenMP thread count). The others
// run in order, each free to use every thread (inner_parallel = true).
template <class Run>
void schedule_groups(const std::vector<int64_t>& rows, Run run) {
  std::vector<int> small;
  std::vector<int> large;
  for (int g = 0; g < static_cast<int>(rows.size()); ++g) {
    if (rows[g] == 0) continue;
    (run_expert_across_experts(rows[g]) ? small : large).push_back(g);
  }
  const int num_small = static_cast<int>(small.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < num_small; ++i) run(small[i], false);
  for (int g : large) run(g, true);
}

// One SwiGLU expert over m rows: g = x W1, u = x W3, h = silu(g) * u (into g), out = h W2.
// x: [m, hidden]; w1, w3: [hidden, ffn]; w2: [ffn, hidden]; g, u: [m, ffn] scratch; out: [m, hidden].
void swiglu_rows(const float* x, int64_t m, const float* w1, const float* w3, const float* w2, int64_t hidden,
                 int64_t ffn, float* g, float* u, float* out, bool inner_parallel) {
  sgemm_rows(x, w1, g, m, hidden, ffn);
  sgemm_rows(x, w3, u, m, hidden, ffn);
  const int64_t n = m * ffn;
#pragma omp parallel for schedule(static) if (inner_parallel && n >= 4096)
  for (int64_t i = 0; i < n; ++i) {
    const float v = g[i];
    g[i] = v / (1.0f + std::exp(-v)) * u[i];
  }
  sgemm_rows(g, w2, out, m, ffn, hidden);
}

std::vector<int64_t> group_rows(const int64_t* offsets, int num_groups) {
  std::vector<int64_t> rows(num_groups);
  for (int g = 0; g < num_groups; ++g) rows[g] = offsets[g + 1] - offsets[g];
  return rows;
}

void require_offsets(const int64_t* offsets, int num_groups) {
  MOESIM_REQUIRE(num_groups >= 0, "number of groups must be >= 0, got " << num_groups);
  MOESIM_REQUIRE(offsets != nullptr, "offsets must not be null");
  MOESIM_REQUIRE(offsets[0] == 0, "offsets[0] must be 0, got " << offsets[0]);
  for (int g = 0; g < num_groups; ++g) {
    MOESIM_REQUIRE(offsets[g + 1] >= offsets[g], "offsets must be non-decreasing (group " << g << ")");
  }
}

}  // namespace

void grouped_gemm_omp(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k,
                      int64_t n, float* c) {
  require_offsets(offsets, num_groups);
  MOESIM_REQUIRE(k >= 1 && n >= 1, "grouped GEMM needs k, n >= 1, got k=" << k << " n=" << n);
  schedule_groups(group_rows(offsets, num_groups), [&](int g, bool) {
    sgemm_rows(a + offsets[g] * k, b + static_cast<int64_t>(g) * k * n, c + offsets[g] * n,
               offsets[g + 1] - offsets[g], k, n);
  });
}

void grouped_swiglu_omp(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out,
                        float* scratch) {
  require_valid_weights(w);
  require_offsets(offsets, w.num_experts);
  const int64_t rows = offsets[w.num_experts];
  if (rows == 0) return;
  const int64_t hidden = w.hidden;
  const int64_t ffn = w.ffn;
  std::vector<float> owned;
  if (scratch == nullptr) {
    owned.resize(static_cast<size_t>(2 * rows * ffn));
    scratch = owned.data();
  }
  float* g_all = scratch;
  float* u_all = scratch + rows * ffn;
  schedule_groups(group_rows(offsets, w.num_experts), [&](int e, bool inner_parallel) {
    const int64_t r0 = offsets[e];
    swiglu_rows(xg + r0 * hidden, offsets[e + 1] - r0, w.w1.data() + e * hidden * ffn,
                w.w3.data() + e * hidden * ffn, w.w2.data() + e * ffn * hidden, hidden, ffn, g_all + r0 * ffn,
                u_all + r0 * ffn, out + r0 * hidden, inner_parallel);
  });
}

void shared_experts_omp(const ExpertWeights& shared, const float* x, int64_t num_tokens, float* out) {
  require_valid_weights(shared);
  MOESIM_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got " << num_tokens);
  const int64_t hidden = shared.hidden;
  const int64_t ffn = shared.ffn;
  const int num_shared = shared.num_experts;
  const int64_t n = num_tokens * hidden;
  if (n == 0) return;
  if (num_shared == 0) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
    return;
  }
  // Every shared expert sees all tokens; outputs land in separate buffers and are summed in expert order.
  std::vector<float> per_expert(static_cast<size_t>(num_shared) * n);
  std::vector<float> scratch(static_cast<size_t>(num_shared) * 2 * num_tokens * ffn);
  std::vector<int64_t> rows(num_shared, num_tokens);
  schedule_groups(rows, [&](int s, bool inner_parallel) {
    float* g = scratch.data() + static_cast<int64_t>(s) * 2 * num_tokens * ffn;
    swiglu_rows(x, num_tokens, shared.w1.data() + s * hidden * ffn, shared.w3.data() + s * hidden * ffn,
                shared.w2.data() + s * ffn * hidden, hidden, ffn, g, g + num_tokens * ffn,
                per_expert.data() + s * n, inner_parallel);
  });
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float acc = per_expert[i];
    for (int s = 1; s < num_shared; ++s) acc += per_expert[static_cast<int64_t>(s) * n + i];
    out[i] = acc;
  }
}

}  // namespace moesim
