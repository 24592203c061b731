// Gather: copies token rows of x into the expert-major buffer of a dispatch plan; padding rows get zeros.
// x: [num_tokens, hidden]; token: [num_assignments]; row_assignment: [rows] (-1 = padding);
// out: [rows, hidden]. Pure copies, so bytewise deterministic. Backend-neutral (Thrust, policy first):
// kernels/host/moe_layer_omp.cpp. Covered by tests/dispatch/gather_test.cpp against kernels/moe_ref.hpp.
#pragma once

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"

namespace moesim {

namespace detail {

// One functor call per row: a contiguous copy of hidden floats (vectorises on the CPU; a GPU backend
// that wants coalesced element-per-thread copies overloads gather_rows on its policy).
struct GatherRowOp {
  const float* x;
  const int32_t* token;
  const int32_t* row_assignment;
  int64_t hidden;
  float* out;
  MOESIM_HD void operator()(int64_t row) const {
    float* dst = out + row * hidden;
    const int32_t a = row_assignment[row];
    if (a < 0) {
      for (int64_t c = 0; c < hidden; ++c) dst[c] = 0.0f;
      return;
    }
    const float* src = x + static_cast<int64_t>(token[a]) * hidden;
    for (int64_t c = 0; c < hidden; ++c) dst[c] = src[c];
  }
};

}  // namespace detail

template <class Policy>
void gather_rows(const Policy& policy, const float* x, int64_t hidden, const int32_t* token,
                 const int32_t* row_assignment, int64_t rows, float* out) {
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(rows),
                   detail::GatherRowOp{x, token, row_assignment, hidden, out});
}

}  // namespace moesim
