// The model FLOPs of a training step in Megatron-LM's convention (docs/training.md "Model FLOPs"): the count
// behind every TFLOP/s and MFU moesim prints for training, as megatron/training/training.py
// num_floating_point_operations (transformer_flops) counts them, so that moesim's figures compare with the
// ones Megatron-LM logs:
//   per token, 3 (forward, data gradient, weight gradient) x 2 (a multiply-add) x
//     [ hidden x (dense_ffn x f x dense layers + moe_ffn x top_k x f x MoE layers + shared x moe_ffn x f x MoE layers)
//       + attention of every layer + the MTP layers' norms and projection + hidden x padded vocab x (1 + mtp) ],
//   f = 3 for SwiGLU (2 otherwise); the MTP layers count as MoE layers (the last layer is one) and attention layers;
//   GQA attention: hidden (q + 2 kv) + q s / 2 x 2 + q hidden, q = heads head_dim, kv = kv_heads head_dim;
//   MLA: q_lora (hidden + heads (qk + rope) + 1) (or hidden heads (qk + rope) without q_lora) + kv_lora (hidden +
//     heads (qk + v) + 1) + hidden rope + heads v hidden + s heads (qk + rope) / 2 + s heads v / 2;
//   the vocabulary padded to a multiple of 128 tp (make_vocab_size_divisible_by 128).
// Recomputation, padding and dropped tokens are not counted (model FLOPs, not hardware FLOPs).
// Pure arithmetic. Covered by tests/train/train_flops_test.cpp (worked by hand).
#pragma once

#include <cstdint>

#include "src/train/train_input.hpp"

namespace moesim {

// The vocabulary as Megatron-LM pads it: a multiple of 128 tp.
int64_t megatron_padded_vocab(int64_t vocab, int tp);

// Model FLOPs per token of a training step (forward and backward), Megatron-LM's convention (above).
double megatron_flops_per_token(const TrainShape& s, int64_t seq_len, int tp);

// The forward FLOPs per token of one MoE layer's routed experts: 2 top_k f hidden moe_ffn (f = 3 SwiGLU, 2
// otherwise); a training step runs them 3 times (forward, data gradient, weight gradient).
double moe_layer_expert_forward_flops_per_token(const TrainShape& s);

}  // namespace moesim
