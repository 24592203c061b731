// Dispatch permutation: kept assignments in expert-major order (stable), counts, offsets, padded layout.
// Inputs: expert ids and kept flags per assignment [num_assignments]; outputs offsets [E+1],
// padded_offsets [E+1], row_assignment [rows]. Integer outputs, deterministic at any thread count.
// Backend-neutral (Thrust, policy first): kernels/host/permute_omp.cpp; a CUDA instantiation may follow.
// Covered by tests/dispatch/permute_test.cpp against kernels/permute_ref.hpp.
#pragma once

#include <cstdint>

#include <thrust/binary_search.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/tabulate.h>

#include "src/common/portability.hpp"
#include "src/config/experiment.hpp"

namespace moesim {

// Upper bound of the sort keys: keys lie in [0, value]. A moesim type, so that the unqualified call
// below also finds, by argument-dependent lookup, overloads declared after this header.
struct SortKeyBound {
  int64_t value;
};

// Stable sort of (key, value) pairs whose keys lie in [0, bound.value]. The one sorting call site of the
// dispatch and combine stages: a CUB radix overload taking the exact CUDA policy type, declared in its own
// header before the instantiation, sorts only the ceil(log2(bound.value + 1)) low bits and wins over this
// template (a non-template exact match) without any caller changing.
template <class Policy>
void stable_sort_small_keys(const Policy& policy, int32_t* keys, int32_t* values, int64_t n, SortKeyBound bound) {
  (void)bound;  // generic Thrust compares whole 32-bit keys
  thrust::stable_sort_by_key(policy, keys, keys + n, values);
}

namespace detail {

// keys[i] = expert of a kept assignment, num_experts (the "dropped" sentinel, sorts last) otherwise.
struct ExpertKeyOp {
  const int32_t* expert;
  const uint8_t* kept;
  int32_t num_experts;
  MOESIM_HD int32_t operator()(int64_t i) const { return kept[i] ? expert[i] : num_experts; }
};

struct IotaOp {
  MOESIM_HD int32_t operator()(int64_t i) const { return static_cast<int32_t>(i); }
};

// padded[0] = 0, padded[e + 1] = the padded row count of expert e; an inclusive scan then gives offsets.
struct PaddedCountOp {
  const int64_t* offsets;
  Layout layout;
  int64_t block_size;
  int64_t capacity;
  MOESIM_HD int64_t operator()(int64_t i) const {
    if (i == 0) return 0;
    const int64_t count = offsets[i] - offsets[i - 1];
    switch (layout) {
      case Layout::block: return (count + block_size - 1) / block_size * block_size;
      case Layout::capacity: return capacity;
      default: return count;
    }
  }
};

struct CountOp {
  const int64_t* offsets;
  MOESIM_HD int64_t operator()(int64_t e) const { return offsets[e + 1] - offsets[e]; }
};

// Sorted position j holds the k-th kept assignment of expert e = keys[j]; it lands in the padded
// segment at padded_offsets[e] + k.
struct PlaceRowOp {
  const int32_t* sorted_keys;
  const int32_t* sorted_values;
  const int64_t* offsets;
  const int64_t* padded_offsets;
  int32_t* row_assignment;
  MOESIM_HD void operator()(int64_t j) const {
    const int32_t e = sorted_keys[j];
    row_assignment[padded_offsets[e] + (j - offsets[e])] = sorted_values[j];
  }
};

}  // namespace detail

// Step 1: stable sort of assignment indices by expert, dropped ones last.
// expert, kept: [n]; sorted_keys, order: [n] outputs (order[j] = assignment index; the first offsets[E]
// entries are the kept ones); offsets: [E+1] output, offsets[e] = first sorted position of expert e.
template <class Policy>
void permute_by_expert(const Policy& policy, const int32_t* expert, const uint8_t* kept, int64_t n,
                       int num_experts, int32_t* sorted_keys, int32_t* order, int64_t* offsets) {
  thrust::tabulate(policy, sorted_keys, sorted_keys + n, detail::ExpertKeyOp{expert, kept, num_experts});
  thrust::tabulate(policy, order, order + n, detail::IotaOp{});
  stable_sort_small_keys(policy, sorted_keys, order, n, SortKeyBound{num_experts});
  // Segment starts by binary search over the sorted keys: no histogram, no atomics.
  thrust::lower_bound(policy, sorted_keys, sorted_keys + n, thrust::counting_iterator<int32_t>(0),
                      thrust::counting_iterator<int32_t>(num_experts + 1), offsets);
}

// counts[e] = offsets[e+1] - offsets[e]. offsets: [E+1]; counts: [E].
template <class Policy>
void expert_counts(const Policy& policy, const int64_t* offsets, int num_experts, int64_t* counts) {
  thrust::tabulate(policy, counts, counts + num_experts, detail::CountOp{offsets});
}

// Step 2: padded segment starts. padded_offsets: [E+1] output; padded_offsets[E] = rows.
// block_size is read in the block layout (>= 1), capacity in the capacity layout (>= every count).
template <class Policy>
void pad_offsets(const Policy& policy, const int64_t* offsets, int num_experts, Layout layout,
                 int64_t block_size, int64_t capacity, int64_t* padded_offsets) {
  thrust::tabulate(policy, padded_offsets, padded_offsets + num_experts + 1,
                   detail::PaddedCountOp{offsets, layout, block_size, capacity});
  thrust::inclusive_scan(policy, padded_offsets, padded_offsets + num_experts + 1, padded_offsets);
}

// Step 3: row_assignment [rows] (rows = padded_offsets[E], read back by the caller to size it):
// padding rows get -1, the k-th kept assignment of expert e goes to padded_offsets[e] + k.
// sorted_keys, order, offsets: outputs of permute_by_expert; num_kept = offsets[E].
template <class Policy>
void fill_row_assignment(const Policy& policy, const int32_t* sorted_keys, const int32_t* order,
                         int64_t num_kept, const int64_t* offsets, const int64_t* padded_offsets,
                         int64_t rows, int32_t* row_assignment) {
  thrust::fill(policy, row_assignment, row_assignment + rows, int32_t(-1));
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_kept),
                   detail::PlaceRowOp{sorted_keys, order, offsets, padded_offsets, row_assignment});
}

}  // namespace moesim
