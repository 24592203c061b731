// Tests src/serve/serve_memory: KV bytes a token (GQA and MLA), a GPU's weights, the activations and the KV
// capacity of a small model worked by hand; the refusals name the key. Host only.
#include "src/serve/serve_memory.hpp"

#include <gtest/gtest.h>

#include "src/common/error.hpp"

namespace moesim {
namespace {

ModelConfig small() {
  ModelConfig m;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 16;
  m.layers = 2;
  m.experts = 4;
  m.top_k = 2;
  m.ffn = 32;
  m.vocab = 100;
  m.dtype = Dtype::bf16;
  return m;
}

TEST(ServeMemory, KvBytesAToken) {
  // GQA: 2 (K and V) x 2 KV heads x 16 x 2 bytes x 2 layers = 256; TP 2 keeps one KV head a rank: 128.
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(small(), 1, 2, false), 256);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(small(), 2, 2, false), 128);
  // MLA: (32 + 8) x 2 bytes x 2 layers, whole on every TP rank; one MTP layer adds a third.
  ModelConfig m = small();
  m.attention = AttentionKind::mla;
  m.kv_lora_rank = 32;
  m.qk_rope_head_dim = 8;
  m.mtp_layers = 1;
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m, 4, 2, false), 160);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m, 4, 2, true), 240);
}

TEST(ServeMemory, CapacityOfASmallModel) {
  // Weights on one of 2 expert-parallel GPUs:
  //   replicated: attention 64 x (4 + 4) x 16 + 4 x 16 x 64 = 12,288 a layer, two layers; the router 64 x 4 a
  //   layer; embedding and head 2 x 64 x 100: 24,576 + 512 + 12,800 = 37,888 weights x 2 bytes = 75,776;
  //   experts: 4 / 2 = 2 a layer, 2 layers, 3 x 64 x 32 = 6,144 weights each, 2 bytes: 49,152.
  EXPECT_DOUBLE_EQ(weight_bytes_per_gpu(small(), 2, 0, 1, false), 75776 + 49152);
  // 2 redundant experts: 3 slots a GPU a layer.
  EXPECT_DOUBLE_EQ(weight_bytes_per_gpu(small(), 2, 2, 1, false), 75776 + 49152 * 3 / 2);
  // Activations of 16 tokens and 4 rows of logits: 16 x 8 x 64 x 2 + 16 x 2 x 2 x 32 x 2 + 4 x 100 x 4.
  EXPECT_DOUBLE_EQ(activation_bytes(small(), 16, 4, 1), 16384 + 4096 + 1600);
  // Half of 1 MiB: 524,288 - 124,928 - 22,080 = 377,280 bytes for the cache, 1,473 tokens of 256 bytes.
  const KvCapacity c = kv_capacity(small(), 1048576, 0.5, 2, 0, 1, 2, 16, 4, false);
  EXPECT_DOUBLE_EQ(c.kv_bytes, 377280);
  EXPECT_EQ(c.tokens, 1473);
}

TEST(ServeMemory, RefusalsNameTheKey) {
  try {
    kv_capacity(small(), 0, 0.9, 2, 0, 1, 2, 16, 4, false);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hardware.memory_gib"), std::string::npos);
  }
  try {
    kv_capacity(small(), 100000, 0.9, 2, 0, 1, 2, 16, 4, false);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mem_fraction"), std::string::npos);
  }
  EXPECT_THROW(kv_capacity(small(), 1048576, 1.5, 2, 0, 1, 2, 16, 4, false), ConfigError);
}

}  // namespace
}  // namespace moesim
