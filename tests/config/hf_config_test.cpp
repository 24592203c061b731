// Tests of model.hf_config (src/config/hf_config.cpp, load_config_hf.cpp) and model.moe_layers: each family's
// config.json (tests/data/hf/, restated from the model pages) against hand-written values from those pages,
// the rule that a key of the experiment file or a --set beats the config.json, the resolution of a relative
// path, the YAML round trip, re-derivation under apply_override, and bad inputs whose one-line ConfigError
// names the file and the JSON key. Host only; no randomness.
#include "src/config/hf_config.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "tests/support/config_support.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

namespace fs = std::filesystem;

std::string hf_path(const std::string& model) {
  return std::string(MOESIM_TEST_DATA) + "/hf/" + model + "/config.json";
}

// The experiment that reads `model`'s config.json, with `overrides` after it.
Experiment from_hf(const std::string& model, std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(), "model.hf_config=" + hf_path(model));
  return load_experiment_text("name: hf\n", "exp.yaml", overrides);
}

using testing::load_error;

// A config.json of `text` in a fresh folder; returns its path.
std::string write_json(const std::string& text) {
  const std::string path = testing::make_temp_dir() + "/config.json";
  testing::write_text(path, text);
  return path;
}

TEST(HfConfig, MixtralMapsToModelAndRouter) {
  const Experiment e = from_hf("mixtral-8x7b");
  const ModelConfig& m = e.model;
  EXPECT_EQ(m.name, "mixtral");
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.ffn, 14336);
  EXPECT_EQ(m.experts, 8);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.shared_experts, 0);
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(moe_layer_count(m), 32);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);  // hidden_size / num_attention_heads
  EXPECT_EQ(m.vocab, 32000);
  EXPECT_EQ(m.dtype, Dtype::bf16);
  EXPECT_EQ(e.router.gating, Gating::token_choice);
  EXPECT_EQ(e.router.score, ScoreFunction::softmax);
  EXPECT_TRUE(e.router.renormalize);
  EXPECT_TRUE(e.router.pre_softmax);
}

TEST(HfConfig, Qwen2MoeSharedExpertsFromTheWidthRatio) {
  const Experiment e = from_hf("qwen1.5-moe-a2.7b");
  EXPECT_EQ(e.model.name, "qwen2_moe");
  EXPECT_EQ(e.model.hidden, 2048);
  EXPECT_EQ(e.model.ffn, 1408);
  EXPECT_EQ(e.model.experts, 60);
  EXPECT_EQ(e.model.top_k, 4);
  EXPECT_EQ(e.model.shared_experts, 4);  // shared_expert_intermediate_size 5632 = 4 x 1408
  EXPECT_EQ(e.model.layers, 24);
  EXPECT_EQ(moe_layer_count(e.model), 24);
  EXPECT_EQ(e.model.kv_heads, 16);
  EXPECT_EQ(e.model.head_dim, 128);
  EXPECT_EQ(e.model.vocab, 151936);
  EXPECT_FALSE(e.router.renormalize);  // norm_topk_prob false
  EXPECT_EQ(e.router.score, ScoreFunction::softmax);
}

TEST(HfConfig, Qwen3MoeHeadDimAndNormTopkProb) {
  const Experiment e = from_hf("qwen3-30b-a3b");
  EXPECT_EQ(e.model.experts, 128);
  EXPECT_EQ(e.model.top_k, 8);
  EXPECT_EQ(e.model.ffn, 768);
  EXPECT_EQ(e.model.shared_experts, 0);
  EXPECT_EQ(e.model.layers, 48);
  EXPECT_EQ(moe_layer_count(e.model), 48);
  EXPECT_EQ(e.model.heads, 32);
  EXPECT_EQ(e.model.kv_heads, 4);
  EXPECT_EQ(e.model.head_dim, 128);  // head_dim given, not hidden / heads = 64
  EXPECT_TRUE(e.router.renormalize);
}

