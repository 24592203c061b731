// Tests of the KV cache: preallocated slots per sequence, bytes in use by the formula
// layers * 2 * kv_heads * head_dim * 4 * sum of cached tokens, append placement, and refusals.
#include <gtest/gtest.h>

#include <vector>

#include <thrust/system/omp/execution_policy.h>

#include "src/decoder/kv_cache.hpp"

namespace moesim {
namespace {

TEST(KvCache, SlotsAndBytesFollowTheFormula) {
  const int layers = 3, kv_heads = 2, head_dim = 4;
  const std::vector<int64_t> capacity = {5 + 3, 1 + 3, 7 + 3};
  KvCache cache(layers, kv_heads, head_dim, capacity);
  EXPECT_EQ(cache.slots(), 8 + 4 + 10);
  EXPECT_EQ(cache.seq_offset()[1], 8);
  EXPECT_EQ(cache.seq_offset()[2], 12);
  EXPECT_DOUBLE_EQ(cache.allocated_bytes(), 3.0 * 2 * 2 * 4 * 4 * 22);
  EXPECT_DOUBLE_EQ(cache.used_bytes(), 0.0);
  const std::vector<int> prompt = {5, 1, 7};
  for (int step = 0; step <= 3; ++step) {
    int64_t cached = 0;
    for (int b = 0; b < 3; ++b) {
      cache.set_length(b, prompt[b] + step);
      cached += prompt[b] + step;
    }
    EXPECT_EQ(cache.cached_tokens(), cached);
    EXPECT_DOUBLE_EQ(cache.used_bytes(), double(layers) * 2 * kv_heads * head_dim * 4 * cached) << "step " << step;
  }
  EXPECT_DOUBLE_EQ(KvCache::bytes_for(32, 8, 128, 1000, 2), 32.0 * 2 * 8 * 128 * 2 * 1000);
}

TEST(KvCache, AppendWritesEachTokenAtItsSlot) {
  KvCache cache(1, 1, 2, {3, 2});
  const std::vector<float> k = {1, 2, 3, 4, 5, 6}, v = {-1, -2, -3, -4, -5, -6};
  const std::vector<int32_t> seq = {1, 0, 1}, pos = {0, 2, 1};
  kv_append(thrust::omp::par, k.data(), v.data(), seq.data(), pos.data(), cache.seq_offset(), 3, 2, cache.k(0), cache.v(0));
  // Sequence 0 owns slots 0..2, sequence 1 slots 3..4.
  const std::vector<float> want_k = {0, 0, 0, 0, 3, 4, 1, 2, 5, 6};
  const std::vector<float> want_v = {0, 0, 0, 0, -3, -4, -1, -2, -5, -6};
  EXPECT_EQ(std::vector<float>(cache.k(0), cache.k(0) + 10), want_k);
  EXPECT_EQ(std::vector<float>(cache.v(0), cache.v(0) + 10), want_v);
}

TEST(KvCache, LengthOverCapacityIsRejected) {
  KvCache cache(1, 1, 1, {4, 0});
  EXPECT_NO_THROW(cache.set_length(0, 4));
  EXPECT_THROW(cache.set_length(0, 5), PreconditionError);
  EXPECT_THROW(cache.set_length(1, 1), PreconditionError);
  EXPECT_THROW(KvCache(0, 1, 1, {1}), PreconditionError);
}

}  // namespace
}  // namespace moesim
