// What a serving rank's memory holds (docs/serve.md "KV capacity"): the weights a GPU keeps, the activations of
// its largest step, and, in what is left of the fraction the engine may use, the KV cache. Pure arithmetic on the
// model config; host only. Covered by tests/serve/serve_memory_test.cpp (worked by hand on a small model).
#pragma once

#include <cstdint>

#include "src/config/experiment.hpp"

namespace moesim {

// KV bytes one token takes on one GPU, over every layer that keeps a cache (the model's layers, and its MTP
// layers when drafts run):
//   MLA: the compressed latent and the rotary key, (kv_lora_rank + qk_rope_head_dim) values a layer, whole on every
//        attention-TP rank;
//   MHA/GQA: keys and values, 2 x ceil(kv_heads / tp) x head_dim values a layer.
// `kv_bytes` a value (2 for bf16, 1 for fp8).
double kv_bytes_per_token(const ModelConfig& m, int attention_tp, double kv_bytes, bool with_mtp);

// The weights one GPU holds: the attention and dense parts (projections, router, shared experts, dense layers'
// MLPs, embedding and LM head) in the model's dtype, split over attention_tp; and the routed experts' slots,
// (experts + redundant) / ep a GPU in every MoE layer, at bytes_per_weight of the expert format. MTP layers are
// counted as MoE layers when `with_mtp`.
double weight_bytes_per_gpu(const ModelConfig& m, int ep, int redundant_experts, int attention_tp, bool with_mtp);

// The activations a step of max_num_tokens tokens keeps at its peak on one GPU: kActivationCopies hidden-wide
// bf16 buffers a token, the routed rows' expert intermediates (top_k a token, bf16, gated twice as wide), and
// the LM head's fp32 logits for max_batch rows.
constexpr int kActivationCopies = 8;
double activation_bytes(const ModelConfig& m, int64_t max_num_tokens, int64_t max_batch, int attention_tp);

struct KvCapacity {
  double memory_bytes = 0, usable_bytes = 0;  // the GPU's, and the fraction the engine may take
  double weight_bytes = 0, activation_bytes = 0, kv_bytes = 0;  // kv: what is left for the cache
  double bytes_per_token = 0;
  int64_t tokens = 0;  // KV tokens a GPU's cache holds
};
// The KV tokens a GPU holds: floor((memory x fraction - weights - activations) / bytes a token). Throws ConfigError
// naming hardware.memory_gib when the profile gives no memory, and the fraction when nothing is left for the cache.
KvCapacity kv_capacity(const ModelConfig& m, double memory_bytes, double fraction, int ep, int redundant_experts,
                       int attention_tp, double kv_bytes, int64_t max_num_tokens, int64_t max_batch, bool with_mtp);

}  // namespace moesim
