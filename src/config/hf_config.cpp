// Reads a Hugging Face config.json into the experiment keys it gives (hf_config.hpp). One function per
// family maps the family's JSON keys; the routing conventions each family fixes in code (not in its
// config.json) are cited beside it from HF transformers' modeling_<family>.py. The tables of
// docs/workloads.md ("Models from a Hugging Face config.json") list every key. Deterministic, host only.
// Covered by tests/config/hf_config_test.cpp and the hf_config fuzz target.
#include "src/config/hf_config.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/common/json_error.hpp"
#include "src/config/load_config_internal.hpp"

namespace moesim {
namespace {

using nlohmann::json;

// Deeper nesting than any config.json has is refused before parsing (it only costs stack).
constexpr int kMaxJsonDepth = 64;
// A config.json is a few kB; a larger file is not one.
constexpr uintmax_t kMaxConfigBytes = uintmax_t{16} << 20;

// A JSON value as messages quote it, cut to a readable length.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// The deepest bracket nesting of `text`, outside strings.
int json_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// An object of the config and the prefix its keys have in messages ("", "text_config.", "ffn_config.").
struct View {
  const json* obj = nullptr;
  std::string prefix;
  // The value at key; nullptr when absent or JSON null (transformers writes None as null).
  const json* get(const std::string& key) const {
    if (!obj || !obj->is_object()) return nullptr;
    const auto it = obj->find(key);
    if (it == obj->end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string name(const std::string& key) const { return prefix + key; }
};

// Whether key is present with the value null (the config's None), which View::get does not tell from absent.
bool has_null(const View& v, const std::string& key) {
  return v.obj && v.obj->is_object() && v.obj->contains(key) && !v.get(key);
}

// A read value, its error, or neither (absent).
template <class T>
struct Got {
  std::optional<T> value;
  std::string error;
  bool absent() const { return !value && error.empty(); }
};

Got<int64_t> get_int(const View& v, const std::string& key) {
  const json* j = v.get(key);
  if (!j) return {};
  if (j->is_number_unsigned() && j->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return {std::nullopt, "expected an integer, got " + shown(*j)};
  }
  if (j->is_number_integer()) return {j->get<int64_t>(), ""};
  return {std::nullopt, "expected an integer, got " + shown(*j)};
}

Got<bool> get_bool(const View& v, const std::string& key) {
  const json* j = v.get(key);
  if (!j) return {};
  if (j->is_boolean()) return {j->get<bool>(), ""};
  return {std::nullopt, "expected true or false, got " + shown(*j)};
}

Got<double> get_number(const View& v, const std::string& key) {
  const json* j = v.get(key);
  if (!j) return {};
  if (j->is_number()) return {j->get<double>(), ""};
  return {std::nullopt, "expected a number, got " + shown(*j)};
}

Got<std::string> get_string(const View& v, const std::string& key) {
  const json* j = v.get(key);
  if (!j) return {};
  if (j->is_string()) return {j->get<std::string>(), ""};
  return {std::nullopt, "expected a string, got " + shown(*j)};
}

// A list of layer indices (Qwen's mlp_only_layers, Llama-4's moe_layers).
Got<std::vector<int64_t>> get_int_list(const View& v, const std::string& key) {
  const json* j = v.get(key);
  if (!j) return {};
  if (!j->is_array()) return {std::nullopt, "expected a list of layer indices, got " + shown(*j)};
  std::vector<int64_t> out;
  for (const json& x : *j) {
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > 1000000000ull) ||
        (!x.is_number_unsigned() && x.get<int64_t>() < 0)) {
      return {std::nullopt, "expected a list of layer indices (integers >= 0), got " + shown(*j)};
    }
    out.push_back(x.get<int64_t>());
  }
  return {out, ""};
}

class Builder {
 public:
  explicit Builder(HfConfig& out) : out_(out) {}

