// cached_attention_cuda (kernels/cuda/attention_cuda.cu) against the decoder's host attention on the same
// KV cache: cached_attention on Thrust's OpenMP backend and cached_attention_ref (src/decoder). Packed
// sequences of different lengths (1, 5, 300 slots), prefill (every position of a sequence) and decode
// (one token per sequence at its last position), grouped-query and multi-head, head_dim 1 to 256.
// Tolerance 1e-5 + 1e-4 * |ref| per element: the device keeps scores in float, the host in double.
// Label gpu; each test skips with the reason when no CUDA device is present.
#include <gtest/gtest.h>

#include <thrust/system/omp/execution_policy.h>

#include <cstdint>
#include <string>
#include <vector>

#include "src/decoder/attention.hpp"
#include "src/decoder/attention_ref.hpp"
#include "tests/gpu/cuda_test_support.hpp"
#include "kernels/cuda_backend.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

class AttentionCuda : public test::CudaTest {};

TEST_F(AttentionCuda, MatchesHostAttentionOnPackedSequences) {
  const uint64_t seed = 9100;
  const std::vector<int64_t> seq_offset = {0, 5, 6, 306};  // capacities 5, 1, 300
  const int num_seqs = 3;
  const int64_t slots = seq_offset.back();
  struct Heads {
    int heads, kv_heads;
  };
  for (Heads hc : {Heads{8, 2}, Heads{4, 4}, Heads{3, 1}}) {
    for (int head_dim : {1, 64, 100, 128, 256}) {
      const int64_t kv = slots * hc.kv_heads * head_dim;
      const std::vector<float> k_cache = test::random_floats(seed + head_dim, kv, -1.0f, 1.0f);
      const std::vector<float> v_cache = test::random_floats(seed + head_dim + 1, kv, -1.0f, 1.0f);
      // Prefill of sequence 2 (300 positions), then one decode token per sequence at its last slot.
      std::vector<int32_t> seq, pos;
      for (int p = 0; p < 300; ++p) {
        seq.push_back(2);
        pos.push_back(p);
      }
      for (int b = 0; b < num_seqs; ++b) {
        seq.push_back(b);
        pos.push_back(static_cast<int32_t>(seq_offset[b + 1] - seq_offset[b] - 1));
      }
      const int64_t num_tokens = static_cast<int64_t>(seq.size());
      const int64_t q_elems = num_tokens * hc.heads * head_dim;
      // Scaled queries sharpen the softmax so that the running-max rescaling is exercised.
      const std::vector<float> q = test::random_floats(seed + head_dim + 2, q_elems, -4.0f, 4.0f);
      std::vector<float> got(q_elems, 7.0f), host(q_elems), ref(q_elems);
      cached_attention_cuda(q.data(), k_cache.data(), v_cache.data(), seq_offset.data(), num_seqs, seq.data(),
                            pos.data(), num_tokens, hc.heads, hc.kv_heads, head_dim, got.data());
      cached_attention(thrust::omp::par, q.data(), k_cache.data(), v_cache.data(), seq_offset.data(), seq.data(),
                       pos.data(), num_tokens, hc.heads, hc.kv_heads, head_dim, host.data());
      cached_attention_ref(q.data(), k_cache.data(), v_cache.data(), seq_offset.data(), seq.data(), pos.data(),
                           num_tokens, hc.heads, hc.kv_heads, head_dim, ref.data());
      const std::string what = "heads " + std::to_string(hc.heads) + "/" + std::to_string(hc.kv_heads) +
                               " head_dim " + std::to_string(head_dim) + " seed " + std::to_string(seed);
      EXPECT_TRUE(test::all_near(got, ref, 1e-5, 1e-4)) << what << " (against cached_attention_ref)";
      EXPECT_TRUE(test::all_near(got, host, 1e-5, 1e-4)) << what << " (against cached_attention on OpenMP)";
    }
  }
}

TEST_F(AttentionCuda, SameInputsSameBytes) {
  const uint64_t seed = 9200;
  const std::vector<int64_t> seq_offset = {0, 64};
  const std::vector<float> kv = test::random_floats(seed, 64 * 2 * 32, -1.0f, 1.0f);
  const std::vector<float> q = test::random_floats(seed + 1, 64 * 4 * 32, -1.0f, 1.0f);
  std::vector<int32_t> seq(64, 0), pos(64);
  for (int p = 0; p < 64; ++p) pos[p] = p;
  std::vector<float> a(q.size()), b(q.size());
  for (std::vector<float>* out : {&a, &b}) {
    cached_attention_cuda(q.data(), kv.data(), kv.data(), seq_offset.data(), 1, seq.data(), pos.data(), 64, 4, 2, 32,
                          out->data());
  }
  EXPECT_TRUE(test::same_bytes(a, b)) << "seed " << seed;
}

TEST_F(AttentionCuda, BadShapesAreRejected) {
  const std::vector<int64_t> seq_offset = {0, 4};
  std::vector<float> buf(4 * 2 * 300, 0.0f), out(4 * 300);
  std::vector<int32_t> seq = {0}, pos = {4};  // position 4 is outside the 4 slots
  EXPECT_THROW(cached_attention_cuda(buf.data(), buf.data(), buf.data(), seq_offset.data(), 1, seq.data(), pos.data(),
                                     1, 2, 2, 8, out.data()),
               PreconditionError);
  pos = {3};
  EXPECT_THROW(cached_attention_cuda(buf.data(), buf.data(), buf.data(), seq_offset.data(), 1, seq.data(), pos.data(),
                                     1, 3, 2, 8, out.data()),
               PreconditionError);  // 3 heads over 2 KV heads
  EXPECT_THROW(cached_attention_cuda(buf.data(), buf.data(), buf.data(), seq_offset.data(), 1, seq.data(), pos.data(),
                                     1, 2, 2, 300, out.data()),
               PreconditionError);  // head_dim over 256
}

}  // namespace
}  // namespace moesim
