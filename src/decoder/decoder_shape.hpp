// The executed decoder's dimensions (DecoderShape, derived from an Experiment), its phases and the wall
// times of one layer for one step: the decoder's shape types, apart from its weights and kernels, so that
// results and reports can name them without reaching the kernels. Plain data; executed_decoder_shape is
// defined in src/decoder/decoder.cpp. Host only. Covered by tests/decoder/decoder_test.cpp.
#pragma once

#include <cstdint>

#include "src/config/experiment.hpp"

namespace moesim {

// The logits head's vocabulary is min(model.vocab, kDecoderVocab): enough for greedy decoding to
// produce varied tokens, small enough that the head costs nothing next to the layers.
constexpr int kDecoderVocab = 512;
// Executed head_dim is at least this (or model.head_dim when that is smaller).
constexpr int kMinExecutedHeadDim = 16;

// The executed decoder's dimensions.
struct DecoderShape {
  int layers = 1;
  int64_t hidden = 0, ffn = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  int vocab = 0;
  int experts = 0, top_k = 0, shared_experts = 0;
  int topics = 1;
};

// From the experiment: layers, hidden, ffn from execute:; experts, top_k, shared_experts, topics as
// configured; head_dim = min(model.head_dim, max(kMinExecutedHeadDim, execute.hidden / model.heads));
// heads = execute.hidden / head_dim rounded down to a multiple of the GQA group (model.heads /
// model.kv_heads), at least one group and at most model.heads; kv_heads = heads / group, so the
// executed attention keeps the model's MHA/GQA grouping; vocab = min(model.vocab, kDecoderVocab).
DecoderShape executed_decoder_shape(const Experiment& e);

enum class DecoderPhase { prefill, decode };
const char* to_string(DecoderPhase p);

// Wall seconds of one layer for one step (steady_clock, one pass).
struct DecoderTimes {
  double attention_s = 0;  // norm, QKV, RoPE, cache append, attention, output projection, residual
  double router_s = 0;     // norm, router logits GEMM, popularity bias, route_omp
  double dispatch_s = 0;   // dispatch plan and gather
  double experts_s = 0;    // routed and shared SwiGLU experts
  double combine_s = 0;    // weighted un-permute and the residual add
  double layer_s = 0;      // the whole layer
};

}  // namespace moesim
