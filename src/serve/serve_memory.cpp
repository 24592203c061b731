// What a serving rank's memory holds (see serve_memory.hpp).
#include "src/serve/serve_memory.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "src/common/error.hpp"

namespace moesim {
namespace {

int cache_layers(const ModelConfig& m, bool with_mtp) { return m.layers + (with_mtp ? m.mtp_layers : 0); }

// The attention's projection weights of one layer, whole (before the TP split).
double attention_weights(const ModelConfig& m) {
  const double h = static_cast<double>(m.hidden), heads = m.heads, d = m.head_dim;
  if (m.attention == AttentionKind::gqa) return h * (heads + 2.0 * m.kv_heads) * d + heads * d * h;
  const double qk = d + m.qk_rope_head_dim, v = m.v_head_dim > 0 ? m.v_head_dim : d;
  const double q = m.q_lora_rank > 0 ? h * m.q_lora_rank + static_cast<double>(m.q_lora_rank) * heads * qk : h * heads * qk;
  const double kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + static_cast<double>(m.kv_lora_rank) * heads * (d + v);
  return q + kv + heads * v * h;
}

double mlp_weights(const ModelConfig& m, int64_t ffn) {
  return (m.gated_experts ? 3.0 : 2.0) * static_cast<double>(m.hidden) * static_cast<double>(ffn);
}

}  // namespace

double kv_bytes_per_token(const ModelConfig& m, int attention_tp, double kv_bytes, bool with_mtp) {
  const int tp = std::max(1, attention_tp);
  const double per_layer = m.attention == AttentionKind::mla
                               ? static_cast<double>(m.kv_lora_rank + m.qk_rope_head_dim)
                               : 2.0 * ((m.kv_heads + tp - 1) / tp) * static_cast<double>(m.head_dim);
  return per_layer * kv_bytes * cache_layers(m, with_mtp);
}

double weight_bytes_per_gpu(const ModelConfig& m, int ep, int redundant_experts, int attention_tp, bool with_mtp) {
  const int tp = std::max(1, attention_tp);
  const int moe = moe_layer_count(m) + (with_mtp ? m.mtp_layers : 0);
  const int dense = m.layers - moe_layer_count(m);
  const double dense_ffn = static_cast<double>(m.dense_ffn > 0 ? m.dense_ffn : m.ffn);
  const double h = static_cast<double>(m.hidden);
  double replicated = cache_layers(m, with_mtp) * attention_weights(m) +
                      moe * (h * m.experts + m.shared_experts * mlp_weights(m, m.ffn)) +
                      dense * mlp_weights(m, static_cast<int64_t>(dense_ffn)) + 2.0 * h * m.vocab;
  if (with_mtp) replicated += m.mtp_layers * 2.0 * h * h;  // each MTP module's 2h -> h projection
  const double slots = static_cast<double>(m.experts + redundant_experts) / std::max(1, ep);
  const double experts = moe * slots * mlp_weights(m, m.ffn) * bytes_per_weight(expert_format(m));
  return replicated / tp * dtype_bytes(m.dtype) + experts;
}

double activation_bytes(const ModelConfig& m, int64_t max_num_tokens, int64_t max_batch, int attention_tp) {
  const double t = static_cast<double>(max_num_tokens), h = static_cast<double>(m.hidden);
  const double hidden = t * kActivationCopies * h * 2;
  const double expert_rows = t * m.top_k * (m.gated_experts ? 2.0 : 1.0) * static_cast<double>(m.ffn) * 2;
  const double logits = static_cast<double>(max_batch) * std::ceil(static_cast<double>(m.vocab) / std::max(1, attention_tp)) * 4;
  return hidden + expert_rows + logits;
}

KvCapacity kv_capacity(const ModelConfig& m, double memory_bytes, double fraction, int ep, int redundant_experts,
                       int attention_tp, double kv_bytes, int64_t max_num_tokens, int64_t max_batch, bool with_mtp) {
  if (!(memory_bytes > 0))
    throw ConfigError("hardware.memory_gib: expected the GPU's memory to size the KV cache, got none");
  if (!(fraction > 0) || fraction > 1)
    throw ConfigError("mem_fraction: expected a fraction of the GPU's memory in (0, 1], got " + std::to_string(fraction));
  KvCapacity c;
  c.memory_bytes = memory_bytes;
  c.usable_bytes = memory_bytes * fraction;
  c.weight_bytes = weight_bytes_per_gpu(m, ep, redundant_experts, attention_tp, with_mtp);
  c.activation_bytes = activation_bytes(m, max_num_tokens, max_batch, attention_tp);
  c.kv_bytes = c.usable_bytes - c.weight_bytes - c.activation_bytes;
  c.bytes_per_token = kv_bytes_per_token(m, attention_tp, kv_bytes, with_mtp);
  if (c.kv_bytes < c.bytes_per_token)
    throw ConfigError("mem_fraction: expected room for a KV cache in " + std::to_string(fraction) + " of " +
                      std::to_string(memory_bytes / 1073741824.0) + " GiB after " +
                      std::to_string(c.weight_bytes / 1073741824.0) + " GiB of weights and " +
                      std::to_string(c.activation_bytes / 1073741824.0) + " GiB of activations, got none");
  c.tokens = static_cast<int64_t>(std::floor(c.kv_bytes / c.bytes_per_token));
  return c;
}

}  // namespace moesim