TEST(HfConfig, Qwen3NextMapsToModelAndRouter) {
  // Qwen/Qwen3-Next-80B-A3B-Instruct: 512 experts of 512, top-10, one shared expert of 512, softmax over all,
  // renormalised (norm_topk_prob, true by the config class's default too), every layer MoE.
  const Experiment e = from_hf("qwen3-next-80b-a3b");
  EXPECT_EQ(e.model.name, "qwen3_next");
  EXPECT_EQ(e.model.hidden, 2048);
  EXPECT_EQ(e.model.experts, 512);
  EXPECT_EQ(e.model.top_k, 10);
  EXPECT_EQ(e.model.ffn, 512);
  EXPECT_EQ(e.model.shared_experts, 1);  // shared_expert_intermediate_size 512 = 1 x moe_intermediate_size
  EXPECT_EQ(e.model.layers, 48);
  EXPECT_EQ(moe_layer_count(e.model), 48);
  EXPECT_EQ(e.model.heads, 16);
  EXPECT_EQ(e.model.kv_heads, 2);
  EXPECT_EQ(e.model.head_dim, 256);
  EXPECT_EQ(e.model.vocab, 151936);
  EXPECT_EQ(e.model.dtype, Dtype::bf16);
  EXPECT_EQ(e.router.gating, Gating::token_choice);
  EXPECT_EQ(e.router.score, ScoreFunction::softmax);
  EXPECT_TRUE(e.router.pre_softmax);
  EXPECT_TRUE(e.router.renormalize);
  // norm_topk_prob absent: Qwen3NextConfig's default, true (Qwen2/Qwen3-MoE default to false).
  const std::string path = write_json(R"({"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "vocab_size": 100, "torch_dtype": "bfloat16"})");
  EXPECT_TRUE(load_experiment_text("name: q\n", "exp.yaml", {"model.hf_config=" + path}).router.renormalize);
  const std::string qwen3 = write_json(R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "vocab_size": 100, "torch_dtype": "bfloat16"})");
  EXPECT_FALSE(load_experiment_text("name: q\n", "exp.yaml", {"model.hf_config=" + qwen3}).router.renormalize);
}

TEST(HfConfig, OnTheBuiltInExperimentTheModelRoutesAsItIsServed) {
  // The built-in experiment's Mixtral-flavoured capacity factor 1.25, bias rate 0.01 and skew 0.15 give way
  // to the model's own: dropless (every family's modeling code), DeepSeek-V3's published bias rate 0.001, and
  // the model's skew calibration where the project has one (docs/workloads.md); a --set still wins.
  const Experiment d = default_experiment({"model.hf_config=" + hf_path("deepseek-v3")});
  EXPECT_EQ(d.router.capacity_factor, 0.0);
  EXPECT_EQ(d.router.bias_update_rate, 0.001);
  EXPECT_EQ(d.workload.skew, 0.24);  // configs/deepseek-v3.yaml's popularity, against SGLang's balancedness
  EXPECT_EQ(d.workload.popularity, Popularity::lognormal);
  EXPECT_EQ(d.workload.group_skew, 0.13);
  EXPECT_EQ(d.workload.batch_variation, 0.2);
  EXPECT_TRUE(d.load_notes.empty());
  const Experiment q = default_experiment({"model.hf_config=" + hf_path("qwen3-30b-a3b")});
  EXPECT_EQ(q.router.capacity_factor, 0.0);
  EXPECT_EQ(q.workload.skew, 0.15);  // no calibration known: kept, and said in one line
  ASSERT_EQ(q.load_notes.size(), 1u);
  EXPECT_NE(q.load_notes[0].find("workload.skew 0.15 is Mixtral-8x7B's calibration and is kept"), std::string::npos)
      << q.load_notes[0];
  const Experiment m = default_experiment({"model.hf_config=" + hf_path("mixtral-8x7b")});
  EXPECT_EQ(m.workload.skew, 0.15);  // Mixtral's own
  EXPECT_TRUE(m.load_notes.empty());
  const Experiment s = default_experiment({"model.hf_config=" + hf_path("deepseek-v3"), "router.capacity_factor=1.5",
                                           "workload.skew=0.3"});
  EXPECT_EQ(s.router.capacity_factor, 1.5);
  EXPECT_EQ(s.workload.skew, 0.3);
  // An experiment file's own keys win over the config.json, and its defaults are the schema's.
  const Experiment f = load_experiment_text("name: f\nrouter: {capacity_factor: 1.25}\n", "exp.yaml",
                                            {"model.hf_config=" + hf_path("deepseek-v3")});
  EXPECT_EQ(f.router.capacity_factor, 1.25);
  EXPECT_EQ(f.workload.skew, 1.0);
  EXPECT_TRUE(f.load_notes.empty());
}

TEST(HfConfig, QwenDenseLayersFromSparseStepAndMlpOnlyLayers) {
  const std::string path = write_json(R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 8,
    "num_attention_heads": 4, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "vocab_size": 100, "torch_dtype": "float16", "decoder_sparse_step": 2, "mlp_only_layers": [3, 5]})");
  const Experiment e = load_experiment_text("name: q\n", "exp.yaml", {"model.hf_config=" + path});
  // (i + 1) % 2 == 0: layers 1, 3, 5, 7; 3 and 5 are dense: 2 MoE layers.
  EXPECT_EQ(e.model.moe_layers, 2);
  EXPECT_EQ(e.model.dtype, Dtype::fp16);
  EXPECT_EQ(e.model.kv_heads, 4);  // no num_key_value_heads: MHA
}

