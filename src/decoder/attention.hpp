// Causal scaled dot-product attention over a KV cache (Vaswani et al. 2017, eq. 1), MHA or GQA (Ainslie et
// al. 2023, arXiv:2305.13245: query head h reads KV head h / (heads / kv_heads)); query t of sequence seq[t]
// at position pos[t] attends to positions 0..pos[t] of its own sequence, so a packed batch mixes any
// lengths with no padding. q, out: [num_tokens, heads, head_dim]; k_cache, v_cache as KvCache lays them out.
// One online-softmax pass per (token, head), one functor call per output row: bytewise deterministic.
// Backend-neutral (Thrust, policy first); twin: attention_ref.hpp; test: tests/decoder/attention_test.cpp.
#pragma once

#include <math.h>

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"

namespace moesim {

namespace decoder_detail {

struct CachedAttentionOp {
  const float* q;
  const float* k_cache;
  const float* v_cache;
  const int64_t* seq_offset;
  const int32_t* seq;
  const int32_t* pos;
  int heads, kv_heads, head_dim;
  float scale;
  float* out;
  // q . k in float over 8 interleaved lanes (a fixed order, so deterministic; the lanes vectorise).
  MOESIM_HD float score(const float* qrow, int64_t slot, int kvh) const {
    const float* krow = k_cache + (slot * kv_heads + kvh) * head_dim;
    float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int d = 0;
    for (; d + 8 <= head_dim; d += 8)
      for (int l = 0; l < 8; ++l) lane[l] += qrow[d + l] * krow[d + l];
    for (; d < head_dim; ++d) lane[d % 8] += qrow[d] * krow[d];
    return (((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]))) * scale;
  }
  MOESIM_HD void operator()(int64_t i) const {
    const int64_t t = i / heads;
    const int h = static_cast<int>(i % heads);
    const int kvh = h / (heads / kv_heads);
    const float* qrow = q + i * head_dim;
    const int64_t base = seq_offset[seq[t]];
    const int64_t n = static_cast<int64_t>(pos[t]) + 1;
    float* orow = out + i * head_dim;
    for (int d = 0; d < head_dim; ++d) orow[d] = 0.0f;
    // Online softmax (Milakov & Gimelshein 2018, arXiv:1805.02867): one pass over the positions,
    // rescaling the running sum and output whenever the running max grows.
    float m = -3.0e38f;
    double den = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const float s = score(qrow, base + j, kvh);
      if (s > m) {
        const float rescale = expf(m - s);
        den *= rescale;
        for (int d = 0; d < head_dim; ++d) orow[d] *= rescale;
        m = s;
      }
      const float p = expf(s - m);
      den += p;
      const float* vrow = v_cache + ((base + j) * kv_heads + kvh) * head_dim;
      for (int d = 0; d < head_dim; ++d) orow[d] += p * vrow[d];
    }
    const float inv = static_cast<float>(1.0 / den);
    for (int d = 0; d < head_dim; ++d) orow[d] *= inv;
  }
};

}  // namespace decoder_detail

// seq_offset: [num_seqs + 1]; seq, pos: [num_tokens]. Requires heads % kv_heads == 0 and the cache rows
// of positions 0..pos[t] of every query's sequence written (the query's own row included).
template <class Policy>
void cached_attention(const Policy& policy, const float* q, const float* k_cache, const float* v_cache,
                      const int64_t* seq_offset, const int32_t* seq, const int32_t* pos, int64_t num_tokens, int heads,
                      int kv_heads, int head_dim, float* out) {
  if (num_tokens == 0) return;
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(head_dim)));
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0),
                   thrust::counting_iterator<int64_t>(num_tokens * heads),
                   decoder_detail::CachedAttentionOp{q, k_cache, v_cache, seq_offset, seq, pos, heads, kv_heads,
                                                     head_dim, scale, out});
}

}  // namespace moesim
