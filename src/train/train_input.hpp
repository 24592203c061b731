// What one optimizer step of Megatron-style training is made of (docs/training.md "The layout"): the model as
// the step reads it (TrainShape, from model.*) and the parallel layout with the counts it implies (TrainLayout,
// from train.*): data parallelism, micro-batches, expert data parallelism and the tokens each GPU holds at each
// point of a layer. Plain data and the checks that name the key at fault. Deterministic, host only.
// Covered by tests/train/train_input_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

// The model's dimensions as the training step costs them (ModelConfig with its defaults resolved).
struct TrainShape {
  std::string name;
  int64_t hidden = 0;
  int64_t moe_ffn = 0;         // each routed (and shared) expert's width: model.ffn
  int64_t dense_ffn = 0;       // the dense layers' MLP width: model.dense_ffn, or model.ffn when 0
  int64_t vocab = 0;
  int experts = 0, top_k = 0, shared_experts = 0;
  int layers = 0;              // decoder layers (model.layers)
  int moe_layers = 0;          // of them MoE (model.moe_layers, or every layer); the others, first, are dense
  int dense_layers = 0;        // layers - moe_layers
  int mtp_layers = 0;          // multi-token-prediction layers: one MoE layer and one LM head each, on the last stage
  int heads = 0, kv_heads = 0, head_dim = 0;
  AttentionKind attention = AttentionKind::gqa;
  int q_lora_rank = 0, kv_lora_rank = 0, qk_rope_head_dim = 0, v_head_dim = 0;  // mla (v_head_dim resolved)
  bool gated = true;           // SwiGLU experts and MLPs (3 matrices; 2 when false)
};
TrainShape train_shape(const ModelConfig& m);

// The layout and the counts it implies. Megatron-Core's rank order: tensor, context, data, pipeline for
// attention; expert tensor, expert, expert data, pipeline for the MoE layers (parallel_state.py), so the EP ranks
// of one group are consecutive GPUs when etp is 1.
struct TrainLayout {
  TrainConfig cfg;
  int dp = 1;                    // gpus / (tp pp cp)
  int edp = 1;                   // expert data parallel: tp cp dp / (ep etp)
  int64_t micro_batches = 1;     // m = global_batch / (micro_batch dp), per pipeline
  int64_t tokens = 0;            // a micro-batch's tokens per data-parallel replica: micro_batch x seq_len
  int64_t attention_tokens = 0;  // the rows of a GPU's attention GEMMs: tokens / cp
  int64_t local_tokens = 0;      // tokens a GPU holds between layers (sequence parallel): tokens / (tp cp)
  int64_t ep_sources = 0;        // GPUs whose tokens one EP group routes: ep x etp
  int64_t group_tokens = 0;      // tokens one EP group routes per micro-batch: ep_sources x local_tokens
  int devices_per_node = 0;      // the profile's scale-up domain (0: every GPU in one)
};

// Checks the layout against the model and the GPUs; ConfigError "train.KEY: expected WHAT, got VALUE" (or
// model.KEY) at the first that fails: gpus a multiple of tp pp cp; global_batch a multiple of micro_batch dp;
// ep dividing experts and ep etp dividing tp cp dp; heads and kv_heads divisible by tp (kv_heads may also be a
// divisor of tp: replicated); the micro-batch's tokens divisible by tp cp; pp vpp at most layers + 2;
// vpp 1 unless pp > 1; the expert width divisible by etp; MLA's ranks set when attention is mla.
TrainLayout train_layout(const TrainConfig& cfg, const TrainShape& shape, int devices_per_node);

// The layers of each pipeline stage, each virtual stage's in turn: [pp][kinds] counts. Decoder layers are split
// as evenly as Megatron-Core's default does when pp vpp does not divide them: the first (layers mod pp vpp)
// virtual stages one more; the dense layers are the first ones; the MTP layers and the LM head sit on the last
// stage, the embedding on the first. With more virtual stages than layers, the embedding and the LM head take the
// first and the last virtual stage alone (Megatron-Core's account_for_embedding/loss_in_pipeline_split).
struct StageLayers {
  int dense = 0, moe = 0, mtp = 0;
  bool embedding = false, lm_head = false;
  int layers() const { return dense + moe + mtp; }
};
std::vector<StageLayers> stage_layers(const TrainShape& shape, const TrainLayout& layout);

}  // namespace moesim