TEST(HfConfig, DeepSeekV2LiteGreedySoftmax) {
  const Experiment e = from_hf("deepseek-v2-lite");
  EXPECT_EQ(e.model.hidden, 2048);
  EXPECT_EQ(e.model.ffn, 1408);
  EXPECT_EQ(e.model.experts, 64);
  EXPECT_EQ(e.model.top_k, 6);
  EXPECT_EQ(e.model.shared_experts, 2);
  EXPECT_EQ(e.model.layers, 27);
  EXPECT_EQ(e.model.moe_layers, 26);  // first_k_dense_replace 1
  EXPECT_EQ(e.model.head_dim, 128);   // qk_nope_head_dim
  EXPECT_EQ(e.model.vocab, 102400);
  EXPECT_EQ(e.router.gating, Gating::token_choice);  // topk_method greedy
  EXPECT_EQ(e.router.score, ScoreFunction::softmax);
  EXPECT_FALSE(e.router.renormalize);
  EXPECT_EQ(e.router.routed_scaling_factor, 1.0);
}

TEST(HfConfig, DeepSeekV3HasFiftyEightMoeLayers) {
  const Experiment e = from_hf("deepseek-v3");
  EXPECT_EQ(e.model.name, "deepseek_v3");
  EXPECT_EQ(e.model.hidden, 7168);
  EXPECT_EQ(e.model.ffn, 2048);
  EXPECT_EQ(e.model.experts, 256);
  EXPECT_EQ(e.model.top_k, 8);
  EXPECT_EQ(e.model.shared_experts, 1);
  EXPECT_EQ(e.model.layers, 61);
  EXPECT_EQ(e.model.moe_layers, 58);
  EXPECT_EQ(moe_layer_count(e.model), 58);
  EXPECT_EQ(e.model.heads, 128);
  EXPECT_EQ(e.model.kv_heads, 128);
  EXPECT_EQ(e.model.head_dim, 128);
  EXPECT_EQ(e.model.vocab, 129280);
  EXPECT_EQ(e.model.dtype, Dtype::fp8);  // quantization_config.quant_method fp8 over torch_dtype bfloat16
  EXPECT_EQ(e.router.gating, Gating::aux_free_bias);  // noaux_tc
  EXPECT_EQ(e.router.groups, 8);
  EXPECT_EQ(e.router.topk_groups, 4);
  EXPECT_EQ(e.router.score, ScoreFunction::sigmoid);
  EXPECT_TRUE(e.router.renormalize);
  EXPECT_EQ(e.router.routed_scaling_factor, 2.5);
}

TEST(HfConfig, DeepSeekV3ImportsMlaAndItsMtpLayer) {
  // deepseek-ai/DeepSeek-V3's config.json: q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
  // qk_rope_head_dim 64, v_head_dim 128, num_nextn_predict_layers 1.
  const Experiment e = from_hf("deepseek-v3");
  const ModelConfig& m = e.model;
  EXPECT_EQ(m.attention, AttentionKind::mla);
  EXPECT_EQ(m.q_lora_rank, 1536);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.head_dim, 128);  // qk_nope_head_dim
  EXPECT_EQ(m.qk_rope_head_dim, 64);
  EXPECT_EQ(m.v_head_dim, 128);
  EXPECT_EQ(m.mtp_layers, 1);
  EXPECT_EQ(m.kv_heads, 128);  // num_key_value_heads: the decoder's MHA approximation
  // The same attention as configs/deepseek-v3.yaml states by hand.
  const ModelConfig y = load_experiment_file(std::string(MOESIM_SOURCE_DIR) + "/configs/deepseek-v3.yaml", {}).model;
  EXPECT_EQ(y.attention, m.attention);
  EXPECT_EQ(y.q_lora_rank, m.q_lora_rank);
  EXPECT_EQ(y.kv_lora_rank, m.kv_lora_rank);
  EXPECT_EQ(y.head_dim, m.head_dim);
  EXPECT_EQ(y.qk_rope_head_dim, m.qk_rope_head_dim);
  EXPECT_EQ(y.v_head_dim, m.v_head_dim);
  EXPECT_EQ(y.mtp_layers, m.mtp_layers);
}

