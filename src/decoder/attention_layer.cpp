// Host attention sublayer (see attention_layer.hpp): projections on the fixed-order GEMM
// (kernels/gemm_fixed_order.hpp, the same bits on any machine), Thrust/OpenMP RMSNorm, RoPE,
// KV-cache append and cached attention. Built by g++. Covered by tests/decoder/attention_test.cpp.
#include "src/decoder/attention_layer.hpp"

#include <cmath>

#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>

#include "src/common/counter_rng.hpp"
#include "src/decoder/attention.hpp"
#include "src/decoder/norms.hpp"
#include "src/decoder/rope.hpp"
#include "kernels/gemm_fixed_order.hpp"

namespace moesim {

namespace {

// Elementwise work below this many operations runs on the calling thread: an OpenMP region costs a
// fork and a barrier, which for a decode step's few rows outweighs the work (and, on a busy machine,
// waits for a descheduled thread). Results are the same either way: each functor writes its own rows.
constexpr int64_t kSerialWork = int64_t{1} << 16;

template <class Run>
void with_policy(int64_t work, Run run) {
  if (work < kSerialWork) {
    run(thrust::cpp::par);
  } else {
    run(thrust::omp::par);
  }
}

}  // namespace

void fill_seeded_normal(std::vector<float>& out, uint64_t seed, uint64_t stream, double scale) {
  const int64_t n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static) if (n >= kSerialWork)
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(scale * counter_normal(seed, stream, i));
}

AttentionWeights make_attention_weights(int64_t hidden, int heads, int kv_heads, int head_dim, uint64_t seed) {
  MOESIM_REQUIRE(hidden >= 1 && heads >= 1 && kv_heads >= 1 && head_dim >= 1 && heads % kv_heads == 0,
                 "attention needs hidden, heads, kv_heads, head_dim >= 1 and kv_heads dividing heads; got "
                     << hidden << ", " << heads << ", " << kv_heads << ", " << head_dim);
  AttentionWeights w;
  w.hidden = hidden;
  w.heads = heads;
  w.kv_heads = kv_heads;
  w.head_dim = head_dim;
  const int64_t qw = static_cast<int64_t>(heads) * head_dim, kvw = static_cast<int64_t>(kv_heads) * head_dim;
  w.norm.assign(hidden, 1.0f);
  w.wq.resize(hidden * qw);
  w.wk.resize(hidden * kvw);
  w.wv.resize(hidden * kvw);
  w.wo.resize(qw * hidden);
  const double in_scale = 1.0 / std::sqrt(static_cast<double>(hidden));
  fill_seeded_normal(w.wq, seed, 101, in_scale);
  fill_seeded_normal(w.wk, seed, 102, in_scale);
  fill_seeded_normal(w.wv, seed, 103, in_scale);
  fill_seeded_normal(w.wo, seed, 104, 1.0 / std::sqrt(static_cast<double>(qw)));
  return w;
}

void attention_layer_omp(const AttentionWeights& w, KvCache& cache, int layer, const float* x, const int32_t* seq,
                         const int32_t* pos, int64_t num_tokens, float* out, AttentionScratch& s) {
  MOESIM_REQUIRE(layer >= 0 && layer < cache.layers(), "layer " << layer << " outside the cache's " << cache.layers());
  MOESIM_REQUIRE(cache.kv_heads() == w.kv_heads && cache.head_dim() == w.head_dim,
                 "KV cache shape (" << cache.kv_heads() << " x " << cache.head_dim() << ") does not match the weights ("
                                    << w.kv_heads << " x " << w.head_dim << ")");
  for (int64_t t = 0; t < num_tokens; ++t) {
    MOESIM_REQUIRE(seq[t] >= 0 && seq[t] < cache.num_seqs() && pos[t] >= 0 && pos[t] < cache.capacity(seq[t]),
                   "token " << t << " at (sequence " << seq[t] << ", position " << pos[t]
                            << ") is outside the KV cache");
  }
  if (num_tokens == 0) return;
  const int64_t H = w.hidden, qw = static_cast<int64_t>(w.heads) * w.head_dim, kvw = cache.kv_width();
  s.xn.resize(num_tokens * H);
  s.q.resize(num_tokens * qw);
  s.k.resize(num_tokens * kvw);
  s.v.resize(num_tokens * kvw);
  s.attn.resize(num_tokens * qw);
  int64_t attended = 0;
  for (int64_t t = 0; t < num_tokens; ++t) attended += static_cast<int64_t>(pos[t]) + 1;
  with_policy(num_tokens * H, [&](const auto& policy) { rms_norm(policy, x, w.norm.data(), num_tokens, H, s.xn.data()); });
  sgemm_fixed_order_omp(s.xn.data(), w.wq.data(), s.q.data(), num_tokens, H, qw);
  sgemm_fixed_order_omp(s.xn.data(), w.wk.data(), s.k.data(), num_tokens, H, kvw);
  sgemm_fixed_order_omp(s.xn.data(), w.wv.data(), s.v.data(), num_tokens, H, kvw);
  with_policy(num_tokens * (qw + 2 * kvw), [&](const auto& policy) {
    apply_rope(policy, s.q.data(), pos, num_tokens, w.heads, w.head_dim);
    apply_rope(policy, s.k.data(), pos, num_tokens, w.kv_heads, w.head_dim);
    kv_append(policy, s.k.data(), s.v.data(), seq, pos, cache.seq_offset(), num_tokens, kvw, cache.k(layer),
              cache.v(layer));
  });
  with_policy(attended * qw * 2, [&](const auto& policy) {
    cached_attention(policy, s.q.data(), cache.k(layer), cache.v(layer), cache.seq_offset(), seq, pos, num_tokens,
                     w.heads, w.kv_heads, w.head_dim, s.attn.data());
  });
  sgemm_fixed_order_omp(s.attn.data(), w.wo.data(), out, num_tokens, qw, H);
}

}  // namespace moesim
