// Streaming gather (see streaming_rows.hpp).
#include "kernels/host/streaming_rows.hpp"

#include <immintrin.h>

#include <cstring>

namespace moesim {
namespace {

// dst[0..n) = src[0..n) (zeros when src is null) with streaming stores from dst's first 64-byte boundary.
__attribute__((target("avx512f"))) void row_avx512(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  while (i < n && (reinterpret_cast<uintptr_t>(dst + i) & 63) != 0) {
    dst[i] = src ? src[i] : 0.0f;
    ++i;
  }
  const __m512 zero = _mm512_setzero_ps();
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, src ? _mm512_loadu_ps(src + i) : zero);
  for (; i < n; ++i) dst[i] = src ? src[i] : 0.0f;
}

__attribute__((target("avx2"))) void row_avx2(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  while (i < n && (reinterpret_cast<uintptr_t>(dst + i) & 31) != 0) {
    dst[i] = src ? src[i] : 0.0f;
    ++i;
  }
  const __m256 zero = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, src ? _mm256_loadu_ps(src + i) : zero);
  for (; i < n; ++i) dst[i] = src ? src[i] : 0.0f;
}

void row_plain(float* dst, const float* src, int64_t n) {
  if (src) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    std::memset(dst, 0, static_cast<size_t>(n) * sizeof(float));
  }
}

using RowFn = void (*)(float*, const float*, int64_t);

RowFn row_fn() {
  static const RowFn fn = __builtin_cpu_supports("avx512f") ? &row_avx512
                          : __builtin_cpu_supports("avx2")  ? &row_avx2
                                                            : &row_plain;
  return fn;
}

}  // namespace

void gather_rows_streaming(const float* x, int64_t hidden, const int32_t* token, const int32_t* row_assignment,
                           int64_t rows, float* out) {
  const RowFn fn = row_fn();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const int32_t a = row_assignment[row];
      fn(out + row * hidden, a < 0 ? nullptr : x + static_cast<int64_t>(token[a]) * hidden, hidden);
    }
    _mm_sfence();  // the streaming stores are visible before the threads join
  }
}

}  // namespace moesim