TEST(HfConfig, DeepSeekHeadDimIsTheNonRotaryQueryKeyWidth) {
  // Widths that differ from each other, so that each key is seen to land on its own experiment key:
  // head_dim from qk_nope_head_dim (96), never v_head_dim (80), hidden / heads (16) or head_dim, which
  // transformers' DeepseekV3Config writes as qk_rope_head_dim (8).
  const std::string path = write_json(R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "vocab_size": 100, "torch_dtype": "bfloat16", "scoring_func": "sigmoid",
    "norm_topk_prob": true, "topk_method": "greedy", "routed_scaling_factor": 2.5, "first_k_dense_replace": 1,
    "q_lora_rank": 48, "kv_lora_rank": 24, "qk_nope_head_dim": 96, "qk_rope_head_dim": 8, "v_head_dim": 80,
    "num_nextn_predict_layers": 2, "head_dim": 8})");
  const ModelConfig m = load_experiment_text("name: d\n", "exp.yaml", {"model.hf_config=" + path}).model;
  EXPECT_EQ(m.attention, AttentionKind::mla);
  EXPECT_EQ(m.head_dim, 96);
  EXPECT_EQ(m.v_head_dim, 80);
  EXPECT_EQ(m.q_lora_rank, 48);
  EXPECT_EQ(m.kv_lora_rank, 24);
  EXPECT_EQ(m.qk_rope_head_dim, 8);
  EXPECT_EQ(m.mtp_layers, 2);
  // A key the experiment gives wins, as for every other key.
  const ModelConfig g = load_experiment_text("model: {attention: gqa, head_dim: 16}\n", "exp.yaml",
                                             {"model.hf_config=" + path, "model.mtp_layers=0"}).model;
  EXPECT_EQ(g.attention, AttentionKind::gqa);
  EXPECT_EQ(g.head_dim, 16);
  EXPECT_EQ(g.mtp_layers, 0);
  EXPECT_EQ(g.kv_lora_rank, 24);  // the rest still from the config.json
}

TEST(HfConfig, DeepSeekNullQLoraRankIsAFullRankQuery) {
  // deepseek-ai/DeepSeek-V2-Lite: q_lora_rank null (q_proj at full rank), no num_nextn_predict_layers.
  const ModelConfig m = from_hf("deepseek-v2-lite").model;
  EXPECT_EQ(m.attention, AttentionKind::mla);
  EXPECT_EQ(m.q_lora_rank, 0);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.qk_rope_head_dim, 64);
  EXPECT_EQ(m.v_head_dim, 128);
  EXPECT_EQ(m.mtp_layers, 0);
  // Absent rather than null: the config classes' widths (1536, 512, 128, 64, 128), as DeepSeek-V2 has them.
  const std::string path = write_json(R"({"model_type": "deepseek_v2", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "vocab_size": 100, "torch_dtype": "bfloat16", "scoring_func": "softmax",
    "norm_topk_prob": false, "topk_method": "greedy", "routed_scaling_factor": 1.0, "first_k_dense_replace": 1})");
  const ModelConfig a = load_experiment_text("name: d\n", "exp.yaml", {"model.hf_config=" + path}).model;
  EXPECT_EQ(a.q_lora_rank, 1536);
  EXPECT_EQ(a.kv_lora_rank, 512);
  EXPECT_EQ(a.head_dim, 128);
  EXPECT_EQ(a.qk_rope_head_dim, 64);
  EXPECT_EQ(a.v_head_dim, 128);
  EXPECT_EQ(a.mtp_layers, 0);
}

TEST(HfConfig, DeepSeekTopkMethodsAndLayerFrequency) {
  const std::string base = R"({"model_type": "deepseek_v2", "hidden_size": 64, "num_hidden_layers": 10,
    "num_attention_heads": 4, "n_routed_experts": 16, "n_shared_experts": null, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "vocab_size": 100, "torch_dtype": "bfloat16", "scoring_func": "softmax",
    "norm_topk_prob": true, "routed_scaling_factor": 16.0, "n_group": 4, "topk_group": 2,
    "first_k_dense_replace": 1, "moe_layer_freq": 2, "topk_method": "group_limited_greedy"})";
  const Experiment e = load_experiment_text("name: d\n", "exp.yaml", {"model.hf_config=" + write_json(base)});
  EXPECT_EQ(e.router.gating, Gating::group_limited);
  EXPECT_EQ(e.router.groups, 4);
  EXPECT_EQ(e.router.topk_groups, 2);
  EXPECT_EQ(e.model.shared_experts, 0);            // null: none
  EXPECT_EQ(e.model.head_dim, 128);                // no qk_nope_head_dim: the config classes' 128
  EXPECT_TRUE(e.router.renormalize);
  EXPECT_EQ(e.router.routed_scaling_factor, 1.0);  // V2 does not scale weights it renormalises
  EXPECT_EQ(e.model.moe_layers, 4);                // i >= 1 and i % 2 == 0: 2, 4, 6, 8
}

