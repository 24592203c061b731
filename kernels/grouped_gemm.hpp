// Grouped expert GEMMs on the host: one cblas_sgemm per expert over its contiguous rows of the
// expert-major buffer (float32, row-major). Empty experts are skipped; padding rows are computed (the
// waste of the block/capacity layouts). Bytewise deterministic at any thread count.
// Built by g++ (kernels/host/gemm_openblas.cpp, OpenBLAS OpenMP build).
// Covered by tests/experts/grouped_gemm_test.cpp against kernels/moe_ref.hpp.
#pragma once

#include <cstdint>

#include "kernels/moe_layer.hpp"

namespace moesim {

// Experts with fewer rows than this run as a batch of single-threaded GEMMs in parallel across experts.
constexpr int64_t kSmallExpertRows = 16;

// The scheduling decision, one place: a GEMM of fewer than kSmallExpertRows rows is too small to split
// over threads (OpenBLAS would fork a team for a few microseconds of work), so such experts are run
// concurrently, one expert per thread; larger experts run one after another, each on the threaded BLAS.
// Empty experts (rows == 0) are skipped by the caller and never reach this decision.
inline bool run_expert_across_experts(int64_t rows) { return rows < kSmallExpertRows; }

// Plain grouped GEMM: for each group g, C[off[g]:off[g+1]] = A[off[g]:off[g+1]] * B_g.
// a: [offsets[G], k]; b: [G, k, n]; c: [offsets[G], n]; offsets: [G+1].
// Exposed for the exact integer test and benchmarks (no activation).
void grouped_gemm_omp(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k,
                      int64_t n, float* c);

// Grouped SwiGLU over the expert-major buffer: rows [offsets[e], offsets[e+1]) go through expert e:
// out = (silu(xg W1_e) * (xg W3_e)) W2_e. xg, out: [offsets[E], w.hidden]; offsets: [E+1]
// (a plan's padded_offsets). scratch: [2 * offsets[E] * w.ffn] floats, or nullptr to allocate inside.
void grouped_swiglu_omp(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out,
                        float* scratch = nullptr);

// Shared experts: out[t] = sum over s = 0..S-1 (in that order) of SwiGLU_s(x[t]), every token, weight 1.
// x, out: [num_tokens, shared.hidden].
void shared_experts_omp(const ExpertWeights& shared, const float* x, int64_t num_tokens, float* out);

}  // namespace moesim
