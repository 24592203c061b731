// Decoder attention over a KV cache on the CUDA backend, with the inputs of cached_attention
// (src/decoder/attention.hpp): one thread block per (token, head), each warp walking a strided share of
// the token's cached positions with an online softmax, the warps merged in a fixed order through shared
// memory. q, out: [num_tokens, heads, head_dim]; k_cache, v_cache: [slots, kv_heads, head_dim]; float32.
// Deterministic (fixed reduction order). nvcc only. Test: tests/gpu/attention_cuda_test.cpp.
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"

namespace moesim {
namespace cuda_detail {

constexpr int kAttnWarps = 4;
constexpr int kAttnMaxHeadDim = 256;
constexpr int kAttnPerLane = kAttnMaxHeadDim / 32;

// Lane l holds head-dimension elements l, l + 32, ...: coalesced reads of each cached row. Warp w visits
// positions w, w + kAttnWarps, ...; its running max m, normaliser l and weighted sum acc follow the
// online softmax (Milakov & Gimelshein 2018, arXiv:1805.02867). The warps' partial states are merged in
// warp order.
__global__ void cached_attention_kernel(const float* __restrict__ q, const float* __restrict__ k_cache,
                                        const float* __restrict__ v_cache, const int64_t* __restrict__ seq_offset,
                                        const int32_t* __restrict__ seq, const int32_t* __restrict__ pos, int heads,
                                        int kv_heads, int head_dim, float scale, float* __restrict__ out) {
  __shared__ float s_m[kAttnWarps];
  __shared__ float s_l[kAttnWarps];
  __shared__ float s_acc[kAttnWarps][kAttnMaxHeadDim];
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kvh = h / (heads / kv_heads);
  const int64_t base = seq_offset[seq[t]];
  const int64_t len = static_cast<int64_t>(pos[t]) + 1;
  const float* qrow = q + (t * heads + h) * head_dim;

  float qv[kAttnPerLane], acc[kAttnPerLane];
  for (int i = 0; i < kAttnPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < head_dim ? qrow[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int64_t j = warp; j < len; j += kAttnWarps) {
    const int64_t row = ((base + j) * kv_heads + kvh) * head_dim;
    float dot = 0.0f;
    for (int i = 0; i < kAttnPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < head_dim) dot += qv[i] * k_cache[row + d];
    }
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const float s = dot * scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * correction + p;
    for (int i = 0; i < kAttnPerLane; ++i) {
      const int d = lane + 32 * i;
      const float v = d < head_dim ? v_cache[row + d] : 0.0f;
      acc[i] = acc[i] * correction + p * v;
    }
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
  for (int i = 0; i < kAttnPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < head_dim) s_acc[warp][d] = acc[i];
  }
  __syncthreads();
  float m_all = -FLT_MAX;
  for (int w = 0; w < kAttnWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kAttnWarps; ++w) l_all += s_l[w] * expf(s_m[w] - m_all);
  float* orow = out + (t * heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) o += s_acc[w][d] * expf(s_m[w] - m_all);
    orow[d] = o / l_all;  // l_all >= 1: the position holding the maximum contributes exp(0)
  }
}

void require_attention_shape(int64_t num_tokens, int heads, int kv_heads, int head_dim) {
  MOESIM_REQUIRE(num_tokens >= 0 && num_tokens <= INT32_MAX, "attention needs num_tokens in [0, 2^31), got "
                                                                 << num_tokens);
  MOESIM_REQUIRE(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0 && heads <= 65535,
                 "heads (" << heads << ") must be a positive multiple of kv_heads (" << kv_heads << ")");
  MOESIM_REQUIRE(head_dim >= 1 && head_dim <= kAttnMaxHeadDim,
                 "the CUDA attention needs head_dim in [1, " << kAttnMaxHeadDim << "], got " << head_dim);
}

}  // namespace cuda_detail

inline namespace MOESIM_CUDA_API_NS {

void cached_attention_cuda_device(const float* q, const float* k_cache, const float* v_cache,
                                  const int64_t* seq_offset, const int32_t* seq, const int32_t* pos,
                                  int64_t num_tokens, int heads, int kv_heads, int head_dim, float* out) {
  cuda_detail::require_attention_shape(num_tokens, heads, kv_heads, head_dim);
  cuda_detail::require_device();
  if (num_tokens == 0) return;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(heads));
  cuda_detail::cached_attention_kernel<<<grid, 32 * cuda_detail::kAttnWarps, 0, cuda_detail::stream()>>>(
      q, k_cache, v_cache, seq_offset, seq, pos, heads, kv_heads, head_dim, scale, out);
  MOESIM_CUDA_LAUNCH_CHECK(cached_attention_kernel);
}

void cached_attention_cuda(const float* q, const float* k_cache, const float* v_cache, const int64_t* seq_offset,
                           int num_seqs, const int32_t* seq, const int32_t* pos, int64_t num_tokens, int heads,
                           int kv_heads, int head_dim, float* out) {
  cuda_detail::require_attention_shape(num_tokens, heads, kv_heads, head_dim);
  MOESIM_REQUIRE(num_seqs >= 0 && seq_offset != nullptr && seq_offset[0] == 0,
                 "attention needs num_seqs >= 0 and seq_offset starting at 0");
  for (int b = 0; b < num_seqs; ++b) {
    MOESIM_REQUIRE(seq_offset[b + 1] >= seq_offset[b], "seq_offset must be non-decreasing (sequence " << b << ")");
  }
  for (int64_t t = 0; t < num_tokens; ++t) {
    MOESIM_REQUIRE(seq[t] >= 0 && seq[t] < num_seqs, "token " << t << " names sequence " << seq[t] << " of "
                                                              << num_seqs);
    MOESIM_REQUIRE(pos[t] >= 0 && seq_offset[seq[t]] + pos[t] < seq_offset[seq[t] + 1],
                   "token " << t << " at position " << pos[t] << " lies outside its sequence's cache slots");
  }
  cuda_detail::require_device();
  if (num_tokens == 0) return;
  using cuda_detail::DeviceBuffer;
  using cuda_detail::to_device;
  const size_t q_elems = static_cast<size_t>(num_tokens) * heads * head_dim;
  const size_t kv_elems = static_cast<size_t>(seq_offset[num_seqs]) * kv_heads * head_dim;
  const DeviceBuffer<float> d_q = to_device(q, q_elems);
  const DeviceBuffer<float> d_k = to_device(k_cache, kv_elems);
  const DeviceBuffer<float> d_v = to_device(v_cache, kv_elems);
  const DeviceBuffer<int64_t> d_offset = to_device(seq_offset, static_cast<size_t>(num_seqs) + 1);
  const DeviceBuffer<int32_t> d_seq = to_device(seq, static_cast<size_t>(num_tokens));
  const DeviceBuffer<int32_t> d_pos = to_device(pos, static_cast<size_t>(num_tokens));
  DeviceBuffer<float> d_out(q_elems);
  cached_attention_cuda_device(d_q.get(), d_k.get(), d_v.get(), d_offset.get(), d_seq.get(), d_pos.get(), num_tokens,
                               heads, kv_heads, head_dim, d_out.get());
  cuda_detail::copy_to_host(out, d_out.get(), q_elems);
}

}  // inline namespace MOESIM_CUDA_API_NS

}  // namespace moesim