TEST(HfConfig, OlmoeMapsToModel) {
  const Experiment e = from_hf("olmoe-1b-7b");
  EXPECT_EQ(e.model.hidden, 2048);
  EXPECT_EQ(e.model.ffn, 1024);
  EXPECT_EQ(e.model.experts, 64);
  EXPECT_EQ(e.model.top_k, 8);
  EXPECT_EQ(e.model.layers, 16);
  EXPECT_EQ(e.model.kv_heads, 16);
  EXPECT_EQ(e.model.vocab, 50304);
  EXPECT_EQ(e.model.dtype, Dtype::fp32);  // the released weights are float32
  EXPECT_FALSE(e.router.renormalize);
}

TEST(HfConfig, DbrxNestedKeys) {
  const Experiment e = from_hf("dbrx");
  EXPECT_EQ(e.model.hidden, 6144);
  EXPECT_EQ(e.model.layers, 40);
  EXPECT_EQ(e.model.heads, 48);
  EXPECT_EQ(e.model.kv_heads, 8);      // attn_config.kv_n_heads
  EXPECT_EQ(e.model.head_dim, 128);    // d_model / n_heads
  EXPECT_EQ(e.model.ffn, 10752);       // ffn_config.ffn_hidden_size
  EXPECT_EQ(e.model.experts, 16);      // ffn_config.moe_num_experts
  EXPECT_EQ(e.model.top_k, 4);         // ffn_config.moe_top_k
  EXPECT_EQ(e.model.vocab, 100352);
  EXPECT_TRUE(e.router.renormalize);   // moe_normalize_expert_weights 1
  EXPECT_EQ(moe_layer_count(e.model), 40);
}

TEST(HfConfig, GptOssImportsAsMxfp4WeightsComputingInBf16) {
  const Experiment q = from_hf("gpt-oss-20b");
  EXPECT_EQ(q.model.weight_dtype, WeightDtype::mxfp4);  // quantization_config.quant_method mxfp4
  EXPECT_EQ(q.model.dtype, Dtype::bf16);                // torch_dtype bfloat16
  EXPECT_TRUE(q.model.gated_experts);
  // Another compute dtype for 4-bit weights is refused, naming both keys; with weights in it, it costs.
  const std::string msg = load_error("name: g\n", {"model.hf_config=" + hf_path("gpt-oss-20b"), "model.dtype=fp8"});
  EXPECT_NE(msg.find("model.dtype: expected bf16 or fp16 with model.weight_dtype mxfp4"), std::string::npos) << msg;
  const Experiment e = from_hf("gpt-oss-20b", {"model.dtype=fp8", "model.weight_dtype=same"});
  EXPECT_EQ(e.model.dtype, Dtype::fp8);
  EXPECT_EQ(e.model.experts, 32);
  EXPECT_EQ(e.model.top_k, 4);  // experts_per_token
  EXPECT_EQ(e.model.ffn, 2880);
  EXPECT_EQ(e.model.hidden, 2880);
  EXPECT_EQ(e.model.head_dim, 64);
  EXPECT_EQ(e.model.kv_heads, 8);
  EXPECT_EQ(e.model.layers, 24);
  EXPECT_EQ(e.model.vocab, 201088);
  EXPECT_FALSE(e.router.pre_softmax);  // softmax over the k chosen logits
}

