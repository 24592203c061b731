// The attention sublayer of a decoder layer on the host: RMSNorm -> Q, K, V projections (OpenBLAS) ->
// RoPE on Q and K -> K, V appended to the KV cache -> cached causal attention (MHA or GQA) -> output
// projection. x, out: [num_tokens, hidden] float32, tokens packed from any mix of sequences and positions.
// Bytewise deterministic at any thread count (OpenBLAS splits GEMMs over M and N only; the Thrust
// functors write one row each, on the OpenMP policy, or the serial one for small work). Built by g++. The from-scratch oracle is attention_layer_sequence_ref in
// attention_ref.hpp; covered by tests/decoder/attention_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/decoder/kv_cache.hpp"

namespace moesim {

// One layer's attention weights, float32 row-major (y = x W).
struct AttentionWeights {
  int64_t hidden = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  std::vector<float> norm;  // [hidden] RMSNorm weight (ones, as models are initialised)
  std::vector<float> wq;    // [hidden, heads * head_dim]
  std::vector<float> wk;    // [hidden, kv_heads * head_dim]
  std::vector<float> wv;    // [hidden, kv_heads * head_dim]
  std::vector<float> wo;    // [heads * head_dim, hidden]
};

// N(0, 1/fan_in) projections from a counter-based generator: element i of each tensor depends only on
// (seed, tensor, i), so the weights are the same at any thread count. Requires heads % kv_heads == 0.
AttentionWeights make_attention_weights(int64_t hidden, int heads, int kv_heads, int head_dim, uint64_t seed);

// Buffers of attention_layer_omp, reused across calls (grown on demand).
struct AttentionScratch {
  std::vector<float> xn, q, k, v, attn;
};

// out = Wo . attention(RoPE(norm(x) Wq), cache), after appending RoPE(norm(x) Wk) and norm(x) Wv at
// (seq[t], pos[t]) in `layer` of the cache. seq, pos: [num_tokens]; every query reads positions
// 0..pos[t] of its sequence, which must be in the cache by the end of the append (earlier steps or this
// batch). out does not include the residual.
void attention_layer_omp(const AttentionWeights& w, KvCache& cache, int layer, const float* x, const int32_t* seq,
                         const int32_t* pos, int64_t num_tokens, float* out, AttentionScratch& scratch);

// out[i] = scale * N(0, 1), element i from (seed, stream, i) (common/counter_rng.hpp); OpenMP-parallel, same bits
// at any thread count.
void fill_seeded_normal(std::vector<float>& out, uint64_t seed, uint64_t stream, double scale);

}  // namespace moesim
