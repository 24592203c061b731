// A Hugging Face config.json -> the experiment keys it gives (model.hidden, model.experts, router.score, ...,
// model.moe_layers), for `model.hf_config: PATH` (docs/workloads.md "Models from a Hugging Face config.json").
// Input: the JSON text and the name messages give it. Output: HfConfig, one value (YAML scalar text) or one
// deferred error per key; the Loader (load_config.cpp) puts a value where the experiment file and the --set
// did not give the key, and raises a key's error only then. File-level problems (unreadable, not JSON, an
// unknown model_type) throw ConfigError at once. Deterministic, host only. Covered by
// tests/config/hf_config_test.cpp, tests/cli/hf_config_cli_test.cpp and the hf_config fuzz target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moesim {

// One experiment key a config.json gives.
struct HfValue {
  std::string path;      // the experiment key, e.g. "model.experts"
  std::string json_key;  // where in the JSON it comes from, e.g. "num_local_experts", "ffn_config.moe_top_k"
  std::string value;     // YAML scalar text, e.g. "8", "true", "sigmoid" (empty when error is set)
  // Non-empty: the config.json cannot give this key; the message reads "FILE: JSON_KEY: " + error.
  std::string error;
};

// Which decoder layers have an MoE FFN. Layer i (0-based) is MoE when i >= first_dense,
// (i + phase) % step == 0, i is not in dense_layers, and i is in moe_list when has_moe_list.
struct HfLayerPattern {
  std::string json_key;  // the JSON keys the pattern comes from, for messages
  int64_t first_dense = 0;
  int64_t step = 1;
  int64_t phase = 0;
  std::vector<int64_t> dense_layers;
  bool has_moe_list = false;
  std::vector<int64_t> moe_list;
  std::string error;     // non-empty: the pattern cannot be read (message as HfValue::error)
  // The MoE layers among layers 0 .. layers-1.
  int64_t count(int64_t layers) const;
};

struct HfConfig {
  std::string source;      // the file as messages name it
  std::string model_type;  // the family, e.g. "deepseek_v3" (llama4: the outer one)
  std::vector<HfValue> values;
  HfLayerPattern moe_layers;
};

// The model_type values moesim reads, in the order docs/workloads.md lists them.
const std::vector<std::string>& hf_model_types();

// Parses config.json text. Throws ConfigError "SOURCE: ..." for text that is not a JSON object, and
// "SOURCE: model_type: expected one of ..., got ..." for a family moesim does not read.
HfConfig parse_hf_config(const std::string& json_text, const std::string& source);

// Reads the file at `path` (named as given in messages) and parses it. Throws ConfigError naming the path
// for a missing or unreadable file, or a folder.
HfConfig read_hf_config_file(const std::string& path);

}  // namespace moesim
