// Megatron-LM's model-FLOP count of a training step (see train_flops.hpp).
#include "src/train/train_flops.hpp"

namespace moesim {

int64_t megatron_padded_vocab(int64_t vocab, int tp) {
  const int64_t multiple = int64_t{128} * (tp > 0 ? tp : 1);
  return (vocab + multiple - 1) / multiple * multiple;
}

double moe_layer_expert_forward_flops_per_token(const TrainShape& s) {
  const double f = s.gated ? 3.0 : 2.0;
  return 2.0 * s.top_k * f * static_cast<double>(s.hidden) * static_cast<double>(s.moe_ffn);
}

double megatron_flops_per_token(const TrainShape& s, int64_t seq_len, int tp) {
  const double h = static_cast<double>(s.hidden);
  const double seq = static_cast<double>(seq_len);
  const double f = s.gated ? 3.0 : 2.0;
  const double expansion = 3.0 * 2.0;  // forward, wgrad, dgrad; 2 FLOPs a multiply-add
  const int moe_layers = s.moe_layers + s.mtp_layers;  // the MTP layers repeat the last (MoE) layer
  const int attention_layers = s.layers + s.mtp_layers;
  const double mlp = expansion * h *
                     (static_cast<double>(s.dense_ffn) * f * s.dense_layers +
                      static_cast<double>(s.moe_ffn) * s.top_k * f * moe_layers +
                      static_cast<double>(s.shared_experts) * static_cast<double>(s.moe_ffn) * f * moe_layers);
  double attention = 0;
  if (s.attention == AttentionKind::mla) {
    const double nh = s.heads, qk = s.head_dim, rope = s.qk_rope_head_dim, v = s.v_head_dim;
    const double q_term = s.q_lora_rank > 0 ? s.q_lora_rank * (h + nh * (qk + rope) + 1) : h * nh * (qk + rope);
    attention = expansion * (q_term + s.kv_lora_rank * (h + nh * (qk + v) + 1) + h * rope + nh * v * h +
                             seq * nh * (qk + rope) / 2 + seq * nh * v / 2);
  } else {
    const double q = static_cast<double>(s.heads) * s.head_dim;
    const double kv = static_cast<double>(s.kv_heads) * s.head_dim;
    attention = expansion * (h * (q + 2 * kv) + q * seq / 2 * 2 + q * h);
  }
  const double mtp = expansion * s.mtp_layers * (3 * h + 2 * h * h);
  const double logits = expansion * h * static_cast<double>(megatron_padded_vocab(s.vocab, tp)) * (s.mtp_layers + 1);
  return mlp + attention * attention_layers + mtp + logits;
}

}  // namespace moesim