TEST(HfConfig, FourBitGptqAndAwqImportAsInt4Weights) {
  const auto with_quant = [](const std::string& quant) {
    return write_json(R"({"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 4, "num_local_experts": 8,
      "num_attention_heads": 4, "num_experts_per_tok": 2, "intermediate_size": 32, "vocab_size": 100,
      "torch_dtype": "float16", "quantization_config": )" + quant + "}");
  };
  for (const char* q : {R"({"quant_method": "gptq", "bits": 4, "group_size": 128})", R"({"quant_method": "awq"})",
                        R"({"quant_method": "awq", "bits": 4})"}) {
    const Experiment e = load_experiment_text("name: q\n", "exp.yaml", {"model.hf_config=" + with_quant(q)});
    EXPECT_EQ(e.model.weight_dtype, WeightDtype::int4) << q;
    EXPECT_EQ(e.model.dtype, Dtype::fp16) << q;  // the compute dtype stays torch_dtype's
  }
  const std::string msg = load_error("name: q\n", {"model.hf_config=" + with_quant(R"({"quant_method": "gptq", "bits": 8})")});
  EXPECT_NE(msg.find("quantization_config.quant_method"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'gptq' with bits 8"), std::string::npos) << msg;
}

TEST(HfConfig, Llama4ScoutReadsTextConfig) {
  const Experiment e = from_hf("llama-4-scout");
  EXPECT_EQ(e.model.name, "llama4");
  EXPECT_EQ(e.model.hidden, 5120);
  EXPECT_EQ(e.model.ffn, 8192);  // intermediate_size, not intermediate_size_mlp
  EXPECT_EQ(e.model.experts, 16);
  EXPECT_EQ(e.model.top_k, 1);
  EXPECT_EQ(e.model.shared_experts, 1);
  EXPECT_EQ(e.model.layers, 48);
  EXPECT_EQ(e.model.moe_layers, 48);  // interleave_moe_layer_step 1
  EXPECT_EQ(e.model.heads, 40);
  EXPECT_EQ(e.model.kv_heads, 8);
  EXPECT_EQ(e.model.head_dim, 128);
  EXPECT_EQ(e.model.vocab, 202048);
  EXPECT_EQ(e.model.dtype, Dtype::bf16);
  EXPECT_EQ(e.router.score, ScoreFunction::sigmoid);
  EXPECT_FALSE(e.router.renormalize);
  // Fewer layers given: the pattern follows them. Every second layer (Maverick's step) below.
  const Experiment m = from_hf("llama-4-scout", {"model.layers=8"});
  EXPECT_EQ(m.model.moe_layers, 8);
  const std::string path = write_json(R"({"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 8,
    "num_attention_heads": 4, "num_local_experts": 8, "num_experts_per_tok": 1, "intermediate_size": 32,
    "vocab_size": 100, "torch_dtype": "bfloat16", "interleave_moe_layer_step": 2})");
  EXPECT_EQ(load_experiment_text("name: l\n", "exp.yaml", {"model.hf_config=" + path}).model.moe_layers, 4);
}

TEST(HfConfig, ExplicitKeysBeatTheConfigJson) {
  const std::string yaml = "model:\n  hf_config: " + hf_path("deepseek-v3") + "\n  experts: 64\n  moe_layers: 60\n"
                           "router:\n  gating: group_limited\n";
  const Experiment e = load_experiment_text(yaml, "exp.yaml", {"router.score=softmax", "model.top_k=4"});
  EXPECT_EQ(e.model.experts, 64);
  EXPECT_EQ(e.model.moe_layers, 60);
  EXPECT_EQ(e.model.top_k, 4);
  EXPECT_EQ(e.router.gating, Gating::group_limited);
  EXPECT_EQ(e.router.score, ScoreFunction::softmax);
  EXPECT_EQ(e.model.hidden, 7168);  // the rest still from the config.json
  EXPECT_EQ(e.router.groups, 8);
}

TEST(HfConfig, TheBuiltInExperimentsKeysGiveWay) {
  // configs/quickstart.yaml gives every model key; without an experiment file they are defaults.
  const Experiment e = default_experiment({"model.hf_config=" + hf_path("deepseek-v3"), "model.hidden=1024"});
  EXPECT_EQ(e.model.experts, 256);
  EXPECT_EQ(e.model.layers, 61);
  EXPECT_EQ(e.model.moe_layers, 58);
  EXPECT_EQ(e.router.gating, Gating::aux_free_bias);
  EXPECT_EQ(e.model.hidden, 1024);  // a --set still wins
}

TEST(HfConfig, SemanticsPresetLeavesTheModelsRoutingKeys) {
  const Experiment e = from_hf("deepseek-v3", {"router.semantics=megatron"});
  EXPECT_EQ(e.router.score, ScoreFunction::sigmoid);  // megatron alone would say softmax
  EXPECT_TRUE(e.router.pre_softmax);                  // and false
  EXPECT_EQ(e.router.priority, Priority::token_major);  // a key the config.json does not give: the preset's
}

TEST(HfConfig, RelativePathResolvesAgainstTheExperimentFolder) {
  const std::string dir = testing::make_temp_dir();
  fs::create_directories(dir + "/models/v3");
  fs::copy_file(hf_path("deepseek-v3"), dir + "/models/v3/config.json");
  testing::write_text(dir + "/exp.yaml", "model:\n  hf_config: models/v3/config.json\n");
  const Experiment e = load_experiment_file(dir + "/exp.yaml", {});
  EXPECT_EQ(e.model.moe_layers, 58);
  EXPECT_TRUE(fs::path(e.model.hf_config).is_absolute()) << e.model.hf_config;
  EXPECT_TRUE(fs::equivalent(e.model.hf_config, dir + "/models/v3/config.json"));
}

