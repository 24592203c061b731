// Serial references of the attention stage: plain loops, double accumulators, no BLAS, no Thrust.
//  - cached_attention_ref: the contract of cached_attention (attention.hpp), read from the same cache;
//  - causal_attention_full_ref: one whole sequence recomputed from scratch, position i attending to 0..i;
//  - attention_layer_sequence_ref: the whole attention sublayer (norm, projections, RoPE, attention,
//    output projection) over one sequence's full history, no cache: the oracle the KV-cache path must
//    match at every step. Host only, header only. Covered by tests/decoder/attention_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "src/decoder/attention_layer.hpp"
#include "src/decoder/norms_ref.hpp"
#include "src/decoder/rope_ref.hpp"

namespace moesim {

// Same inputs and output as cached_attention.
inline void cached_attention_ref(const float* q, const float* k_cache, const float* v_cache, const int64_t* seq_offset,
                                 const int32_t* seq, const int32_t* pos, int64_t num_tokens, int heads, int kv_heads,
                                 int head_dim, float* out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t base = seq_offset[seq[t]];
    for (int h = 0; h < heads; ++h) {
      const int kvh = h / (heads / kv_heads);
      const float* qrow = q + (t * heads + h) * head_dim;
      std::vector<double> score(pos[t] + 1);
      double m = -1e300;
      for (int64_t j = 0; j <= pos[t]; ++j) {
        double s = 0.0;
        for (int d = 0; d < head_dim; ++d) s += static_cast<double>(qrow[d]) * k_cache[((base + j) * kv_heads + kvh) * head_dim + d];
        score[j] = s * scale;
        m = std::max(m, score[j]);
      }
      double den = 0.0;
      std::vector<double> acc(head_dim, 0.0);
      for (int64_t j = 0; j <= pos[t]; ++j) {
        const double p = std::exp(score[j] - m);
        den += p;
        for (int d = 0; d < head_dim; ++d) acc[d] += p * v_cache[((base + j) * kv_heads + kvh) * head_dim + d];
      }
      for (int d = 0; d < head_dim; ++d) out[(t * heads + h) * head_dim + d] = static_cast<float>(acc[d] / den);
    }
  }
}

// One sequence of `len` tokens from scratch: q [len, heads, head_dim], k, v [len, kv_heads, head_dim]
// (RoPE already applied); out [len, heads, head_dim], position i attending to positions 0..i.
inline void causal_attention_full_ref(const float* q, const float* k, const float* v, int64_t len, int heads,
                                      int kv_heads, int head_dim, float* out) {
  std::vector<int64_t> offset = {0, len};
  std::vector<int32_t> seq(len, 0), pos(len);
  for (int64_t i = 0; i < len; ++i) pos[i] = static_cast<int32_t>(i);
  cached_attention_ref(q, k, v, offset.data(), seq.data(), pos.data(), len, heads, kv_heads, head_dim, out);
}

// The attention sublayer over one sequence's whole history, no cache: x [len, hidden] are the
// sublayer inputs at positions 0..len-1; out [len, hidden] (without the residual). Projections in double.
inline void attention_layer_sequence_ref(const AttentionWeights& w, const float* x, int64_t len, float* out) {
  const int64_t H = w.hidden, qw = static_cast<int64_t>(w.heads) * w.head_dim,
                kvw = static_cast<int64_t>(w.kv_heads) * w.head_dim;
  std::vector<float> xn(len * H), q(len * qw), k(len * kvw), v(len * kvw), attn(len * qw);
  rms_norm_ref(x, w.norm.data(), len, H, xn.data());
  auto project = [&](const std::vector<float>& wt, int64_t n_out, std::vector<float>& dst) {
    for (int64_t t = 0; t < len; ++t) {
      for (int64_t j = 0; j < n_out; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < H; ++i) acc += static_cast<double>(xn[t * H + i]) * wt[i * n_out + j];
        dst[t * n_out + j] = static_cast<float>(acc);
      }
    }
  };
  project(w.wq, qw, q);
  project(w.wk, kvw, k);
  project(w.wv, kvw, v);
  std::vector<int32_t> pos(len);
  for (int64_t i = 0; i < len; ++i) pos[i] = static_cast<int32_t>(i);
  apply_rope_ref(q.data(), pos.data(), len, w.heads, w.head_dim);
  apply_rope_ref(k.data(), pos.data(), len, w.kv_heads, w.head_dim);
  causal_attention_full_ref(q.data(), k.data(), v.data(), len, w.heads, w.kv_heads, w.head_dim, attn.data());
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t c = 0; c < H; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < qw; ++j) acc += static_cast<double>(attn[t * qw + j]) * w.wo[j * H + c];
      out[t * H + c] = static_cast<float>(acc);
    }
  }
}

}  // namespace moesim
