// The schema table of the config stage: the keys of the model, router, workload, placement and execute
// sections with their bounds (one table drives reading, the `--set` key checks and re-emission), the
// workload.prompt_len and placement.map readers, and the YAML writer of a whole experiment. Deterministic,
// host only. Declared in src/config/load_config_internal.hpp; covered by tests/config/load_config_test.cpp.
#include "src/config/load_config_internal.hpp"
#include "src/common/error.hpp"
#include "src/config/placement_file.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace moesim {
namespace config_detail {
namespace {

// A file a key names: relative to the experiment file's folder when the key is read from a file; from a --set, or
// in moesim's own text (the built-in experiment), against the current directory.
std::filesystem::path key_file_path(const Loader& L, const std::string& where, const std::string& file) {
  namespace fs = std::filesystem;
  fs::path resolved(file);
  const std::string& source = L.source();
  const bool from_file = where.rfind("--set ", 0) != 0 && !source.empty() && source.front() != '<';
  if (resolved.is_relative() && from_file) resolved = fs::path(source).parent_path() / resolved;
  return resolved;
}

// key_file_path made absolute and normal, so that the effective experiment reads the same file from any folder.
std::string absolute_key_file_path(const Loader& L, const std::string& where, const std::string& file) {
  namespace fs = std::filesystem;
  const fs::path resolved = key_file_path(L, where, file);
  std::error_code ec;
  const fs::path absolute = fs::absolute(resolved, ec);
  return (ec ? resolved : absolute).lexically_normal().string();
}

// workload.prompt_len written as a distribution (uniform:LO:HI, lognormal:MEDIAN:SIGMA) or file:PATH, as serve --isl
// and step --lengths take them (src/common/request_lengths.hpp). A relative file is read against the experiment's
// folder (against the current one from --set or moesim's own text) and kept absolute.
bool read_prompt_len_spec(Loader& L, const std::string& text, const std::string& path, const std::string& where,
                          Experiment& e, std::vector<int>& lens) {
  if (text.rfind("uniform:", 0) != 0 && text.rfind("lognormal:", 0) != 0 && text.rfind("file:", 0) != 0) return false;
  const std::string spec =
      text.rfind("file:", 0) == 0 && text.size() > 5 ? "file:" + absolute_key_file_path(L, where, text.substr(5)) : text;
  RequestLengths r;
  try {
    r = parse_request_lengths(spec, path);
  } catch (const InputError& ex) {
    throw ConfigError(where + ": " + ex.what());
  }
  if (r.kind == LengthKind::uniform) {  // the LO..HI range, drawn as it draws
    lens = {static_cast<int>(r.lo), static_cast<int>(r.hi)};
    L.prompt_len_text_range = true;
    return true;
  }
  e.workload.prompt_dist = r;
  lens = {static_cast<int>(std::llround(std::min(r.mean(1), static_cast<double>(kMaxSequenceLen))))};
  return true;
}

void read_prompt_len(Loader& L, const YAML::Node& n, const std::string& path, const std::string& where,
                     Experiment& e) {
  const std::string what = "a length in [1, " + std::to_string(kMaxSequenceLen) +
                           "], a list of lengths, 'LO..HI', uniform:LO:HI, lognormal:MEDIAN:SIGMA or file:PATH";
  std::vector<int> lens;
  L.prompt_len_text_range = false;
  e.workload.prompt_dist = RequestLengths{};
  if (n.IsScalar()) {
    int64_t lo = 0;
    int64_t hi = 0;
    if (!is_text_scalar(n) && parse_int64_text(n.Scalar(), &lo)) {
      lens.push_back(static_cast<int>(read_int(n, path, where, 1, kMaxSequenceLen)));
    } else if (read_prompt_len_spec(L, n.Scalar(), path, where, e, lens)) {
      // a distribution or a file: read_prompt_len_spec set the lengths
    } else if (parse_range_text(n.Scalar(), &lo, &hi)) {
      if (lo < 1 || hi > kMaxSequenceLen || lo > hi) {
        fail_expected(where, path, "'LO..HI' with 1 <= LO <= HI <= " + std::to_string(kMaxSequenceLen), describe(n));
      }
      lens = {static_cast<int>(lo), static_cast<int>(hi)};
      L.prompt_len_text_range = true;
    } else {
      fail_expected(where, path, what, describe(n));
    }
  } else if (n.IsSequence() && n.size() > 0) {
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      lens.push_back(static_cast<int>(read_int(n[i], p, L.where(p, n[i].Mark()), 1, kMaxSequenceLen)));
    }
  } else {
    fail_expected(where, path, what, n.IsSequence() ? "an empty list" : describe(n));
  }
  e.workload.prompt_len = lens;
}

void read_prompt_len_range(Loader& L, const YAML::Node& n, const std::string& path, const std::string& where,
                           Experiment&) {
  L.prompt_len_range_explicit = read_bool(n, path, where);
  L.prompt_len_range_where = where;
}

void emit_prompt_len(YAML::Emitter& out, const Experiment& e) {
  const std::vector<int>& p = e.workload.prompt_len;
  if (e.workload.prompt_dist.kind != LengthKind::fixed) {
    out << e.workload.prompt_dist.spec;
  } else if (e.workload.prompt_len_range && p.size() == 2) {
    out << std::to_string(p[0]) + ".." + std::to_string(p[1]);
  } else if (p.size() == 1) {
    out << std::to_string(p[0]);
  } else {
    out << YAML::Flow << YAML::BeginSeq;
    for (int v : p) out << std::to_string(v);
    out << YAML::EndSeq;
  }
}

// placement.map: a list (the device of each expert), or a placement file an engine loads, "FILE" or
// "FILE#LAYER" (src/config/placement_file.hpp; LAYER as the file numbers it, default its first), read now:
// a relative path from the experiment file's folder, as model.hf_config.
void read_placement_map(Loader& L, const YAML::Node& n, const std::string& path, const std::string& where,
                        Experiment& e) {
  if (n.IsScalar()) {
    namespace fs = std::filesystem;
    const std::string text = read_string(n, path, where);
    std::string file = text;
    int layer = -1;
    if (const size_t hash = text.rfind('#'); hash != std::string::npos) {
      file = text.substr(0, hash);
      const std::string num = text.substr(hash + 1);
      char* end = nullptr;
      const long v = std::strtol(num.c_str(), &end, 10);
      if (num.empty() || *end != '\0' || v < 0 || v > 1000000)
        fail_expected(where, path, "FILE or FILE#LAYER (a layer number >= 0)", "'" + text + "'");
      layer = static_cast<int>(v);
    }
    if (file.empty()) fail_expected(where, path, "a placement file (FILE or FILE#LAYER) or a list", "''");
    const fs::path resolved = key_file_path(L, where, file);
    PlacementFile f;
    try {
      f = read_placement_file(resolved.string());
    } catch (const ConfigError& ex) {
      ConfigError named(where + ": " + path + ": " + ex.what());
      named.missing_file = ex.missing_file;
      throw named;
    }
    try {
      e.placement.slot_expert = placement_file_layer(f, layer, resolved.string());
    } catch (const ConfigError& ex) {
      fail(where, path, ex.what());
    }
    e.placement.map.clear();
    e.placement.map_file = text;
    return;
  }
  if (!n.IsSequence())
    fail_expected(where, path, "a list of device indices, one per expert, or a placement file (FILE or FILE#LAYER)",
                  describe(n));
  e.placement.map_file.clear();
  e.placement.slot_expert.clear();
  std::vector<int> map;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    map.push_back(static_cast<int>(read_int(n[i], p, L.where(p, n[i].Mark()), 0, kMaxExperts - 1)));
  }
  e.placement.map = map;
}