  void put(const std::string& path, const std::string& json_key, const std::string& value) {
    out_.values.push_back({path, json_key, value, ""});
  }
  void error(const std::string& path, const std::string& json_key, const std::string& message) {
    out_.values.push_back({path, json_key, "", message});
  }

  // Required integer key -> path.
  std::optional<int64_t> integer(const std::string& path, const View& v, const std::string& key) {
    const Got<int64_t> g = get_int(v, key);
    if (g.value) put(path, v.name(key), std::to_string(*g.value));
    else error(path, v.name(key), g.error.empty() ? "expected an integer for " + path + ", got none" : g.error);
    return g.value;
  }

  // Integer key -> path; absent: `fallback` (the transformers config class default).
  void integer_or(const std::string& path, const View& v, const std::string& key, int64_t fallback) {
    const Got<int64_t> g = get_int(v, key);
    if (!g.error.empty()) error(path, v.name(key), g.error);
    else put(path, v.name(key), std::to_string(g.value.value_or(fallback)));
  }

  // Boolean key -> path; absent: `fallback` (the transformers config class default), or an error without one.
  void boolean(const std::string& path, const View& v, const std::string& key, std::optional<bool> fallback) {
    const Got<bool> g = get_bool(v, key);
    if (g.value) put(path, v.name(key), *g.value ? "true" : "false");
    else if (g.absent() && fallback) put(path, v.name(key), *fallback ? "true" : "false");
    else error(path, v.name(key), g.error.empty() ? "expected true or false for " + path + ", got none" : g.error);
  }

  // A value the family fixes in its modeling code; json_key names the model_type it follows from.
  void fixed(const std::string& path, const std::string& value) { put(path, "model_type", value); }

  HfConfig& out() { return out_; }