TEST(HfConfig, EffectiveYamlLoadsBackEqual) {
  for (const char* model : {"mixtral-8x7b", "qwen1.5-moe-a2.7b", "deepseek-v3", "dbrx", "llama-4-scout"}) {
    const Experiment e = from_hf(model);
    const std::string yaml = experiment_to_yaml(e);
    EXPECT_NE(yaml.find("hf_config: "), std::string::npos) << model;
    EXPECT_NE(yaml.find("moe_layers: "), std::string::npos) << model;
    EXPECT_EQ(experiment_to_yaml(load_experiment_text(yaml, "back.yaml", {})), yaml) << model;
  }
}

TEST(HfConfig, ApplyOverrideDerivesTheKeysAgain) {
  Experiment e = from_hf("deepseek-v3");
  apply_override(e, "model.layers=10");
  EXPECT_EQ(e.model.layers, 10);
  EXPECT_EQ(e.model.moe_layers, 7);  // first_k_dense_replace 3 of 10
  apply_override(e, "model.hf_config=" + hf_path("mixtral-8x7b"));
  EXPECT_EQ(e.model.experts, 8);
  EXPECT_EQ(e.model.hidden, 4096);
  EXPECT_EQ(e.model.layers, 10);  // given by the earlier override: it stays
  EXPECT_EQ(e.model.moe_layers, 10);
  EXPECT_EQ(e.router.score, ScoreFunction::softmax);
}

TEST(HfConfig, MoeLayersDefaultsToEveryLayerAndIsBounded) {
  const Experiment e = load_experiment_text("model: {layers: 12}\n", "exp.yaml", {});
  EXPECT_EQ(e.model.moe_layers, 0);
  EXPECT_EQ(moe_layer_count(e.model), 12);
  EXPECT_EQ(experiment_to_yaml(e).find("moe_layers"), std::string::npos);  // unset keys are not written
  EXPECT_EQ(load_experiment_text("model: {layers: 12, moe_layers: 9}\n", "exp.yaml", {}).model.moe_layers, 9);
  std::string msg = load_error("model: {layers: 12, moe_layers: 13}\n");
  EXPECT_NE(msg.find("exp.yaml:1: model.moe_layers: expected an integer in [1, 12] (model.layers), got 13"),
            std::string::npos) << msg;
  msg = load_error("model: {moe_layers: 0}\n");
  EXPECT_NE(msg.find("model.moe_layers: expected an integer in [1, "), std::string::npos) << msg;
}

// ---- errors --------------------------------------------------------------------------------------------

struct BadHf {
  const char* name;
  std::string json;      // written as config.json ("" for none: the path is used as is)
  const char* json_key;  // must be named (with the file) in the message
};

