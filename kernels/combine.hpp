// Combine: the weighted un-permute y[t] = sum over t's kept assignments (in assignment order) of
// weight * expert_out[row], plus an optional shared-expert term. expert_out: [rows, hidden];
// y: [num_tokens, hidden]. Deterministic: each token is owned by one thread, fixed order, no atomics.
// Backend-neutral (Thrust, policy first): kernels/host/moe_layer_omp.cpp.
// Covered by tests/experts/moe_layer_test.cpp and tests/dispatch/gather_test.cpp against kernels/moe_ref.hpp.
#pragma once

#include <cstdint>

#include <thrust/binary_search.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sort.h>
#include <thrust/tabulate.h>

#include "src/common/portability.hpp"
#include "kernels/permute.hpp"

namespace moesim {

namespace detail {

struct TokenKeyOp {
  const int32_t* token;
  MOESIM_HD int32_t operator()(int64_t i) const { return token[i]; }
};

struct InvertRowOp {
  const int32_t* row_assignment;
  int32_t* assignment_row;
  MOESIM_HD void operator()(int64_t row) const {
    const int32_t a = row_assignment[row];
    if (a >= 0) assignment_row[a] = static_cast<int32_t>(row);
  }
};

struct CombineTokenOp {
  const float* expert_out;
  const float* shared_out;
  const float* weight;
  const uint8_t* kept;
  const int32_t* token_assign;
  const int64_t* token_offsets;
  const int32_t* assignment_row;
  int64_t hidden;
  float* y;
  MOESIM_HD void operator()(int64_t t) const {
    float* yt = y + t * hidden;
    for (int64_t c = 0; c < hidden; ++c) yt[c] = 0.0f;
    for (int64_t j = token_offsets[t]; j < token_offsets[t + 1]; ++j) {
      const int32_t a = token_assign[j];
      if (!kept[a]) continue;
      const float w = weight[a];
      const float* src = expert_out + static_cast<int64_t>(assignment_row[a]) * hidden;
      for (int64_t c = 0; c < hidden; ++c) yt[c] += w * src[c];
    }
    if (shared_out != nullptr) {
      const float* s = shared_out + t * hidden;
      for (int64_t c = 0; c < hidden; ++c) yt[c] += s[c];
    }
  }
};

}  // namespace detail

// Token index: assignments grouped by token, assignment order kept within a token.
// token: [n]; keys, token_assign: [n] (keys is scratch); token_offsets: [num_tokens + 1] output.
// Token-major routings (token choice) are already sorted and skip the sort; expert-major ones
// (expert choice) are stably sorted by token. Dropped assignments stay in the index and are skipped by
// combine_rows, so that drops never break the sortedness of a token-major routing.
template <class Policy>
void build_token_index(const Policy& policy, const int32_t* token, int64_t n, int64_t num_tokens,
                       int32_t* keys, int32_t* token_assign, int64_t* token_offsets) {
  thrust::tabulate(policy, keys, keys + n, detail::TokenKeyOp{token});
  thrust::tabulate(policy, token_assign, token_assign + n, detail::IotaOp{});
  if (!thrust::is_sorted(policy, keys, keys + n)) {
    stable_sort_small_keys(policy, keys, token_assign, n, SortKeyBound{num_tokens});
  }
  thrust::lower_bound(policy, keys, keys + n, thrust::counting_iterator<int64_t>(0),
                      thrust::counting_iterator<int64_t>(num_tokens + 1), token_offsets);
}

// assignment_row[a] = row of the expert-major buffer holding assignment a, -1 when a is dropped.
// row_assignment: [rows]; assignment_row: [n] output.
template <class Policy>
void invert_row_assignment(const Policy& policy, const int32_t* row_assignment, int64_t rows, int64_t n,
                           int32_t* assignment_row) {
  thrust::fill(policy, assignment_row, assignment_row + n, int32_t(-1));
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(rows),
                   detail::InvertRowOp{row_assignment, assignment_row});
}

// y[t] = sum over kept a of token t (in token_assign order) of weight[a] * expert_out[assignment_row[a]],
// then + shared_out[t] when shared_out is non-null. weight, kept: [n]; shared_out: [num_tokens, hidden].
template <class Policy>
void combine_rows(const Policy& policy, const float* expert_out, const float* shared_out, const float* weight,
                  const uint8_t* kept, const int32_t* token_assign, const int64_t* token_offsets,
                  const int32_t* assignment_row, int64_t num_tokens, int64_t hidden, float* y) {
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   detail::CombineTokenOp{expert_out, shared_out, weight, kept, token_assign, token_offsets,
                                          assignment_row, hidden, y});
}

}  // namespace moesim