 private:
  HfConfig& out_;
};

// hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads (absent: MHA, as the transformers
// config classes default it), head_dim (absent: hidden_size / num_attention_heads) unless `head_dim` is false
// (a family that states it under another key), vocab_size.
void common_keys(Builder& b, const View& v, bool head_dim = true) {
  const std::optional<int64_t> hidden = b.integer("model.hidden", v, "hidden_size");
  b.integer("model.layers", v, "num_hidden_layers");
  const std::optional<int64_t> heads = b.integer("model.heads", v, "num_attention_heads");
  const Got<int64_t> kv = get_int(v, "num_key_value_heads");
  if (kv.value) b.put("model.kv_heads", v.name("num_key_value_heads"), std::to_string(*kv.value));
  else if (!kv.error.empty()) b.error("model.kv_heads", v.name("num_key_value_heads"), kv.error);
  else if (heads) b.put("model.kv_heads", v.name("num_attention_heads"), std::to_string(*heads));
  else b.error("model.kv_heads", v.name("num_key_value_heads"), "expected an integer for model.kv_heads, got none");
  if (head_dim) {
    const Got<int64_t> hd = get_int(v, "head_dim");
    if (hd.value) {
      b.put("model.head_dim", v.name("head_dim"), std::to_string(*hd.value));
    } else if (!hd.error.empty()) {
      b.error("model.head_dim", v.name("head_dim"), hd.error);
    } else if (hidden && heads && *heads > 0 && *hidden % *heads == 0) {
      b.put("model.head_dim", v.name("hidden_size"), std::to_string(*hidden / *heads));
    } else {
      b.error("model.head_dim", v.name("head_dim"),
              "expected head_dim, or hidden_size divisible by num_attention_heads, for model.head_dim, got none");
    }
  }
  b.integer("model.vocab", v, "vocab_size");
}

// torch_dtype (or dtype, its name since transformers 4.56), then quantization_config.quant_method over it:
// fp8 (W8A8) is the compute dtype; mxfp4 (gpt-oss) and 4-bit gptq / awq are weight-only formats that compute
// in torch_dtype (model.weight_dtype mxfp4 or int4).
void dtype_key(Builder& b, const View& top, const View& inner) {
  const View& where = top.get("quantization_config") || !inner.get("quantization_config") ? top : inner;
  if (const json* q = where.get("quantization_config")) {
    const View qv{q, where.prefix + "quantization_config."};
    const Got<std::string> m = get_string(qv, "quant_method");
    const std::string method = m.value.value_or("");
    // AutoAWQ is 4-bit only; GPTQ states its bits (2, 3, 4 or 8), and only 4 has a kernel moesim costs.
    const Got<int64_t> bits = get_int(qv, "bits");
    const bool four_bit = method == "awq" ? (bits.absent() || (bits.value && *bits.value == 4))
                                          : (bits.value && *bits.value == 4);
    if (method == "fp8") {
      b.put("model.dtype", qv.name("quant_method"), "fp8");
      return;
    }
    if (method == "mxfp4") {
      b.put("model.weight_dtype", qv.name("quant_method"), "mxfp4");
    } else if ((method == "gptq" || method == "awq") && four_bit) {
      b.put("model.weight_dtype", qv.name("quant_method"), "int4");
    } else {
      b.error("model.dtype", qv.name("quant_method"),
              "expected fp8, mxfp4, or gptq / awq with bits 4 (the quantized formats moesim costs; set "
              "model.dtype and model.weight_dtype to cost another), got " +
                  (m.value ? "'" + method + "'" + (method == "gptq" || method == "awq" ? " with bits " +
                                                      (bits.value ? std::to_string(*bits.value) : std::string("none"))
                                                                                      : std::string())
                           : m.error.empty() ? "none" : shown(*qv.get("quant_method"))));
      return;
    }
  }
  for (const View* v : {&top, &inner}) {
    for (const char* key : {"torch_dtype", "dtype"}) {
      const Got<std::string> g = get_string(*v, key);
      if (g.absent()) continue;
      const std::string s = g.value.value_or("");
      if (s == "bfloat16") b.put("model.dtype", v->name(key), "bf16");
      else if (s == "float16") b.put("model.dtype", v->name(key), "fp16");
      else if (s == "float32") b.put("model.dtype", v->name(key), "fp32");
      else b.error("model.dtype", v->name(key),
                   "expected bfloat16, float16 or float32, got " + (g.value ? "'" + s + "'" : shown(*v->get(key))));
      return;
    }
  }
  b.error("model.dtype", "torch_dtype", "expected bfloat16, float16 or float32 (or set model.dtype), got none");
}

// A layer-pattern integer >= 1 (a step or a frequency); absent: 1.
bool pattern_step(HfLayerPattern& p, const View& v, const std::string& key, int64_t* out) {
  const Got<int64_t> g = get_int(v, key);
  if (!g.error.empty() || (g.value && *g.value < 1)) {
    p.json_key = v.name(key);
    p.error = g.error.empty() ? "expected an integer >= 1, got " + std::to_string(*g.value) : g.error;
    return false;
  }
  *out = g.value.value_or(1);
  return true;
}

// ---- the families ------------------------------------------------------------------------------------

// modeling_mixtral.py MixtralSparseMoeBlock: softmax over all experts, top-k, the k weights renormalised.
void mixtral(Builder& b, const View& v) {
  common_keys(b, v);
  b.integer("model.experts", v, "num_local_experts");
  b.integer("model.top_k", v, "num_experts_per_tok");
  b.integer("model.ffn", v, "intermediate_size");
  b.fixed("model.shared_experts", "0");
  b.fixed("router.gating", "token_choice");
  b.fixed("router.score", "softmax");
  b.fixed("router.pre_softmax", "true");
  b.fixed("router.renormalize", "true");
}

// modeling_qwen2_moe.py / modeling_qwen3_moe.py: softmax over all experts, top-k, renormalised when
// norm_topk_prob (config class default false). Qwen2-MoE adds one shared expert of
// shared_expert_intermediate_size; Qwen3-MoE has none. Layer i is MoE when (i + 1) % decoder_sparse_step == 0
// and i is not in mlp_only_layers. Qwen3-Next (modular_qwen3_next.py: Qwen3NextSparseMoeBlock is
// Qwen2MoeSparseMoeBlock, the same MoE-layer rule) has Qwen2-MoE's router and shared expert, with
// norm_topk_prob defaulting to true (configuration_qwen3_next.py); its Gated DeltaNet layers are not modeled
// apart from full attention (docs/workloads.md).
void qwen_moe(Builder& b, const View& v, bool shared, bool norm_default = false) {
  common_keys(b, v);
  b.integer("model.experts", v, "num_experts");
  b.integer("model.top_k", v, "num_experts_per_tok");
  const std::optional<int64_t> ffn = b.integer("model.ffn", v, "moe_intermediate_size");
  if (shared) {
    // One shared expert of width S costs what S / ffn routed-width experts cost (3 x hidden x width weights,
    // SwiGLU), so it maps to S / ffn shared experts when that is an integer.
    const Got<int64_t> s = get_int(v, "shared_expert_intermediate_size");
    const std::string key = v.name("shared_expert_intermediate_size");
    if (s.absent() || (s.value && *s.value == 0)) {
      b.put("model.shared_experts", key, "0");
    } else if (!s.error.empty() || *s.value < 0) {
      b.error("model.shared_experts", key, s.error.empty() ? "expected an integer >= 0, got " + std::to_string(*s.value) : s.error);
    } else if (ffn && *ffn > 0 && *s.value % *ffn == 0) {
      b.put("model.shared_experts", key, std::to_string(*s.value / *ffn));
    } else {
      b.error("model.shared_experts", key,
              "expected a multiple of moe_intermediate_size (moesim costs a shared expert at model.ffn; set "
              "model.shared_experts to choose), got " + std::to_string(*s.value));
    }
  } else {
    b.fixed("model.shared_experts", "0");
  }
  b.fixed("router.gating", "token_choice");
  b.fixed("router.score", "softmax");
  b.fixed("router.pre_softmax", "true");
  b.boolean("router.renormalize", v, "norm_topk_prob", norm_default);
  HfLayerPattern& p = b.out().moe_layers;
  p.json_key = v.name("decoder_sparse_step") + ", " + v.name("mlp_only_layers");
  p.phase = 1;
  if (!pattern_step(p, v, "decoder_sparse_step", &p.step)) return;
  const Got<std::vector<int64_t>> dense = get_int_list(v, "mlp_only_layers");
  if (!dense.error.empty()) {
    p.json_key = v.name("mlp_only_layers");
    p.error = dense.error;
    return;
  }
  p.dense_layers = dense.value.value_or(std::vector<int64_t>{});
}

// DeepSeek-V2 / V3 (modeling_deepseek.py of the model repositories, modeling_deepseek_v3.py in transformers):
// the gate scores with scoring_func, picks by topk_method, renormalises when norm_topk_prob and top_k > 1, and
// scales by routed_scaling_factor (V2 only when it does not renormalise; V3 always). Layer i is MoE when
// i >= first_k_dense_replace and i % moe_layer_freq == 0. Attention is Multi-head Latent Attention
// (model.attention mla): q_lora_rank (null: a full-rank query projection, 0), kv_lora_rank, qk_rope_head_dim,
// v_head_dim, and model.head_dim from qk_nope_head_dim, the non-rotary query and key width, as experiment.hpp
// defines it for mla (never from head_dim, which transformers' DeepseekV3Config sets to qk_rope_head_dim);
// mtp_layers from num_nextn_predict_layers. The training step costs MLA from these; the decoder's attention and
// KV cache read kv_heads = num_key_value_heads heads of head_dim, the plain-MHA approximation
// configs/deepseek-v3.yaml states.
void deepseek(Builder& b, const View& v, bool v3) {
  common_keys(b, v, false);
  b.fixed("model.attention", "mla");
  // The V2 and V3 config classes agree on these widths (DeepSeek-V2's and V3's own), so an absent key takes them.
  b.integer_or("model.head_dim", v, "qk_nope_head_dim", 128);
  b.integer_or("model.kv_lora_rank", v, "kv_lora_rank", 512);
  b.integer_or("model.qk_rope_head_dim", v, "qk_rope_head_dim", 64);
  b.integer_or("model.v_head_dim", v, "v_head_dim", 128);
  // null is the config's own None (DeepSeek-V2-Lite): the query is projected at full rank, which
  // model.q_lora_rank 0 means; absent: the classes' 1536.
  const Got<int64_t> q = get_int(v, "q_lora_rank");
  const std::string qkey = v.name("q_lora_rank");
  if (!q.error.empty())
    b.error("model.q_lora_rank", qkey, "expected an integer or null, got " + shown(*v.get("q_lora_rank")));
  else if (q.value) b.put("model.q_lora_rank", qkey, std::to_string(*q.value));
  else b.put("model.q_lora_rank", qkey, has_null(v, "q_lora_rank") ? "0" : "1536");
  // Multi-token-prediction layers; absent: none (DeepSeek-V2 has none, and transformers' DeepseekV3Config has
  // no such key).
  b.integer_or("model.mtp_layers", v, "num_nextn_predict_layers", 0);
  b.integer("model.experts", v, "n_routed_experts");
  const std::optional<int64_t> k = b.integer("model.top_k", v, "num_experts_per_tok");
  b.integer("model.ffn", v, "moe_intermediate_size");
  // n_shared_experts, routed_scaling_factor and first_k_dense_replace are required: the V2 and V3 config
  // classes default them differently (None / 1, 1.0 / 2.5, 0 / 3), so an absent key is no fact. null is the
  // config's own None: no shared experts.
  const Got<int64_t> shared = get_int(v, "n_shared_experts");
  const bool shared_null = has_null(v, "n_shared_experts");
  if (!shared.error.empty()) b.error("model.shared_experts", v.name("n_shared_experts"), shared.error);
  else if (shared.value || shared_null) b.put("model.shared_experts", v.name("n_shared_experts"), std::to_string(shared.value.value_or(0)));
  else b.error("model.shared_experts", v.name("n_shared_experts"), "expected an integer or null for model.shared_experts, got none");

  const Got<std::string> method = get_string(v, "topk_method");
  const std::string mkey = v.name("topk_method");
  bool grouped = false;
  if (method.value && *method.value == "greedy") {
    b.put("router.gating", mkey, "token_choice");
  } else if (method.value && (*method.value == "group_limited_greedy" || *method.value == "noaux_tc")) {
    b.put("router.gating", mkey, *method.value == "noaux_tc" ? "aux_free_bias" : "group_limited");
    grouped = true;
  } else {
    b.error("router.gating", mkey,
            "expected greedy, group_limited_greedy or noaux_tc, got " +
                (method.value ? "'" + *method.value + "'" : method.error.empty() ? "none" : shown(*v.get("topk_method"))));
  }
  if (grouped) {
    b.integer("router.groups", v, "n_group");
    b.integer("router.topk_groups", v, "topk_group");
  }
  const Got<std::string> score = get_string(v, "scoring_func");
  if (score.value && (*score.value == "softmax" || *score.value == "sigmoid")) {
    b.put("router.score", v.name("scoring_func"), *score.value);
  } else {
    b.error("router.score", v.name("scoring_func"),
            "expected softmax or sigmoid, got " +
                (score.value ? "'" + *score.value + "'" : score.error.empty() ? "none" : shown(*v.get("scoring_func"))));
  }
  b.fixed("router.pre_softmax", "true");
  const Got<bool> norm = get_bool(v, "norm_topk_prob");
  const std::string nkey = v.name("norm_topk_prob");
  const bool renorm = norm.value.value_or(false) && k.value_or(2) > 1;
  if (!norm.value) b.error("router.renormalize", nkey, norm.error.empty() ? "expected true or false for router.renormalize, got none" : norm.error);
  else b.put("router.renormalize", nkey, renorm ? "true" : "false");
  const Got<double> scale = get_number(v, "routed_scaling_factor");
  const std::string skey = v.name("routed_scaling_factor");
  if (!scale.error.empty() || scale.absent()) {
    b.error("router.routed_scaling_factor", skey,
            scale.absent() ? "expected a number for router.routed_scaling_factor, got none" : scale.error);
  }
  else if (!v3 && renorm) b.put("router.routed_scaling_factor", nkey, "1");  // V2 skips the scale when it renormalises
  else b.put("router.routed_scaling_factor", skey, config_detail::format_double(scale.value.value_or(1.0)));

  HfLayerPattern& p = b.out().moe_layers;
  p.json_key = v.name("first_k_dense_replace") + ", " + v.name("moe_layer_freq");
  const Got<int64_t> first = get_int(v, "first_k_dense_replace");
  if (!first.value || *first.value < 0) {
    p.json_key = v.name("first_k_dense_replace");
    p.error = !first.error.empty() ? first.error
              : first.value        ? "expected an integer >= 0, got " + std::to_string(*first.value)
                                   : "expected an integer >= 0 for model.moe_layers, got none";
    return;
  }
  p.first_dense = *first.value;
  pattern_step(p, v, "moe_layer_freq", &p.step);
}

// modeling_olmoe.py: softmax over all experts, top-k, renormalised when norm_topk_prob (default false).
void olmoe(Builder& b, const View& v) {
  common_keys(b, v);
  b.integer("model.experts", v, "num_experts");
  b.integer("model.top_k", v, "num_experts_per_tok");
  b.integer("model.ffn", v, "intermediate_size");
  b.fixed("model.shared_experts", "0");
  b.fixed("router.gating", "token_choice");
  b.fixed("router.score", "softmax");
  b.fixed("router.pre_softmax", "true");
  b.boolean("router.renormalize", v, "norm_topk_prob", false);
}

// modeling_dbrx.py DbrxRouter: softmax over all experts, top-k, the k weights divided by their
// moe_normalize_expert_weights-norm (p = 1: renormalised; null: left as they are; the config class default 1).
void dbrx(Builder& b, const View& v) {
  b.integer("model.hidden", v, "d_model");
  b.integer("model.layers", v, "n_layers");
  const std::optional<int64_t> heads = b.integer("model.heads", v, "n_heads");
  const std::optional<int64_t> hidden = get_int(v, "d_model").value;
  if (hidden && heads && *heads > 0 && *hidden % *heads == 0) b.put("model.head_dim", v.name("d_model"), std::to_string(*hidden / *heads));
  else b.error("model.head_dim", v.name("d_model"),
               "expected d_model divisible by n_heads for model.head_dim, got " +
                   (hidden && heads ? std::to_string(*hidden) + " and " + std::to_string(*heads) : std::string("none")));
  b.integer("model.vocab", v, "vocab_size");
  const View attn{v.get("attn_config"), v.name("attn_config.")};
  if (attn.obj && !attn.obj->is_object()) b.error("model.kv_heads", v.name("attn_config"), "expected a JSON object, got " + shown(*attn.obj));
  else b.integer("model.kv_heads", attn, "kv_n_heads");
  const View ffn{v.get("ffn_config"), v.name("ffn_config.")};
  if (ffn.obj && !ffn.obj->is_object()) {
    for (const char* p : {"model.experts", "model.top_k", "model.ffn", "router.renormalize"})
      b.error(p, v.name("ffn_config"), "expected a JSON object, got " + shown(*ffn.obj));
  } else {
    b.integer("model.experts", ffn, "moe_num_experts");
    b.integer("model.top_k", ffn, "moe_top_k");
    b.integer("model.ffn", ffn, "ffn_hidden_size");
    const json* p = ffn.get("moe_normalize_expert_weights");
    const bool absent_key = !ffn.obj || ffn.obj->find("moe_normalize_expert_weights") == ffn.obj->end();
    const std::string pkey = ffn.name("moe_normalize_expert_weights");
    if (absent_key || (p && p->is_number() && p->get<double>() == 1.0)) b.put("router.renormalize", pkey, "true");
    else if (!p) b.put("router.renormalize", pkey, "false");  // null: no normalisation
    else b.error("router.renormalize", pkey, "expected 1 or null (moesim renormalises by the sum only), got " + shown(*p));
  }
  b.fixed("model.shared_experts", "0");
  b.fixed("router.gating", "token_choice");
  b.fixed("router.score", "softmax");
  b.fixed("router.pre_softmax", "true");
}

// modeling_gpt_oss.py GptOssTopKRouter: top-k of the logits, softmax over the k (which sum to 1).
void gpt_oss(Builder& b, const View& v) {
  common_keys(b, v);
  b.integer("model.experts", v, "num_local_experts");
  if (get_int(v, "experts_per_token").absent()) b.integer("model.top_k", v, "num_experts_per_tok");
  else b.integer("model.top_k", v, "experts_per_token");
  b.integer("model.ffn", v, "intermediate_size");
  b.fixed("model.shared_experts", "0");
  b.fixed("router.gating", "token_choice");
  b.fixed("router.score", "softmax");
  b.fixed("router.pre_softmax", "false");
  b.fixed("router.renormalize", "false");
}

// modeling_llama4.py: Llama4Router takes the top-k logits and weights each by its sigmoid (no
// renormalisation); Llama4TextMoe adds one shared expert of intermediate_size to every MoE layer. MoE layers:
// moe_layers when given, else every interleave_moe_layer_step-th (layers step-1, 2 step-1, ...).
void llama4(Builder& b, const View& v) {
  common_keys(b, v);
  b.integer("model.experts", v, "num_local_experts");
  b.integer("model.top_k", v, "num_experts_per_tok");
  b.integer("model.ffn", v, "intermediate_size");
  const Got<int64_t> shared = get_int(v, "n_shared_experts");
  if (!shared.error.empty()) b.error("model.shared_experts", v.name("n_shared_experts"), shared.error);
  else if (shared.value) b.put("model.shared_experts", v.name("n_shared_experts"), std::to_string(*shared.value));
  else b.fixed("model.shared_experts", "1");
  b.fixed("router.gating", "token_choice");
  b.fixed("router.score", "sigmoid");
  b.fixed("router.pre_softmax", "true");
  b.fixed("router.renormalize", "false");
  HfLayerPattern& p = b.out().moe_layers;
  const Got<std::vector<int64_t>> list = get_int_list(v, "moe_layers");
  if (!list.error.empty()) {
    p.json_key = v.name("moe_layers");
    p.error = list.error;
    return;
  }
  if (list.value) {
    p.json_key = v.name("moe_layers");
    p.has_moe_list = true;
    p.moe_list = *list.value;
    return;
  }
  p.json_key = v.name("interleave_moe_layer_step");
  p.phase = 1;
  pattern_step(p, v, "interleave_moe_layer_step", &p.step);
}

}  // namespace

int64_t HfLayerPattern::count(int64_t layers) const {
  int64_t n = 0;
  for (int64_t i = 0; i < layers; ++i) {
    if (i < first_dense || (i + phase) % step != 0) continue;
    if (std::find(dense_layers.begin(), dense_layers.end(), i) != dense_layers.end()) continue;
    if (has_moe_list && std::find(moe_list.begin(), moe_list.end(), i) == moe_list.end()) continue;
    ++n;
  }
  return n;
}

const std::vector<std::string>& hf_model_types() {
  static const std::vector<std::string> types = {"mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "deepseek_v2",
                                                 "deepseek_v3", "olmoe", "dbrx",      "gpt_oss",    "llama4",
                                                 "llama4_text"};
  return types;
}

HfConfig parse_hf_config(const std::string& json_text, const std::string& source) {
  if (json_depth(json_text) > kMaxJsonDepth) {
    throw ConfigError(source + ": expected a Hugging Face config.json, got JSON nested deeper than " +
                      std::to_string(kMaxJsonDepth) + " levels");
  }
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& ex) {
    throw ConfigError(source + ": expected a Hugging Face config.json, got invalid JSON: " + json_error_text(ex.what()));
  }
  if (!root.is_object()) {
    throw ConfigError(source + ": expected a Hugging Face config.json (a JSON object), got " + shown(root));
  }
  HfConfig out;
  out.source = source;
  const View top{&root, ""};
  const Got<std::string> type = get_string(top, "model_type");
  const std::vector<std::string>& known = hf_model_types();
  if (!type.value || std::find(known.begin(), known.end(), *type.value) == known.end()) {
    throw ConfigError(source + ": model_type: expected one of " + config_detail::join(known, ", ") + ", got " +
                      (type.value ? "'" + *type.value + "'" : type.error.empty() ? "none" : shown(root["model_type"])));
  }
  out.model_type = *type.value;
  Builder b(out);
  b.fixed("model.name", out.model_type);
  // Every family's transformers modeling code routes dropless (no capacity anywhere in modeling_<family>.py),
  // and the one published bias update rate is DeepSeek-V3's gamma = 0.001 (arXiv:2412.19437, section 4.2;
  // the other families train no bias): the settings the model is trained and served with, which replace the
  // built-in experiment's Mixtral-flavoured 1.25 and 0.01 (a file's own keys win, as always).
  b.fixed("router.capacity_factor", "0");
  b.fixed("router.bias_update_rate", "0.001");
  View model = top;
  if (out.model_type == "llama4") {
    const json* text = top.get("text_config");
    if (!text || !text->is_object()) {
      throw ConfigError(source + ": text_config: expected a JSON object (the language model of llama4), got " +
                        (text ? shown(*text) : "none"));
    }
    model = View{text, "text_config."};
  }
  const std::string& t = out.model_type;
  if (t == "mixtral") mixtral(b, model);
  else if (t == "qwen2_moe" || t == "qwen3_moe") qwen_moe(b, model, t == "qwen2_moe");
  else if (t == "qwen3_next") qwen_moe(b, model, true, true);
  else if (t == "deepseek_v2" || t == "deepseek_v3") deepseek(b, model, t == "deepseek_v3");
  else if (t == "olmoe") olmoe(b, model);
  else if (t == "dbrx") dbrx(b, model);
  else if (t == "gpt_oss") gpt_oss(b, model);
  else llama4(b, model);
  dtype_key(b, top, model);
  if (out.moe_layers.json_key.empty()) out.moe_layers.json_key = "model_type";  // every layer is MoE
  return out;
}

HfConfig read_hf_config_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ConfigError(path + ": expected a Hugging Face config.json file, got a folder");
  if (!fs::exists(path, ec)) throw open_failure<ConfigError>(path, path + ": cannot open the Hugging Face config.json (no such file)");
  // Only a regular file: a device or a pipe (/dev/zero, /dev/stdin) would never end.
  if (!fs::is_regular_file(path, ec)) {
    throw ConfigError(path + ": expected a Hugging Face config.json file, got something that is not a regular file");
  }
  const auto bytes = fs::file_size(path, ec);
  if (!ec && bytes > kMaxConfigBytes) {
    throw ConfigError(path + ": expected a Hugging Face config.json of at most " + std::to_string(kMaxConfigBytes >> 20) +
                      " MiB, got " + std::to_string(bytes) + " bytes");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<ConfigError>(path, path + ": cannot open the Hugging Face config.json");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read the Hugging Face config.json");
  return parse_hf_config(text.str(), path);
}

}  // namespace moesim