// workload.expert_map: the logical expert of each physical expert slot of a load profile (replicas share one).
void read_expert_map(Loader& L, const YAML::Node& n, const std::string& path, const std::string& where,
                     Experiment& e) {
  if (!n.IsSequence())
    fail_expected(where, path, "a list of logical experts, one per physical expert of the profile", describe(n));
  if (n.size() > static_cast<size_t>(kMaxExperts))
    fail_expected(where, path, "at most " + std::to_string(kMaxExperts) + " entries", std::to_string(n.size()));
  std::vector<int> map;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    map.push_back(static_cast<int>(read_int(n[i], p, L.where(p, n[i].Mark()), 0, kMaxExperts - 1)));
  }
  e.workload.expert_map = map;
}

// model.hf_config: a file path (absolute_key_file_path).
void read_hf_config_path(Loader& L, const YAML::Node& n, const std::string& path, const std::string& where,
                         Experiment& e) {
  const std::string p = read_string(n, path, where);
  e.model.hf_config = p.empty() ? std::string() : absolute_key_file_path(L, where, p);
}

// train.routing: model, forced_balance, power_law:ALPHA or rank_overload:X (experiment.hpp TrainRouting).
void read_train_routing(Loader&, const YAML::Node& n, const std::string& path, const std::string& where,
                        Experiment& e) {
  const std::string text = n.IsScalar() ? n.Scalar() : std::string();
  const std::optional<TrainRouting> r = parse_train_routing(text);
  if (!n.IsScalar() || !r)
    fail_expected(where, path,
                  "model, forced_balance, power_law:ALPHA (ALPHA in (0, 10], not 1) or rank_overload:X (X >= 1)",
                  describe(n));
  e.train.routing = *r;
}

