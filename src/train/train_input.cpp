// The training step's model shape, layout checks and stage split (see train_input.hpp).
#include "src/train/train_input.hpp"

#include <algorithm>

#include "src/common/error.hpp"

namespace moesim {
namespace {

[[noreturn]] void fail(const std::string& key, const std::string& expected, const std::string& got) {
  throw ConfigError(key + ": expected " + expected + ", got " + got);
}
std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

TrainShape train_shape(const ModelConfig& m) {
  TrainShape s;
  s.name = m.name;
  s.hidden = m.hidden;
  s.moe_ffn = m.ffn;
  s.dense_ffn = m.dense_ffn > 0 ? m.dense_ffn : m.ffn;
  s.vocab = m.vocab;
  s.experts = m.experts;
  s.top_k = m.top_k;
  s.shared_experts = m.shared_experts;
  s.layers = m.layers;
  s.moe_layers = std::min(moe_layer_count(m), m.layers);
  s.dense_layers = m.layers - s.moe_layers;
  s.mtp_layers = m.mtp_layers;
  s.heads = m.heads;
  s.kv_heads = m.kv_heads;
  s.head_dim = m.head_dim;
  s.attention = m.attention;
  s.q_lora_rank = m.q_lora_rank;
  s.kv_lora_rank = m.kv_lora_rank;
  s.qk_rope_head_dim = m.qk_rope_head_dim;
  s.v_head_dim = m.v_head_dim > 0 ? m.v_head_dim : m.head_dim;
  s.gated = m.gated_experts;
  return s;
}

TrainLayout train_layout(const TrainConfig& cfg, const TrainShape& shape, int devices_per_node) {
  TrainLayout l;
  l.cfg = cfg;
  l.devices_per_node = devices_per_node;
  const int64_t model_parallel = int64_t{cfg.tp} * cfg.pp * cfg.cp;
  if (cfg.gpus % model_parallel != 0)
    fail("train.gpus", "a multiple of train.tp x train.pp x train.cp = " + str(model_parallel), str(cfg.gpus));
  l.dp = static_cast<int>(cfg.gpus / model_parallel);
  if (shape.experts % cfg.ep != 0)
    fail("train.ep", "a divisor of model.experts (" + str(shape.experts) + ")", str(cfg.ep));
  const int64_t expert_side = int64_t{cfg.tp} * cfg.cp * l.dp;  // the GPUs of one pipeline stage
  if (expert_side % (int64_t{cfg.ep} * cfg.etp) != 0)
    fail("train.ep", "ep x etp dividing the GPUs of a pipeline stage (tp x cp x dp = " + str(expert_side) + ")",
         str(cfg.ep) + " x " + str(cfg.etp));
  l.edp = static_cast<int>(expert_side / (int64_t{cfg.ep} * cfg.etp));
  if (cfg.global_batch % (cfg.micro_batch * l.dp) != 0)
    fail("train.global_batch", "a multiple of train.micro_batch x dp = " + str(cfg.micro_batch * l.dp),
         str(cfg.global_batch));
  l.micro_batches = cfg.global_batch / (cfg.micro_batch * l.dp);
  if (cfg.vpp > 1 && cfg.pp == 1) fail("train.vpp", "1 unless train.pp > 1 (it interleaves pipeline stages)", str(cfg.vpp));
  if (shape.heads % cfg.tp != 0) fail("train.tp", "a divisor of model.heads (" + str(shape.heads) + ")", str(cfg.tp));
  if (shape.attention == AttentionKind::gqa && shape.kv_heads % cfg.tp != 0 && cfg.tp % shape.kv_heads != 0)
    fail("train.tp", "a divisor or a multiple of model.kv_heads (" + str(shape.kv_heads) + ")", str(cfg.tp));
  l.tokens = cfg.micro_batch * cfg.seq_len;
  if (l.tokens % (int64_t{cfg.tp} * cfg.cp) != 0)
    fail("train.seq_len", "micro_batch x seq_len divisible by train.tp x train.cp = " + str(int64_t{cfg.tp} * cfg.cp),
         str(cfg.seq_len));
  l.attention_tokens = l.tokens / cfg.cp;
  l.local_tokens = l.tokens / (int64_t{cfg.tp} * cfg.cp);
  l.ep_sources = int64_t{cfg.ep} * cfg.etp;
  l.group_tokens = l.ep_sources * l.local_tokens;
  if (l.group_tokens > (int64_t{1} << 31) - 1)
    fail("train.ep", "an expert-parallel group routing fewer than 2^31 tokens a micro-batch",
         str(l.group_tokens) + " tokens");
  if (shape.layers + 2 < int64_t{cfg.pp} * cfg.vpp)
    fail("train.pp", "pp x vpp at most model.layers + 2 (" + str(shape.layers + 2) +
                         ": the embedding and the loss may take a virtual stage each)",
         str(cfg.pp) + " x " + str(cfg.vpp));
  if (shape.moe_ffn % cfg.etp != 0) fail("train.etp", "a divisor of model.ffn (" + str(shape.moe_ffn) + ")", str(cfg.etp));
  if (shape.attention == AttentionKind::mla && (shape.kv_lora_rank <= 0 || shape.qk_rope_head_dim <= 0))
    fail("model.kv_lora_rank", "model.kv_lora_rank and model.qk_rope_head_dim > 0 with model.attention mla",
         str(shape.kv_lora_rank) + " and " + str(shape.qk_rope_head_dim));
  return l;
}

std::vector<StageLayers> stage_layers(const TrainShape& shape, const TrainLayout& layout) {
  const int pp = layout.cfg.pp;
  const int virtual_stages = pp * layout.cfg.vpp;
  std::vector<StageLayers> out(pp);
  // More virtual stages than layers: the embedding and the loss take the first and the last alone, as
  // Megatron-Core's account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split place them.
  const bool own_ends = virtual_stages > shape.layers;
  const int first = own_ends ? 1 : 0, slots = virtual_stages - (own_ends ? 2 : 0);
  int layer = 0;
  for (int v = first; v < first + slots; ++v) {
    const int i = v - first;
    const int count = shape.layers / slots + (i < shape.layers % slots ? 1 : 0);
    StageLayers& s = out[v % pp];
    for (int i = 0; i < count; ++i, ++layer) {
      if (layer < shape.dense_layers) {
        ++s.dense;
      } else {
        ++s.moe;
      }
    }
  }
  out.front().embedding = true;
  out.back().lm_head = true;
  out.back().mtp = shape.mtp_layers;
  return out;
}

}  // namespace moesim
