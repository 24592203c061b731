// The decoder's KV cache: per layer, K and V rows [slot, kv_heads, head_dim] float32 for every sequence,
// preallocated to prompt_len + decode_steps slots per sequence (sequence b owns slots
// [seq_offset[b], seq_offset[b+1])), so attention at any step reads one contiguous block per sequence.
// kv_append (backend-neutral, Thrust policy first) writes new rows at their positions: pure copies,
// deterministic. Bytes in use = layers * 2 * kv_heads * head_dim * elem_bytes * sum_b cached_b.
// Host class, header only. Covered by tests/decoder/kv_cache_test.cpp and tests/decoder/attention_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/error.hpp"
#include "src/common/portability.hpp"

namespace moesim {

namespace decoder_detail {

// One call per new token: copies its K and V rows into the slot of (seq, pos).
struct KvAppendOp {
  const float* k_new;
  const float* v_new;
  const int32_t* seq;
  const int32_t* pos;
  const int64_t* seq_offset;
  int64_t kv_width;
  float* k_cache;
  float* v_cache;
  MOESIM_HD void operator()(int64_t t) const {
    const int64_t slot = seq_offset[seq[t]] + pos[t];
    for (int64_t c = 0; c < kv_width; ++c) {
      k_cache[slot * kv_width + c] = k_new[t * kv_width + c];
      v_cache[slot * kv_width + c] = v_new[t * kv_width + c];
    }
  }
};

}  // namespace decoder_detail

// k_new, v_new: [num_tokens, kv_width] (kv_width = kv_heads * head_dim); seq, pos: [num_tokens];
// seq_offset: [num_seqs + 1]; k_cache, v_cache: [seq_offset[num_seqs], kv_width]. Every (seq, pos) must
// lie inside its sequence's slots and be distinct.
template <class Policy>
void kv_append(const Policy& policy, const float* k_new, const float* v_new, const int32_t* seq, const int32_t* pos,
               const int64_t* seq_offset, int64_t num_tokens, int64_t kv_width, float* k_cache, float* v_cache) {
  if (num_tokens == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   decoder_detail::KvAppendOp{k_new, v_new, seq, pos, seq_offset, kv_width, k_cache, v_cache});
}

class KvCache {
 public:
  KvCache() = default;
  // capacity: [num_seqs] slots per sequence (prompt_len + decode_steps).
  KvCache(int layers, int kv_heads, int head_dim, const std::vector<int64_t>& capacity)
      : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), length_(capacity.size(), 0) {
    MOESIM_REQUIRE(layers >= 1 && kv_heads >= 1 && head_dim >= 1,
                   "KV cache needs layers, kv_heads, head_dim >= 1; got " << layers << ", " << kv_heads << ", "
                                                                          << head_dim);
    seq_offset_.assign(capacity.size() + 1, 0);
    for (size_t b = 0; b < capacity.size(); ++b) {
      MOESIM_REQUIRE(capacity[b] >= 0, "KV cache capacity of sequence " << b << " is " << capacity[b]);
      seq_offset_[b + 1] = seq_offset_[b] + capacity[b];
    }
    const size_t per_layer = static_cast<size_t>(slots() * kv_width());
    k_.assign(layers, std::vector<float>(per_layer, 0.0f));
    v_.assign(layers, std::vector<float>(per_layer, 0.0f));
  }

  // Bytes of a cache holding `cached_tokens` tokens (summed over sequences) in every layer.
  static double bytes_for(int layers, int kv_heads, int head_dim, double cached_tokens, double elem_bytes) {
    return static_cast<double>(layers) * 2.0 * kv_heads * head_dim * elem_bytes * cached_tokens;
  }

  int layers() const { return layers_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  int64_t kv_width() const { return static_cast<int64_t>(kv_heads_) * head_dim_; }
  int64_t num_seqs() const { return static_cast<int64_t>(length_.size()); }
  int64_t slots() const { return seq_offset_.empty() ? 0 : seq_offset_.back(); }
  int64_t capacity(int64_t b) const { return seq_offset_[b + 1] - seq_offset_[b]; }
  const int64_t* seq_offset() const { return seq_offset_.data(); }  // [num_seqs + 1]

  float* k(int layer) { return k_[layer].data(); }  // [slots, kv_heads, head_dim]
  float* v(int layer) { return v_[layer].data(); }
  const float* k(int layer) const { return k_[layer].data(); }
  const float* v(int layer) const { return v_[layer].data(); }

  // Tokens cached for sequence b (positions 0..length-1 hold valid rows in every layer).
  int64_t length(int64_t b) const { return length_[b]; }
  int64_t cached_tokens() const {
    int64_t n = 0;
    for (int64_t l : length_) n += l;
    return n;
  }
  // Records that sequence b now holds `length` tokens in every layer (the decoder calls it once per step,
  // after every layer has appended).
  void set_length(int64_t b, int64_t length) {
    MOESIM_REQUIRE(length >= 0 && length <= capacity(b),
                   "sequence " << b << " would hold " << length << " tokens, capacity " << capacity(b));
    length_[b] = length;
  }

  double allocated_bytes() const { return bytes_for(layers_, kv_heads_, head_dim_, static_cast<double>(slots()), 4); }
  double used_bytes() const { return bytes_for(layers_, kv_heads_, head_dim_, static_cast<double>(cached_tokens()), 4); }

 private:
  int layers_ = 0, kv_heads_ = 0, head_dim_ = 0;
  std::vector<int64_t> seq_offset_;
  std::vector<int64_t> length_;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace moesim