void emit_int_list(YAML::Emitter& out, const std::vector<int>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (int x : v) out << std::to_string(x);
  out << YAML::EndSeq;
}

}  // namespace

const std::vector<Section>& sections() {
  using E = Experiment;
  static const std::vector<Section> table = {
      {"model",
       {string_field("name", &E::model, &ModelConfig::name),
        int_field("hidden", &E::model, &ModelConfig::hidden, 1, kMaxWidth),
        int_field("ffn", &E::model, &ModelConfig::ffn, 1, kMaxWidth),
        int_field("experts", &E::model, &ModelConfig::experts, 1, kMaxExperts),
        int_field("top_k", &E::model, &ModelConfig::top_k, 1, kMaxExperts),
        int_field("shared_experts", &E::model, &ModelConfig::shared_experts, 0, kMaxExperts),
        int_field("layers", &E::model, &ModelConfig::layers, 1, kMaxLayers),
        optional_int_field("moe_layers", &E::model, &ModelConfig::moe_layers, 1, kMaxLayers),
        int_field("heads", &E::model, &ModelConfig::heads, 1, kMaxHeads),
        int_field("kv_heads", &E::model, &ModelConfig::kv_heads, 1, kMaxHeads),
        int_field("head_dim", &E::model, &ModelConfig::head_dim, 1, kMaxHeads),
        int_field("vocab", &E::model, &ModelConfig::vocab, 1, kMaxVocab),
        enum_field("dtype", &E::model, &ModelConfig::dtype),
        enum_field("weight_dtype", &E::model, &ModelConfig::weight_dtype),
        bool_field("gated_experts", &E::model, &ModelConfig::gated_experts),
        optional_int_field("dense_ffn", &E::model, &ModelConfig::dense_ffn, 1, kMaxWidth),
        int_field("mtp_layers", &E::model, &ModelConfig::mtp_layers, 0, kMaxLayers),
        enum_field("attention", &E::model, &ModelConfig::attention),
        int_field("q_lora_rank", &E::model, &ModelConfig::q_lora_rank, 0, kMaxWidth),
        int_field("kv_lora_rank", &E::model, &ModelConfig::kv_lora_rank, 0, kMaxWidth),
        int_field("qk_rope_head_dim", &E::model, &ModelConfig::qk_rope_head_dim, 0, kMaxHeads),
        int_field("v_head_dim", &E::model, &ModelConfig::v_head_dim, 0, kMaxHeads),
        {"hf_config", read_hf_config_path, [](YAML::Emitter& out, const Experiment& e) { out << e.model.hf_config; },
         [](const Experiment& e) { return !e.model.hf_config.empty(); }}}},
      {"router",
       {enum_field("gating", &E::router, &RouterConfig::gating),
        enum_field("semantics", &E::router, &RouterConfig::semantics),
        enum_field("score", &E::router, &RouterConfig::score),
        bool_field("renormalize", &E::router, &RouterConfig::renormalize),
        bool_field("pre_softmax", &E::router, &RouterConfig::pre_softmax),
        double_field("capacity_factor", &E::router, &RouterConfig::capacity_factor, Bound::at_least),
        int_field("min_capacity", &E::router, &RouterConfig::min_capacity, 0, kMaxTokensPerBatch),
        enum_field("drop_policy", &E::router, &RouterConfig::drop_policy),
        enum_field("priority", &E::router, &RouterConfig::priority),
        enum_field("capacity_scope", &E::router, &RouterConfig::capacity_scope),
        bool_field("renormalize_after_drop", &E::router, &RouterConfig::renormalize_after_drop),
        enum_field("layout", &E::router, &RouterConfig::layout),
        int_field("block_size", &E::router, &RouterConfig::block_size, 1, kMaxWidth),
        double_field("noise_std", &E::router, &RouterConfig::noise_std, Bound::at_least),
        int_field("sinkhorn_iterations", &E::router, &RouterConfig::sinkhorn_iterations, 1, kMaxRepeats),
        double_field("sinkhorn_tolerance", &E::router, &RouterConfig::sinkhorn_tolerance, Bound::above),
        int_field("groups", &E::router, &RouterConfig::groups, 1, kMaxExperts),
        int_field("topk_groups", &E::router, &RouterConfig::topk_groups, 1, kMaxExperts),
        enum_field("group_mask_fill", &E::router, &RouterConfig::group_mask_fill),
        double_field("bias_update_rate", &E::router, &RouterConfig::bias_update_rate, Bound::at_least),
        enum_field("bias_update_counts", &E::router, &RouterConfig::bias_update_counts),
        enum_field("bias_update_arithmetic", &E::router, &RouterConfig::bias_update_arithmetic),
        enum_field("capacity_rounding", &E::router, &RouterConfig::capacity_rounding),
        double_field("routed_scaling_factor", &E::router, &RouterConfig::routed_scaling_factor, Bound::above)}},
      {"workload",
       {enum_field("source", &E::workload, &WorkloadConfig::source),
        int_field("batch", &E::workload, &WorkloadConfig::batch, 1, kMaxTokensPerBatch),
        int_field("batches", &E::workload, &WorkloadConfig::batches, 1, kMaxRepeats),
        {"prompt_len", read_prompt_len, emit_prompt_len},
        // Not written back: emit_prompt_len writes a range as "LO..HI", which implies it.
        {"prompt_len_range", read_prompt_len_range, nullptr},
        int_field("decode_steps", &E::workload, &WorkloadConfig::decode_steps, 0, kMaxSequenceLen),
        {"seed",
         [](Loader&, const YAML::Node& n, const std::string& path, const std::string& where, Experiment& e) {
           e.workload.seed = read_uint64(n, path, where);
         },
         [](YAML::Emitter& out, const Experiment& e) { out << std::to_string(e.workload.seed); }},
        double_field("skew", &E::workload, &WorkloadConfig::skew, Bound::at_least),
        enum_field("popularity", &E::workload, &WorkloadConfig::popularity),
        double_field("group_skew", &E::workload, &WorkloadConfig::group_skew, Bound::at_least),
        double_field("drift", &E::workload, &WorkloadConfig::drift, Bound::at_least),
        double_field("batch_variation", &E::workload, &WorkloadConfig::batch_variation, Bound::at_least),
        int_field("topics", &E::workload, &WorkloadConfig::topics, 1, kMaxWidth),
        string_field("path", &E::workload, &WorkloadConfig::path),
        string_field("profile_key", &E::workload, &WorkloadConfig::profile_key),
        enum_field("format", &E::workload, &WorkloadConfig::format),
        {"expert_map", read_expert_map,
         [](YAML::Emitter& out, const Experiment& e) { emit_int_list(out, e.workload.expert_map); }},
        enum_field("distribution", &E::workload, &WorkloadConfig::distribution),
        double_field("power_law_alpha", &E::workload, &WorkloadConfig::power_law_alpha, Bound::above)}},
      {"placement",
       {enum_field("kind", &E::placement, &PlacementConfig::kind),
        enum_field("policy", &E::placement, &PlacementConfig::policy),
        int_field("devices", &E::placement, &PlacementConfig::devices, 1, kMaxExperts),
        int_field("tensor_parallel", &E::placement, &PlacementConfig::tensor_parallel, 1, 1024),
        int_field("replicas", &E::placement, &PlacementConfig::replicas, 0, kMaxExperts),
        int_field("nodes", &E::placement, &PlacementConfig::nodes, 1, kMaxExperts),
        int_field("groups", &E::placement, &PlacementConfig::groups, 0, kMaxExperts),
        {"map", read_placement_map,
         [](YAML::Emitter& out, const Experiment& e) {
           if (!e.placement.map_file.empty()) {
             out << e.placement.map_file;
           } else {
             emit_int_list(out, e.placement.map);
           }
         }},
        bool_field("spread_replicas", &E::placement, &PlacementConfig::spread_replicas),
        enum_field("plan_from", &E::placement, &PlacementConfig::plan_from),
        string_field("plan_profile", &E::placement, &PlacementConfig::plan_profile),
        int_field("warmup_batches", &E::placement, &PlacementConfig::warmup_batches, 0, 4096),
        int_field("rebalance_every", &E::placement, &PlacementConfig::rebalance_every, 0, kIntMax),
        enum_field("load_estimator", &E::placement, &PlacementConfig::load_estimator),
        double_field("ema_weight", &E::placement, &PlacementConfig::ema_weight, Bound::above),
        enum_field("a2a_kernel", &E::placement, &PlacementConfig::a2a_kernel),
        enum_field("dispatch_dtype", &E::placement, &PlacementConfig::dispatch_dtype),
        enum_field("combine_dtype", &E::placement, &PlacementConfig::combine_dtype),
        enum_field("overlap", &E::placement, &PlacementConfig::overlap),
        enum_field("request_balance", &E::placement, &PlacementConfig::request_balance),
        int_field("attention_tp", &E::placement, &PlacementConfig::attention_tp, 1, 1024)}},
      {"execute",
       {bool_field("enabled", &E::execute, &ExecuteConfig::enabled),
        int_field("hidden", &E::execute, &ExecuteConfig::hidden, 1, kMaxWidth),
        int_field("ffn", &E::execute, &ExecuteConfig::ffn, 1, kMaxWidth),
        int_field("layers", &E::execute, &ExecuteConfig::layers, 1, kMaxLayers),
        int_field("repeats", &E::execute, &ExecuteConfig::repeats, 1, kMaxRepeats),
        enum_field("dtype", &E::execute, &ExecuteConfig::dtype)}},
      {"train",
       {int_field("gpus", &E::train, &TrainConfig::gpus, 1, kMaxTrainGpus),
        int_field("tp", &E::train, &TrainConfig::tp, 1, kMaxTrainGpus),
        int_field("pp", &E::train, &TrainConfig::pp, 1, kMaxLayers),
        int_field("vpp", &E::train, &TrainConfig::vpp, 1, kMaxLayers),
        int_field("ep", &E::train, &TrainConfig::ep, 1, kMaxExperts),
        int_field("etp", &E::train, &TrainConfig::etp, 1, kMaxTrainGpus),
        int_field("cp", &E::train, &TrainConfig::cp, 1, kMaxTrainGpus),
        int_field("seq_len", &E::train, &TrainConfig::seq_len, 1, kMaxSequenceLen),
        int_field("global_batch", &E::train, &TrainConfig::global_batch, 1, kMaxTrainBatch),
        int_field("micro_batch", &E::train, &TrainConfig::micro_batch, 1, kMaxTrainBatch),
        enum_field("precision", &E::train, &TrainConfig::precision),
        enum_field("recompute", &E::train, &TrainConfig::recompute),
        enum_field("dispatcher", &E::train, &TrainConfig::dispatcher),
        {"routing", read_train_routing,
         [](YAML::Emitter& out, const Experiment& e) { out << to_string(e.train.routing); }},
        bool_field("ep_overlap", &E::train, &TrainConfig::ep_overlap),
        bool_field("tp_comm_overlap", &E::train, &TrainConfig::tp_comm_overlap),
        bool_field("dp_overlap", &E::train, &TrainConfig::dp_overlap),
        int_field("routed_micro_batches", &E::train, &TrainConfig::routed_micro_batches, 1, kMaxRoutedMicroBatches)}},
  };
  return table;
}

