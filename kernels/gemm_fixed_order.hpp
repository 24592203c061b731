// The fixed-order GEMM: C[m, n] = A[m, k] B[k, n] (float32, row-major, leading dimensions given), where
// every output element is summed over k in order 0, 1, ..., k-1 in float, a separate multiply and add
// per term, starting from 0. Vectorised over n (independent outputs), never over k, and built without
// FMA contraction, so its bits depend on the inputs alone: the same at any thread count, tile shape,
// vector width (SSE2 or AVX2 body) and on any x86-64 CPU, whatever BLAS the machine has. The decoder
// workload runs all its GEMMs on it, so that its routing is a function of the seed (docs/design.md,
// "Reproducibility"). Host only (kernels/host/gemm_fixed_order.cpp, g++). Oracle: sgemm_fixed_order_ref
// (kernels/gemm_fixed_order_ref.hpp), equal to the bit; covered by tests/experts/gemm_fixed_order_test.cpp.
#pragma once

#include <cstdint>

namespace moesim {

// One thread. a: [m, lda >= k]; b: [k, ldb >= n]; c: [m, ldc >= n], overwritten.
void sgemm_fixed_order(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                       int64_t k, int64_t n);

// The two compiled bodies behind sgemm_fixed_order, for tests and benchmarks: baseline x86-64 and AVX2
// (call the AVX2 one only where fixed_order_has_avx2()). Off x86-64 both are the portable body.
void sgemm_fixed_order_baseline(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                                int64_t m, int64_t k, int64_t n);
void sgemm_fixed_order_avx2(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                            int64_t m, int64_t k, int64_t n);
bool fixed_order_has_avx2();

// The same product, split into fixed tiles run across the OpenMP threads when it is large enough (the
// bits do not depend on the split). a: [m, k]; b: [k, n]; c: [m, n], dense.
void sgemm_fixed_order_omp(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);

}  // namespace moesim