TEST(HfConfig, BadInputsNameTheFileAndTheKey) {
  const std::string ok_common = R"("hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32, "vocab_size": 100, "torch_dtype": "bfloat16")";
  // A DeepSeek-V3-like config.json that loads, with `extra` keys added.
  const auto deepseek_with = [](const std::string& extra) {
    return R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
        "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "vocab_size": 100, "torch_dtype": "bfloat16", "scoring_func": "sigmoid", "norm_topk_prob": true,
        "topk_method": "greedy", "routed_scaling_factor": 2.5, "first_k_dense_replace": 1, )" + extra + "}";
  };
  const std::vector<BadHf> cases = {
      {"bad JSON", "{\"model_type\": \"mixtral\",", "invalid JSON"},
      {"not an object", "[1, 2]", "a JSON object"},
      {"unknown model_type", "{\"model_type\": \"llama\", " + ok_common + "}", "model_type: expected one of mixtral"},
      {"no model_type", "{" + ok_common + "}", "model_type"},
      {"missing key",
       R"({"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_experts_per_tok": 2, "intermediate_size": 32, "vocab_size": 100, "torch_dtype": "bfloat16"})",
       "num_local_experts: expected an integer for model.experts, got none"},
      {"wrong type",
       R"({"model_type": "mixtral", "hidden_size": "64", "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32, "vocab_size": 100})",
       "hidden_size: expected an integer, got \"64\""},
      {"out of range", "{\"model_type\": \"mixtral\", " + ok_common + ", \"num_local_experts\": 0}",
       "num_local_experts: model.experts: expected an integer in [1, 65536], got 0"},
      {"top_k over experts", "{\"model_type\": \"mixtral\", " + ok_common + ", \"num_experts_per_tok\": 9}",
       "num_experts_per_tok: model.top_k: expected an integer in [1, 8] (model.experts), got 9"},
      {"unknown dtype", "{\"model_type\": \"mixtral\", " + ok_common + ", \"torch_dtype\": \"int4\"}",
       "torch_dtype: expected bfloat16, float16 or float32, got 'int4'"},
      {"bad topk_method",
       R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
          "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
          "vocab_size": 100, "torch_dtype": "bfloat16", "scoring_func": "sigmoid", "norm_topk_prob": true,
          "topk_method": "top2"})",
       "topk_method: expected greedy, group_limited_greedy or noaux_tc, got 'top2'"},
      {"all layers dense",
       R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
          "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
          "vocab_size": 100, "torch_dtype": "bfloat16", "scoring_func": "sigmoid", "norm_topk_prob": true,
          "topk_method": "greedy", "first_k_dense_replace": 4, "routed_scaling_factor": 1.0})",
       "first_k_dense_replace, moe_layer_freq: model.moe_layers: expected at least one MoE layer"},
      {"odd shared width",
       R"({"model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "vocab_size": 100,
          "torch_dtype": "bfloat16", "shared_expert_intermediate_size": 48})",
       "shared_expert_intermediate_size: expected a multiple of moe_intermediate_size"},
      {"deep nesting", std::string(200, '['), "nested deeper than 64"},
      {"deepseek without first_k_dense_replace",
       R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
          "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
          "vocab_size": 100, "torch_dtype": "bfloat16", "scoring_func": "sigmoid", "norm_topk_prob": true,
          "topk_method": "greedy", "routed_scaling_factor": 2.5})",
       "first_k_dense_replace: expected an integer >= 0 for model.moe_layers, got none"},
      {"deepseek kv_lora_rank a string", deepseek_with(R"("kv_lora_rank": "512")"),
       "kv_lora_rank: expected an integer, got \"512\""},
      {"deepseek q_lora_rank a list", deepseek_with(R"("q_lora_rank": [1536])"),
       "q_lora_rank: expected an integer or null, got [1536]"},
      {"deepseek qk_nope_head_dim a float", deepseek_with(R"("qk_nope_head_dim": 128.5)"),
       "qk_nope_head_dim: expected an integer, got 128.5"},
      {"deepseek negative MTP layers", deepseek_with(R"("num_nextn_predict_layers": -1)"),
       "num_nextn_predict_layers: model.mtp_layers: expected an integer in [0, 4096], got -1"},
      {"deepseek without n_shared_experts",
       R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
          "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "vocab_size": 100,
          "torch_dtype": "bfloat16", "scoring_func": "sigmoid", "norm_topk_prob": true, "topk_method": "greedy",
          "routed_scaling_factor": 2.5, "first_k_dense_replace": 0})",
       "n_shared_experts: expected an integer or null for model.shared_experts, got none"},
  };
  for (const BadHf& c : cases) {
    const std::string path = write_json(c.json);
    const std::string msg = load_error("name: x\n", {"model.hf_config=" + path});
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(c.json_key), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name;
  }
}

TEST(HfConfig, MissingFileAndFolderNameTheKey) {
  const std::string dir = testing::make_temp_dir();
  std::string msg = load_error("model:\n  hf_config: " + dir + "/none.json\n");
  EXPECT_NE(msg.find("exp.yaml:2: model.hf_config: " + dir + "/none.json: cannot open"), std::string::npos) << msg;
  msg = load_error("name: x\n", {"model.hf_config=" + dir});
  EXPECT_NE(msg.find("--set model.hf_config=" + dir + ": model.hf_config: " + dir + ": expected a Hugging Face config.json file, got a folder"),
            std::string::npos) << msg;
}

TEST(HfConfig, AGivenKeyNeedsNoValueFromTheConfigJson) {
  // The config.json lacks num_local_experts and has a format moesim does not cost: both given explicitly.
  const std::string path = write_json(R"({"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_experts_per_tok": 2, "intermediate_size": 32, "vocab_size": 100,
    "quantization_config": {"quant_method": "bitsandbytes"}})");
  const Experiment e = load_experiment_text("model: {experts: 8, dtype: int8}\n", "exp.yaml", {"model.hf_config=" + path});
  EXPECT_EQ(e.model.experts, 8);
  EXPECT_EQ(e.model.dtype, Dtype::int8);
}

TEST(HfConfig, EveryFamilyIsRecognised) {
  EXPECT_EQ(hf_model_types().size(), 11u);
  for (const std::string& t : hf_model_types()) {
    try {
      parse_hf_config("{\"model_type\": \"" + t + "\", \"text_config\": {}}", "c.json");
    } catch (const ConfigError& e) {
      ADD_FAILURE() << t << ": " << e.what();  // values are checked when applied, not when parsed
    }
  }
}

}  // namespace
}  // namespace moesim
