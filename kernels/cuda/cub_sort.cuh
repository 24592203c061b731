// The CUB overload of the dispatch/combine sort hook (kernels/permute.hpp): a stable LSD radix sort of
// (key, value) pairs over only the ceil(log2(bound + 1)) low key bits, keys in [0, bound]. It takes the
// exact policy type of the CUDA backend, so overload resolution picks it over the generic Thrust template
// (found by argument-dependent lookup through SortKeyBound) wherever permute.hpp or combine.hpp is
// instantiated after this header. Output equals thrust::stable_sort_by_key's. nvcc only.
// Covered by tests/gpu/dispatch_cuda_test.cpp.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/permute.hpp"

namespace moesim {
namespace cuda_detail {

// Key bits a radix sort needs for keys in [0, max_key]: ceil(log2(max_key + 1)), at least 1.
inline int radix_key_bits(int64_t max_key) {
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) <= max_key) ++bits;
  return bits;
}

}  // namespace cuda_detail

inline void stable_sort_small_keys(const cuda_detail::CudaPolicy& policy, int32_t* keys, int32_t* values, int64_t n,
                                   SortKeyBound bound) {
  (void)policy;
  using cuda_detail::DeviceBuffer;
  if (n <= 1) return;
  MOESIM_REQUIRE(n <= INT_MAX, "radix sort of " << n << " keys exceeds 2^31 - 1");
  MOESIM_REQUIRE(bound.value >= 0 && bound.value <= INT32_MAX, "sort key bound " << bound.value << " out of range");
  // Non-negative int32 keys have the same bits as uint32: sorting them unsigned over the low bits is exact.
  uint32_t* k = reinterpret_cast<uint32_t*>(keys);
  DeviceBuffer<uint32_t> k_alt(static_cast<size_t>(n));
  DeviceBuffer<int32_t> v_alt(static_cast<size_t>(n));
  cub::DoubleBuffer<uint32_t> kb(k, k_alt.get());
  cub::DoubleBuffer<int32_t> vb(values, v_alt.get());
  const int end_bit = cuda_detail::radix_key_bits(bound.value);
  const int items = static_cast<int>(n);
  size_t temp_bytes = 0;
  MOESIM_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, kb, vb, items, 0, end_bit, cuda_detail::stream()));
  DeviceBuffer<unsigned char> temp(temp_bytes);
  MOESIM_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, kb, vb, items, 0, end_bit, cuda_detail::stream()));
  // The double-buffer variant ends in whichever buffer the last pass wrote.
  if (kb.Current() != k) {
    MOESIM_CUDA_CHECK(cudaMemcpyAsync(k, kb.Current(), n * sizeof(uint32_t), cudaMemcpyDeviceToDevice,
                                      cuda_detail::stream()));
  }
  if (vb.Current() != values) {
    MOESIM_CUDA_CHECK(cudaMemcpyAsync(values, vb.Current(), n * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                      cuda_detail::stream()));
  }
}

}  // namespace moesim