const Section* find_section(const std::string& key) {
  for (const Section& s : sections()) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

const std::vector<std::string>& top_keys() {
  static const std::vector<std::string> keys = {"name",      "model",     "router",  "workload", "hardware",
                                                "placement", "execute",   "train",   "expect"};
  return keys;
}

// One section's map: every key known and given once; notes where each value came from.
void Loader::read_section(const Section& s, const YAML::Node& n, const std::string& where_, Experiment& e) {
  if (n.IsNull()) return;
  if (!n.IsMap()) fail_expected(where_, s.key, "a map (keys: " + join(s.keys(), ", ") + ")", describe(n));
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string name = key_name(it->first, s.key, where(s.key, it->first.Mark()), seen);
    const std::string path = s.key + "." + name;
    const std::string at = where(path, it->first.Mark());
    const Field* f = s.find(name);
    if (!f) fail(at, path, "unknown key (" + nearest_names(name, s.keys(), s.key + ".", "moesim config --explain lists every key") + ")");
    f->read(*this, it->second, path, at, e);
    origins_[path] = at;
  }
}

void emit_experiment(YAML::Emitter& out, const Experiment& e, bool given_preset_keys_only) {
  const std::vector<std::string>& preset = semantics_preset_keys();
  const std::vector<std::string>& given = e.router.given_preset_keys;
  const std::vector<std::string>& from_hf = e.model.hf_config_keys;
  auto left_to_hf_config = [&](const std::string& path) {
    return std::find(from_hf.begin(), from_hf.end(), path) != from_hf.end();
  };
  auto left_to_preset = [&](const std::string& key) {
    return std::find(preset.begin(), preset.end(), key) != preset.end() &&
           std::find(given.begin(), given.end(), key) == given.end();
  };
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << e.name;
  for (const Section& s : sections()) {
    out << YAML::Key << s.key << YAML::Value << YAML::BeginMap;
    for (const Field& f : s.fields) {
      if (!f.emit || (f.present && !f.present(e))) continue;
      if (given_preset_keys_only && s.key == "router" && left_to_preset(f.key)) continue;
      if (given_preset_keys_only && left_to_hf_config(s.key + "." + f.key)) continue;
      out << YAML::Key << f.key << YAML::Value;
      f.emit(out, e);
    }
    out << YAML::EndMap;
    if (s.key == "workload") {  // keep the section order of experiment.hpp: hardware follows workload
      out << YAML::Key << "hardware" << YAML::Value;
      if (e.hardware.inline_yaml.empty()) {
        out << e.hardware.name;
      } else {
        out << YAML::Load(e.hardware.inline_yaml);
      }
    }
  }
  out << YAML::Key << "expect" << YAML::Value;
  if (e.expect.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (const Expectation& x : e.expect) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "metric" << YAML::Value << x.metric;
    out << YAML::Key << "aggregate" << YAML::Value << x.aggregate;
    if (!x.strategy.empty()) out << YAML::Key << "strategy" << YAML::Value << x.strategy;
    if (x.min) out << YAML::Key << "min" << YAML::Value << format_double(*x.min);
    if (x.max) out << YAML::Key << "max" << YAML::Value << format_double(*x.max);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
}

}  // namespace config_detail
}  // namespace moesim
