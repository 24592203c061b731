// The fixed-order GEMM (kernels/gemm_fixed_order.hpp): a register-blocked kernel (6 x 16 outputs in AVX2
// registers, 4 x 8 in SSE2 ones) whose accumulators run over k in order, one multiply and one add per
// term (the file is built with -ffp-contract=off, as every moesim file is, so no FMA is formed). One body
// compiled twice, for AVX2 and for baseline x86-64 (SSE2), the first chosen when the CPU has AVX2; both
// give the same bits, since vectorisation is across outputs only (tested). Host only (g++).
// Covered by tests/experts/gemm_fixed_order_test.cpp.
#include "kernels/gemm_fixed_order.hpp"

#include <algorithm>
#include <cstring>

namespace moesim {

namespace {

constexpr int64_t kPanelRows = 96;  // rows of A kept in L1/L2 while every column block passes over them

// A GCC/Clang vector of W floats; V{} + s broadcasts s.
typedef float V4 __attribute__((vector_size(16)));
typedef float V8 __attribute__((vector_size(32)));

// acc[r][j] over k in order for a full MR x (NV vectors of V) block, kept in registers: MR x NV
// accumulators, NV loads of B and one broadcast of A per step. always_inline: each entry point compiles
// its own copy for its instruction set.
template <class V, int MR, int NV>
[[gnu::always_inline]] inline void block_full(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                              int64_t ldc, int64_t k) {
  constexpr int W = sizeof(V) / sizeof(float);
  V acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  for (int64_t p = 0; p < k; ++p) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + p * ldb + v * W, sizeof(V));
    for (int r = 0; r < MR; ++r) {
      const V ar = V{} + a[r * lda + p];
      for (int v = 0; v < NV; ++v) acc[r][v] += ar * bv[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) std::memcpy(c + r * ldc + v * W, &acc[r][v], sizeof(V));
}

// The same sums, one output at a time in scalars, for the last columns (fewer than one vector).
[[gnu::always_inline]] inline void block_edge(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                              int64_t ldc, int64_t k, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += a[r * lda + p] * b[p * ldb + j];
      c[r * ldc + j] = acc;
    }
  }
}

// Rows [i, i + rows) of one column block of NV vectors: full MR-row blocks, then the last rows % MR as
// one smaller block (a switch to its instantiation, so that it too runs in registers).
template <class V, int MR, int NV>
[[gnu::always_inline]] inline void column_block(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                                int64_t ldc, int64_t k, int64_t rows) {
  int64_t i = 0;
  for (; i + MR <= rows; i += MR) block_full<V, MR, NV>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, k);
  const float* ai = a + i * lda;
  float* ci = c + i * ldc;
  switch (rows - i) {
    case 0: break;
    case 1: block_full<V, 1, NV>(ai, lda, b, ldb, ci, ldc, k); break;
    case 2: block_full<V, 2, NV>(ai, lda, b, ldb, ci, ldc, k); break;
    case 3: block_full<V, 3, NV>(ai, lda, b, ldb, ci, ldc, k); break;
    case 4: block_full<V, 4, NV>(ai, lda, b, ldb, ci, ldc, k); break;
    default: block_full<V, 5, NV>(ai, lda, b, ldb, ci, ldc, k); break;
  }
}

// Panels of kPanelRows rows; in each, column blocks of NV vectors, then single vectors, then the last
// n % W columns in scalars.
template <class V, int MR, int NV>
[[gnu::always_inline]] inline void gemm_body(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                             int64_t ldc, int64_t m, int64_t k, int64_t n) {
  static_assert(MR <= 6, "column_block instantiates remainders of up to 5 rows");
  constexpr int W = static_cast<int>(sizeof(V) / sizeof(float));
  constexpr int NR = NV * W;
  for (int64_t i0 = 0; i0 < m; i0 += kPanelRows) {
    const int64_t rows = std::min(m - i0, kPanelRows);
    const float* ap = a + i0 * lda;
    float* cp = c + i0 * ldc;
    int64_t j = 0;
    for (; j + NR <= n; j += NR) column_block<V, MR, NV>(ap, lda, b + j, ldb, cp + j, ldc, k, rows);
    for (; j + W <= n; j += W) column_block<V, MR, 1>(ap, lda, b + j, ldb, cp + j, ldc, k, rows);
    if (j < n) block_edge(ap, lda, b + j, ldb, cp + j, ldc, k, static_cast<int>(rows), static_cast<int>(n - j));
  }
}

}  // namespace

void sgemm_fixed_order_baseline(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                                int64_t m, int64_t k, int64_t n) {
  gemm_body<V4, 4, 2>(a, lda, b, ldb, c, ldc, m, k, n);  // 8 of the 16 SSE registers accumulate
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void sgemm_fixed_order_avx2(const float* a, int64_t lda, const float* b,
                                                            int64_t ldb, float* c, int64_t ldc, int64_t m,
                                                            int64_t k, int64_t n) {
  gemm_body<V8, 6, 2>(a, lda, b, ldb, c, ldc, m, k, n);  // 12 of the 16 AVX registers accumulate
}

bool fixed_order_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#else
void sgemm_fixed_order_avx2(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                            int64_t m, int64_t k, int64_t n) {
  gemm_body<V4, 4, 2>(a, lda, b, ldb, c, ldc, m, k, n);
}

bool fixed_order_has_avx2() { return false; }
#endif

void sgemm_fixed_order(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                       int64_t k, int64_t n) {
  if (fixed_order_has_avx2()) {
    sgemm_fixed_order_avx2(a, lda, b, ldb, c, ldc, m, k, n);
  } else {
    sgemm_fixed_order_baseline(a, lda, b, ldb, c, ldc, m, k, n);
  }
}

void sgemm_fixed_order_omp(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  if (m == 0 || n == 0) return;
  // Tiles of kTileRows x kTileCols outputs, dealt to the threads; below kParallelFlops one thread does
  // it all (a fork and join costs more than a decode step's small products).
  constexpr int64_t kTileRows = 96, kTileCols = 256;
  constexpr int64_t kParallelFlops = int64_t{1} << 22;
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows, col_tiles = (n + kTileCols - 1) / kTileCols;
  const int64_t tiles = row_tiles * col_tiles;
  const bool parallel = tiles > 1 && 2 * m * n * k >= kParallelFlops;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t i = (t / col_tiles) * kTileRows, j = (t % col_tiles) * kTileCols;
    sgemm_fixed_order(a + i * k, k, b + j, n, c + i * n + j, n, std::min(kTileRows, m - i), k,
                      std::min(kTileCols, n - j));
  }
}

}  // namespace moesim
