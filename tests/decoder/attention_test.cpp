// Tests of the attention stage: RoPE against its reference; cached attention against its reference on
// the same cache; and, for MHA and GQA with mixed prompt lengths, attention through the KV cache at
// every prefill and decode step against attention recomputed from scratch over each sequence's whole
// history (kernel level and whole sublayer with projections). Seeds are printed on failure.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include <thrust/system/omp/execution_policy.h>

#include "src/decoder/attention.hpp"
#include "src/decoder/attention_layer.hpp"
#include "src/decoder/attention_ref.hpp"
#include "src/decoder/kv_cache.hpp"
#include "src/decoder/rope.hpp"
#include "src/decoder/rope_ref.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

std::vector<float> randn(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(Rope, MatchesReference) {
  for (int head_dim : {1, 2, 7, 16}) {
    const uint64_t seed = 100 + head_dim;
    std::mt19937_64 rng(seed);
    const int64_t n = 9;
    const int heads = 3;
    std::vector<float> x = randn(rng, n * heads * head_dim);
    std::vector<int32_t> pos = {0, 1, 2, 5, 17, 100, 4095, 3, 0};
    std::vector<float> ref = x;
    apply_rope(thrust::omp::par, x.data(), pos.data(), n, heads, head_dim);
    apply_rope_ref(ref.data(), pos.data(), n, heads, head_dim);
    // The same double formula on both sides; only libm rounding could differ.
    EXPECT_TRUE(test::all_near(x, ref, 1e-6, 1e-6)) << "seed " << seed << ", head_dim " << head_dim;
  }
}

TEST(Rope, PositionZeroIsIdentityAndNormIsKept) {
  std::mt19937_64 rng(5);
  std::vector<float> x = randn(rng, 2 * 8), orig = x;
  std::vector<int32_t> pos = {0, 300};
  apply_rope(thrust::omp::par, x.data(), pos.data(), 2, 1, 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x[i], orig[i]);
  double n0 = 0, n1 = 0;
  for (int i = 8; i < 16; ++i) {
    n0 += double(orig[i]) * orig[i];
    n1 += double(x[i]) * x[i];
  }
  EXPECT_NEAR(n0, n1, 1e-5 * n0);  // a rotation keeps the norm (float rounding only)
}

struct AttnCase {
  int heads, kv_heads, head_dim;
};

// Drives prefill + decode steps of sequences with mixed prompt lengths through apply_rope, kv_append and
// cached_attention, and at every step compares each new token's output with causal attention over the
// sequence recomputed from scratch (RoPE re-applied to the whole history).
void check_cache_against_scratch(const AttnCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<int> prompt = {5, 1, 9, 3};
  const int steps = 6;
  const int64_t B = static_cast<int64_t>(prompt.size());
  const int64_t qw = int64_t{c.heads} * c.head_dim, kvw = int64_t{c.kv_heads} * c.head_dim;
  std::vector<int64_t> capacity;
  for (int L : prompt) capacity.push_back(L + steps);
  KvCache cache(1, c.kv_heads, c.head_dim, capacity);
  // Per sequence: the un-rotated q, k, v of every position so far.
  std::vector<std::vector<float>> hq(B), hk(B), hv(B);
  for (int step = 0; step <= steps; ++step) {
    std::vector<int32_t> seq, pos;
    for (int64_t b = 0; b < B; ++b) {
      const int first = step == 0 ? 0 : prompt[b] + step - 1;
      const int last = step == 0 ? prompt[b] : prompt[b] + step;
      for (int p = first; p < last; ++p) {
        seq.push_back(static_cast<int32_t>(b));
        pos.push_back(p);
      }
    }
    const int64_t n = static_cast<int64_t>(seq.size());
    std::vector<float> q = randn(rng, n * qw), k = randn(rng, n * kvw), v = randn(rng, n * kvw);
    for (int64_t t = 0; t < n; ++t) {
      hq[seq[t]].insert(hq[seq[t]].end(), q.begin() + t * qw, q.begin() + (t + 1) * qw);
      hk[seq[t]].insert(hk[seq[t]].end(), k.begin() + t * kvw, k.begin() + (t + 1) * kvw);
      hv[seq[t]].insert(hv[seq[t]].end(), v.begin() + t * kvw, v.begin() + (t + 1) * kvw);
    }
    const auto& policy = thrust::omp::par;
    apply_rope(policy, q.data(), pos.data(), n, c.heads, c.head_dim);
    apply_rope(policy, k.data(), pos.data(), n, c.kv_heads, c.head_dim);
    kv_append(policy, k.data(), v.data(), seq.data(), pos.data(), cache.seq_offset(), n, kvw, cache.k(0), cache.v(0));
    std::vector<float> out(n * qw), out_ref(n * qw);
    cached_attention(policy, q.data(), cache.k(0), cache.v(0), cache.seq_offset(), seq.data(), pos.data(), n, c.heads,
                     c.kv_heads, c.head_dim, out.data());
    cached_attention_ref(q.data(), cache.k(0), cache.v(0), cache.seq_offset(), seq.data(), pos.data(), n, c.heads,
                         c.kv_heads, c.head_dim, out_ref.data());
    // Float output accumulation (online softmax) against double: a few ulps per position.
    ASSERT_TRUE(test::all_near(out, out_ref, 1e-5, 1e-4)) << "seed " << seed << ", step " << step;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t b = seq[t], len = pos[t] + 1;
      std::vector<float> sq(hq[b].begin(), hq[b].begin() + len * qw), sk(hk[b].begin(), hk[b].begin() + len * kvw),
          sv(hv[b].begin(), hv[b].begin() + len * kvw);
      std::vector<int32_t> all(len);
      for (int64_t i = 0; i < len; ++i) all[i] = static_cast<int32_t>(i);
      apply_rope_ref(sq.data(), all.data(), len, c.heads, c.head_dim);
      apply_rope_ref(sk.data(), all.data(), len, c.kv_heads, c.head_dim);
      std::vector<float> full(len * qw);
      causal_attention_full_ref(sq.data(), sk.data(), sv.data(), len, c.heads, c.kv_heads, c.head_dim, full.data());
      const std::vector<float> got(out.begin() + t * qw, out.begin() + (t + 1) * qw);
      const std::vector<float> want(full.end() - qw, full.end());
      // Same tolerance as above: float accumulation against the double from-scratch recompute.
      ASSERT_TRUE(test::all_near(got, want, 1e-5, 1e-4))
          << "seed " << seed << ", step " << step << ", sequence " << b << ", position " << pos[t];
    }
  }
}

