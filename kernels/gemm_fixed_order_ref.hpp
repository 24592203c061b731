// Serial reference of the fixed-order GEMM (kernels/gemm_fixed_order.hpp): the contract written as the
// plain triple loop, a float accumulator per element summed over k in order from 0. The fast kernel
// must match it to the bit; a float accumulator (not the double of kernels/moe_ref.hpp) because the
// order of float additions is the contract here. Host only, header only.
// Covered by tests/experts/gemm_fixed_order_test.cpp.
#pragma once

#include <cstdint>

namespace moesim {

// a: [m, lda]; b: [k, ldb]; c: [m, ldc].
inline void sgemm_fixed_order_ref(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                                  int64_t m, int64_t k, int64_t n) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) {
        const float term = a[i * lda + p] * b[p * ldb + j];  // rounded on its own: no fused multiply-add
        acc = acc + term;
      }
      c[i * ldc + j] = acc;
    }
  }
}

}  // namespace moesim
