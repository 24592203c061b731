// Tests src/train/train_input: the counts a layout implies (data and expert data parallelism, micro-batches, the
// tokens a GPU holds), the checks that name the key at fault, and the pipeline's split of the layers over stages
// and virtual stages (Megatron-Core's even split, the embedding and the loss taking a virtual stage each when there
// are more virtual stages than layers). Host only.
#include "src/train/train_input.hpp"

#include <gtest/gtest.h>

#include <string>

#include "src/common/error.hpp"

namespace moesim {
namespace {

ModelConfig model() {
  ModelConfig m;
  m.hidden = 1024;
  m.ffn = 512;
  m.experts = 64;
  m.top_k = 4;
  m.layers = 10;
  m.moe_layers = 8;  // the first 2 dense
  m.heads = 16;
  m.kv_heads = 4;
  m.head_dim = 64;
  return m;
}

std::string error_of(const TrainConfig& c, const ModelConfig& m = model()) {
  try {
    train_layout(c, train_shape(m), 8);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainInput, CountsOfALayout) {
  // 64 GPUs, TP 2 PP 4 CP 2: DP 64 / 16 = 4; the MoE side of a stage, tp cp dp = 16 GPUs, holds EP 8 x ETP 1:
  // EDP 2. 128 sequences of 4096 tokens, 2 a micro-batch: 128 / (2 x 4) = 16 micro-batches; a micro-batch is 8192
  // tokens, 4096 a GPU's attention rows (CP 2), 2048 between layers (TP 2 x CP 2); an EP group routes 8 x 2048.
  TrainConfig c;
  c.gpus = 64;
  c.tp = 2;
  c.pp = 4;
  c.cp = 2;
  c.ep = 8;
  c.global_batch = 128;
  c.micro_batch = 2;
  const TrainLayout l = train_layout(c, train_shape(model()), 8);
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.edp, 2);
  EXPECT_EQ(l.micro_batches, 16);
  EXPECT_EQ(l.tokens, 8192);
  EXPECT_EQ(l.attention_tokens, 4096);
  EXPECT_EQ(l.local_tokens, 2048);
  EXPECT_EQ(l.group_tokens, 8 * 2048);
}

TEST(TrainInput, ChecksNameTheKey) {
  TrainConfig c;
  c.gpus = 8;
  c.ep = 8;
  c.global_batch = 16;
  EXPECT_EQ(error_of(c), "");
  TrainConfig x = c;
  x.gpus = 12;
  x.tp = 8;
  EXPECT_NE(error_of(x).find("train.gpus: expected a multiple of"), std::string::npos);
  x = c;
  x.ep = 3;
  EXPECT_NE(error_of(x).find("train.ep: expected a divisor of model.experts (64)"), std::string::npos);
  x = c;
  x.ep = 16;
  EXPECT_NE(error_of(x).find("train.ep: expected ep x etp dividing"), std::string::npos);
  x = c;
  x.global_batch = 12;
  EXPECT_NE(error_of(x).find("train.global_batch: expected a multiple of train.micro_batch x dp = 8"), std::string::npos);
  x = c;
  x.vpp = 2;
  EXPECT_NE(error_of(x).find("train.vpp: expected 1 unless train.pp > 1"), std::string::npos);
  x = c;
  x.gpus = 24;
  x.tp = 3;
  EXPECT_NE(error_of(x).find("train.tp: expected a divisor of model.heads (16)"), std::string::npos);
  x = c;
  x.seq_len = 4095;
  x.tp = 2;
  x.ep = 4;
  EXPECT_NE(error_of(x).find("train.seq_len: expected micro_batch x seq_len divisible by"), std::string::npos);
  x = c;
  x.gpus = 32;
  x.pp = 4;
  x.vpp = 4;  // 16 virtual stages for 10 layers: at most 12
  x.ep = 8;
  EXPECT_NE(error_of(x).find("train.pp: expected pp x vpp at most model.layers + 2"), std::string::npos);
  x = c;
  x.etp = 3;
  x.ep = 1;
  x.gpus = 24;
  x.global_batch = 24;
  EXPECT_NE(error_of(x).find("train.etp: expected a divisor of model.ffn (512)"), std::string::npos);
  ModelConfig mla = model();
  mla.attention = AttentionKind::mla;
  EXPECT_NE(error_of(c, mla).find("model.kv_lora_rank:"), std::string::npos);
}

TEST(TrainInput, StagesSplitTheLayersEvenly) {
  // 10 layers (2 dense, then 8 MoE) over PP 4: 3, 3, 2, 2; the dense ones on stage 0.
  TrainConfig c;
  c.gpus = 32;
  c.pp = 4;
  c.ep = 8;
  c.global_batch = 16;
  const TrainShape s = train_shape(model());
  std::vector<StageLayers> st = stage_layers(s, train_layout(c, s, 8));
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[0].dense, 2);
  EXPECT_EQ(st[0].moe, 1);
  EXPECT_EQ(st[1].moe, 3);
  EXPECT_EQ(st[2].moe, 2);
  EXPECT_EQ(st[3].moe, 2);
  EXPECT_TRUE(st[0].embedding);
  EXPECT_TRUE(st[3].lm_head);
  // PP 2 x VPP 2: virtual stages 0..3 take 3, 3, 2, 2 layers; stage 0 holds virtual stages 0 and 2 (5 layers),
  // stage 1 holds 1 and 3 (5).
  c.pp = 2;
  c.vpp = 2;
  c.gpus = 16;
  st = stage_layers(s, train_layout(c, s, 8));
  EXPECT_EQ(st[0].layers(), 5);
  EXPECT_EQ(st[1].layers(), 5);
  // PP 4 x VPP 3 = 12 virtual stages for 10 layers: the embedding and the loss take the first and the last alone,
  // the 10 layers one each on the 10 between: stage 0 holds virtual stages 0 (embedding), 4 and 8 (2 layers).
  c.pp = 4;
  c.vpp = 3;
  c.gpus = 32;
  st = stage_layers(s, train_layout(c, s, 8));
  EXPECT_EQ(st[0].layers(), 2);
  EXPECT_EQ(st[3].layers(), 2);  // virtual stages 3, 7 and 11 (the loss)
  int total = 0;
  for (const StageLayers& x : st) total += x.layers();
  EXPECT_EQ(total, 10);
}

}  // namespace
}  // namespace moesim