TEST(KvCacheAttention, MatchesRecomputeFromScratchMha) { check_cache_against_scratch({4, 4, 8}, 11); }
TEST(KvCacheAttention, MatchesRecomputeFromScratchGqa) { check_cache_against_scratch({6, 2, 8}, 12); }
TEST(KvCacheAttention, MatchesRecomputeFromScratchMqaOddHeadDim) { check_cache_against_scratch({3, 1, 5}, 13); }

TEST(KvCacheAttention, NoTokensIsANoOp) {
  KvCache cache(1, 1, 4, {3});
  std::vector<float> out = {42.0f};
  cached_attention(thrust::omp::par, nullptr, cache.k(0), cache.v(0), cache.seq_offset(), nullptr, nullptr, 0, 2, 1, 4,
                   out.data());
  EXPECT_EQ(out[0], 42.0f);
}

// The whole sublayer (RMSNorm, projections, RoPE, cache, attention, output projection) step by step
// against attention_layer_sequence_ref over each sequence's full input history.
void check_layer_against_scratch(int heads, int kv_heads, uint64_t seed) {
  const int64_t H = 32;
  const int head_dim = 8;
  const AttentionWeights w = make_attention_weights(H, heads, kv_heads, head_dim, seed);
  std::mt19937_64 rng(seed);
  const std::vector<int> prompt = {4, 1, 7};
  const int steps = 4;
  const int64_t B = static_cast<int64_t>(prompt.size());
  std::vector<int64_t> capacity;
  for (int L : prompt) capacity.push_back(L + steps);
  KvCache cache(2, kv_heads, head_dim, capacity);
  AttentionScratch scratch;
  std::vector<std::vector<float>> history(B);
  for (int step = 0; step <= steps; ++step) {
    std::vector<int32_t> seq, pos;
    for (int64_t b = 0; b < B; ++b) {
      const int first = step == 0 ? 0 : prompt[b] + step - 1;
      const int last = step == 0 ? prompt[b] : prompt[b] + step;
      for (int p = first; p < last; ++p) {
        seq.push_back(static_cast<int32_t>(b));
        pos.push_back(p);
      }
    }
    const int64_t n = static_cast<int64_t>(seq.size());
    const std::vector<float> x = randn(rng, n * H);
    for (int64_t t = 0; t < n; ++t) history[seq[t]].insert(history[seq[t]].end(), x.begin() + t * H, x.begin() + (t + 1) * H);
    std::vector<float> out(n * H);
    attention_layer_omp(w, cache, 1, x.data(), seq.data(), pos.data(), n, out.data(), scratch);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t b = seq[t], len = pos[t] + 1;
      std::vector<float> full(len * H);
      attention_layer_sequence_ref(w, history[b].data(), len, full.data());
      const std::vector<float> got(out.begin() + t * H, out.begin() + (t + 1) * H);
      const std::vector<float> want(full.begin() + (len - 1) * H, full.begin() + len * H);
      // float32 BLAS projections and accumulation against the double reference.
      ASSERT_TRUE(test::all_near(got, want, 1e-4, 1e-3))
          << "seed " << seed << ", step " << step << ", sequence " << b << ", position " << pos[t];
    }
  }
}

TEST(AttentionLayer, CachedMatchesSequenceRecomputeMha) { check_layer_against_scratch(4, 4, 21); }
TEST(AttentionLayer, CachedMatchesSequenceRecomputeGqa) { check_layer_against_scratch(4, 2, 22); }

TEST(AttentionLayer, PositionOutsideTheCacheIsRejected) {
  const AttentionWeights w = make_attention_weights(8, 2, 1, 4, 1);
  KvCache cache(1, 1, 4, {2});
  AttentionScratch scratch;
  std::vector<float> x(8, 1.0f), out(8);
  const int32_t seq = 0, pos = 2;
  EXPECT_THROW(attention_layer_omp(w, cache, 0, x.data(), &seq, &pos, 1, out.data(), scratch), PreconditionError);
}

}  // namespace
}  // namespace moesim
