// The config stage: YAML text -> node tree -> `--set` overrides applied to the tree -> typed Experiment
// -> cross-field validation. One schema table drives reading, `--set` key checks and re-emission, so
// every key of experiment.hpp is read, overridable and written back the same way. This file holds the
// entry points, the top-level read and the cross-field checks; the table, the YAML helpers, hardware and
// expect, and --set are in load_config_{sections,yaml,expect,set}.cpp (load_config_internal.hpp).
// Errors: one line, "FILE:LINE: KEY.PATH: expected WHAT, got VALUE", or "--set KEY=VALUE: ..." for a
// value that came from an override. Deterministic, host only. Covered by tests/config/load_config_test.cpp.
#include "src/config/load_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "src/common/embedded.hpp"
#include "src/common/error.hpp"
#include "src/config/key_effects.hpp"
#include "src/config/load_config_internal.hpp"

namespace moesim {
namespace config_detail {

// The root map: each top-level key to its reader (a section of the table, name, hardware, expect), then
// the prompt-length form and the cross-field checks.
Experiment Loader::read(const YAML::Node& root) {
  Experiment e;
  std::set<std::string> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string name = key_name(it->first, "", where("", it->first.Mark()), seen);
    const std::string at = where(name, it->first.Mark());
    const YAML::Node v = it->second;
    if (const Section* s = find_section(name)) {
      read_section(*s, v, at, e);
    } else if (name == "name") {
      e.name = read_string(v, name, at);
    } else if (name == "hardware") {
      read_hardware(v, at, e);
    } else if (name == "expect") {
      read_expect(v, at, e);
    } else {
      fail(at, name, "unknown key (" + nearest_names(name, top_keys(), "", "known: " + join(top_keys(), ", ")) + ")");
    }
    origins_[name] = at;
  }
  e.workload.prompt_len_range = prompt_len_text_range || prompt_len_range_explicit.value_or(false);
  if (prompt_len_text_range && prompt_len_range_explicit == false) {
    fail_expected(prompt_len_range_where, "workload.prompt_len_range",
                  "true (workload.prompt_len is written 'LO..HI')", "false");
  }
  // A Hugging Face config.json fills the keys the file and the --set did not give; its routing keys then
  // count as given, so the semantics preset leaves them as the model has them.
  if (!e.model.hf_config.empty()) apply_hf_config(e);
  // The semantics preset fills the convention keys the file and the --set did not give. The built-in
  // experiment's own convention keys (configs/quickstart.yaml: Mixtral's softmax, renormalised) are not
  // the user's: a preset other than exact sets them as its framework does.
  const bool built_in_text = source_ == "<built-in>";
  for (const std::string& key : semantics_preset_keys()) {
    const auto it = origins_.find("router." + key);
    if (it == origins_.end()) continue;
    const bool by_set = it->second.rfind("--set ", 0) == 0;
    if (built_in_text && !by_set && e.router.semantics != RoutingSemantics::exact) continue;
    e.router.given_preset_keys.push_back(key);
  }
  apply_semantics_preset(e.router, e.model.top_k, e.router.given_preset_keys);
  // What the user gave: every key of the file, but the built-in default's own keys, and every --set.
  const bool built_in = !source_.empty() && source_.front() == '<';
  for (const std::string& key : schema_key_paths()) {
    auto it = origins_.find(key);
    const auto& filled = e.model.hf_config_keys;  // what model.hf_config filled is not the user's
    if (it == origins_.end() || std::find(filled.begin(), filled.end(), key) != filled.end()) continue;
    const bool by_set = it->second.rfind("--set ", 0) == 0;
    if (by_set || !built_in) e.given_keys.push_back(key);
    if (by_set) e.set_keys.push_back(key);
  }
  validate(e);
  return e;
}

// The expert-parallel placement's keys against each other (EPLB's asserts, docs/cost-model.md "Expert
// placement"); a single placement ignores them, but a map and ema_weight are checked always.
void Loader::validate_placement(const Experiment& e) const {
  const PlacementConfig& p = e.placement;
  const PlacementPolicy policy = effective_policy(p);
  const std::string pol = p.policy == PlacementPolicy::automatic
                              ? std::string("auto (") + to_string(policy) + (p.replicas > 0 ? " with" : " without") +
                                    " replicas)"
                              : std::string(to_string(p.policy));
  if (p.ema_weight > 1) {
    std::ostringstream got;
    got << p.ema_weight;
    fail_expected(origin({"placement.ema_weight"}), "placement.ema_weight", "a number in (0, 1]", got.str());
  }
  if ((!p.map.empty() || !p.slot_expert.empty()) && p.policy != PlacementPolicy::map) {
    fail_expected(origin({"placement.map", "placement.policy"}), "placement.map",
                  "no map for placement.policy " + pol + " (set placement.policy: map to use it)",
                  p.map_file.empty() ? std::to_string(p.map.size()) + " entries" : "'" + p.map_file + "'");
  }
  if (e.model.ffn % p.tensor_parallel != 0) {
    fail_expected(origin({"placement.tensor_parallel", "model.ffn"}), "placement.tensor_parallel",
                  "a divisor of model.ffn (" + std::to_string(e.model.ffn) + "): each GPU holds ffn / T of an expert",
                  std::to_string(p.tensor_parallel));
  }
  if (e.model.heads % p.attention_tp != 0) {
    fail_expected(origin({"placement.attention_tp", "model.heads"}), "placement.attention_tp",
                  "a divisor of model.heads (" + std::to_string(e.model.heads) + "): each GPU of an attention rank "
                  "runs heads / T", std::to_string(p.attention_tp));
  }
  if (p.kind != PlacementKind::expert_parallel) return;
  if (p.devices % p.attention_tp != 0) {
    fail_expected(origin({"placement.attention_tp", "placement.devices"}), "placement.attention_tp",
                  "a divisor of placement.devices (" + std::to_string(p.devices) + "): attention data parallel = "
                  "devices / T ranks", std::to_string(p.attention_tp));
  }
  const int E = e.model.experts, D = p.devices, R = p.replicas;
  const int slots = E + R;
  if (p.policy == PlacementPolicy::map && p.map.empty() && p.slot_expert.empty()) {
    fail_expected(origin({"placement.map", "placement.policy"}), "placement.map",
                  "one device per expert, or a placement file, for placement.policy map", "no map");
  }
  const int file_slots = static_cast<int>(p.slot_expert.size());
  if (file_slots > 0) {
    // An engine's file: slot s on device s / (S / D), every expert at least once, replicas = S - E.
    if (file_slots % D != 0) {
      fail_expected(origin({"placement.map", "placement.devices"}), "placement.devices",
                    "a divisor of the placement file's " + std::to_string(file_slots) + " slots ('" + p.map_file + "')",
                    std::to_string(D));
    }
    std::vector<bool> present(static_cast<size_t>(E), false);
    for (size_t s = 0; s < p.slot_expert.size(); ++s) {
      if (p.slot_expert[s] >= E) {
        fail_expected(origin({"placement.map", "model.experts"}), "placement.map",
                      "logical experts in [0, " + std::to_string(E - 1) + "] (model.experts) in '" + p.map_file + "'",
                      "expert " + std::to_string(p.slot_expert[s]) + " at slot " + std::to_string(s));
      }
      present[static_cast<size_t>(p.slot_expert[s])] = true;
    }
    for (int x = 0; x < E; ++x) {
      if (!present[static_cast<size_t>(x)]) {
        fail_expected(origin({"placement.map", "model.experts"}), "placement.map",
                      "every expert of model.experts = " + std::to_string(E) + " on a slot of '" + p.map_file + "'",
                      "no slot for expert " + std::to_string(x));
      }
    }
    if (R != 0 && R != file_slots - E) {
      fail_expected(origin({"placement.replicas", "placement.map"}), "placement.replicas",
                    "0 or " + std::to_string(file_slots - E) + " (the placement file's slots less model.experts)",
                    std::to_string(R));
    }
  }
  const bool static_policy = !plans_from_loads(p);
  if (static_policy && R > 0 && file_slots == 0) {
    fail_expected(origin({"placement.replicas", "placement.policy"}), "placement.replicas",
                  "0 for placement.policy " + pol + " (replicas are placed by EPLB: placement.policy auto, global or "
                  "hierarchical)",
                  std::to_string(R));
  }
  if (static_policy && p.rebalance_every > 0) {
    fail_expected(origin({"placement.rebalance_every", "placement.policy"}), "placement.rebalance_every",
                  "0 for placement.policy " + pol + " (it ignores loads; use global or hierarchical, or set replicas)",
                  std::to_string(p.rebalance_every));
  }
  if (p.rebalance_every > 0 && (e.workload.source == WorkloadSource::load_profile ||
                                e.workload.source == WorkloadSource::load_distribution)) {
    fail_expected(origin({"placement.rebalance_every", "workload.source"}), "placement.rebalance_every",
                  std::string("0 for workload.source ") + to_string(e.workload.source) +
                      " (its records are layers of one step; re-planning runs over the steps of a synthetic, logits, "
                      "decoder or trace workload)",
                  std::to_string(p.rebalance_every));
  }
  if (p.plan_from == PlanFrom::profile && p.plan_profile.empty()) {
    fail_expected(origin({"placement.plan_from", "placement.plan_profile"}), "placement.plan_profile",
                  "a load-profile file for placement.plan_from profile", "none");
  }
  if (p.plan_from != PlanFrom::profile && !p.plan_profile.empty()) {
    fail_expected(origin({"placement.plan_profile", "placement.plan_from"}), "placement.plan_profile",
                  std::string("no file for placement.plan_from ") + to_string(p.plan_from) +
                      " (set placement.plan_from: profile to plan from it)",
                  "'" + p.plan_profile + "'");
  }
  if (static_policy) return;
  // devices 1 under mpirun means the job's size: checked there (src/distributed/ep_run.cpp).
  if (slots % D != 0) {
    fail_expected(origin({"placement.devices", "placement.replicas", "model.experts"}), "placement.devices",
                  "a divisor of model.experts + placement.replicas (" + std::to_string(slots) + ") for placement.policy " +
                      pol,
                  std::to_string(D));
  }
  if (p.spread_replicas && int64_t{slots} > int64_t{E} * D) {
    fail_expected(origin({"placement.spread_replicas", "placement.replicas", "placement.devices"}),
                  "placement.spread_replicas",
                  "false, or placement.replicas <= model.experts x (placement.devices - 1) = " +
                      std::to_string(int64_t{E} * (D - 1)),
                  "true with " + std::to_string(R) + " replicas");
  }
  if (policy != PlacementPolicy::hierarchical) return;
  const int G = p.groups > 0 ? p.groups : e.router.groups;
  const std::string gkey = p.groups > 0 ? "placement.groups" : "router.groups";
  if (E % G != 0) {
    fail_expected(origin({gkey, "model.experts", "placement.policy"}), gkey,
                  "a divisor of model.experts (" + std::to_string(E) + ") for placement.policy hierarchical",
                  std::to_string(G));
  }
  if (G % p.nodes != 0) {
    fail_expected(origin({"placement.nodes", gkey, "placement.policy"}), "placement.nodes",
                  "a divisor of " + gkey + " (" + std::to_string(G) + ") for placement.policy hierarchical",
                  std::to_string(p.nodes));
  }
  if (D % p.nodes != 0) {
    fail_expected(origin({"placement.nodes", "placement.devices", "placement.policy"}), "placement.nodes",
                  "a divisor of placement.devices (" + std::to_string(D) + ") for placement.policy hierarchical",
                  std::to_string(p.nodes));
  }
}

// Constraints between keys, checked once every override is in; each names the key and where it was last set.
void Loader::validate(const Experiment& e) const {
  const ModelConfig& m = e.model;
  const RouterConfig& r = e.router;
  const WorkloadConfig& w = e.workload;
  const PlacementConfig& p = e.placement;
  const std::string E = std::to_string(m.experts);
  if (w.batch_variation > 1) {
    std::ostringstream got;
    got << w.batch_variation;
    fail_expected(origin({"workload.batch_variation"}), "workload.batch_variation", "a share in [0, 1]", got.str());
  }
  if (m.top_k > m.experts) {
    fail_expected(origin({"model.top_k", "model.experts"}), "model.top_k",
                  "an integer in [1, " + E + "] (model.experts)", std::to_string(m.top_k));
  }
  if (m.moe_layers > m.layers) {
    fail_expected(origin({"model.moe_layers", "model.layers"}), "model.moe_layers",
                  "an integer in [1, " + std::to_string(m.layers) + "] (model.layers)", std::to_string(m.moe_layers));
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    fail_expected(origin({"model.kv_heads", "model.heads"}), "model.kv_heads",
                  "a divisor of model.heads (" + std::to_string(m.heads) + ")", std::to_string(m.kv_heads));
  }
  // The groups shape only group-limited routing (group_limited, and aux_free_bias, DeepSeek-V3's routing
  // with its bias): checked when one of them routes (compare checks each variant).
  if (r.gating == Gating::group_limited || r.gating == Gating::aux_free_bias) {
    if (m.experts % r.groups != 0) {
      fail_expected(origin({"router.groups", "model.experts", "router.gating"}), "router.groups",
                    "a divisor of model.experts (" + E + ") for " + to_string(r.gating) + " gating", std::to_string(r.groups));
    }
    if (r.topk_groups > r.groups) {
      fail_expected(origin({"router.topk_groups", "router.groups", "router.gating"}), "router.topk_groups",
                    "an integer in [1, " + std::to_string(r.groups) + "] (router.groups)", std::to_string(r.topk_groups));
    }
    const int64_t reachable = int64_t{r.topk_groups} * (m.experts / r.groups);
    if (m.top_k > reachable) {
      fail_expected(origin({"model.top_k", "router.topk_groups", "router.gating"}), "model.top_k",
                    "an integer <= router.topk_groups * model.experts / router.groups = " + std::to_string(reachable) +
                        " for group_limited gating",
                    std::to_string(m.top_k));
    }
  }
  if ((w.source == WorkloadSource::trace || w.source == WorkloadSource::load_profile ||
       w.source == WorkloadSource::logits) &&
      w.path.empty()) {
    fail_expected(origin({"workload.path", "workload.source"}), "workload.path",
                  std::string("a file path for source ") + to_string(w.source), "''");
  }
  // Weight-only quantization dequantizes into a 16-bit compute dtype (Marlin, the mxfp4 MoE kernels).
  if (m.weight_dtype != WeightDtype::same && m.dtype != Dtype::bf16 && m.dtype != Dtype::fp16) {
    fail_expected(origin({"model.dtype", "model.weight_dtype"}), "model.dtype",
                  std::string("bf16 or fp16 with model.weight_dtype ") + to_string(m.weight_dtype) +
                      " (its weights are dequantized to a 16-bit compute dtype)",
                  to_string(m.dtype));
  }
  // The truncated power law's inverse CDF divides by 1 - alpha (src/workload/load_distribution.cpp).
  if (w.source == WorkloadSource::load_distribution && w.distribution == LoadDistribution::power_law &&
      std::fabs(w.power_law_alpha - 1.0) <= 1e-9) {
    fail_expected(origin({"workload.power_law_alpha"}), "workload.power_law_alpha",
                  "a number > 0 other than 1 (aiconfigurator measures 1.01 and 1.2)", format_double(w.power_law_alpha));
  }
  if (w.prompt_len_range && (w.prompt_len.size() != 2 || w.prompt_len[0] > w.prompt_len[1])) {
    fail_expected(origin({"workload.prompt_len", "workload.prompt_len_range"}), "workload.prompt_len",
                  "[LO, HI] with LO <= HI (workload.prompt_len_range is true)",
                  std::to_string(w.prompt_len.size()) + " lengths");
  }
  if (w.source == WorkloadSource::decoder && !w.prompt_len_range && w.prompt_len.size() > 1 &&
      static_cast<int64_t>(w.prompt_len.size()) != w.batch) {
    fail_expected(origin({"workload.prompt_len", "workload.batch"}), "workload.prompt_len",
                  "one length or workload.batch (" + std::to_string(w.batch) + ") lengths",
                  std::to_string(w.prompt_len.size()) + " lengths");
  }
  // Per-sequence capacity needs one sequence length (src/decoder/decoder.cpp): refused where the prompts differ,
  // instead of silently falling back to the whole batch.
  const bool unequal_prompts =
      w.prompt_len_range || w.prompt_dist.kind != LengthKind::fixed ||
      std::adjacent_find(w.prompt_len.begin(), w.prompt_len.end(), std::not_equal_to<int>()) != w.prompt_len.end();
  if (r.capacity_scope == CapacityScope::sequence && w.source == WorkloadSource::decoder && unequal_prompts &&
      (r.capacity_factor > 0 || r.gating == Gating::expert_choice)) {
    fail_expected(origin({"router.capacity_scope", "workload.prompt_len", "workload.prompt_len_range"}),
                  "router.capacity_scope",
                  "batch where prompt lengths differ (a per-sequence capacity needs one sequence length)", "sequence");
  }
  validate_placement(e);
  // Checked where it acts; elsewhere the key-effects line names it.
  for (size_t i = 0; w.source == WorkloadSource::load_profile && i < w.expert_map.size(); ++i) {
    if (w.expert_map[i] >= m.experts) {
      fail_expected(origin({"workload.expert_map", "model.experts"}), "workload.expert_map[" + std::to_string(i) + "]",
                    "a logical expert in [0, " + std::to_string(m.experts - 1) + "] (model.experts)",
                    std::to_string(w.expert_map[i]));
    }
  }
  if (!p.map.empty()) {
    if (static_cast<int64_t>(p.map.size()) != m.experts) {
      fail_expected(origin({"placement.map", "model.experts"}), "placement.map",
                    E + " entries, one per expert (model.experts)", std::to_string(p.map.size()) + " entries");
    }
    for (size_t i = 0; i < p.map.size(); ++i) {
      if (p.map[i] >= p.devices) {
        fail_expected(origin({"placement.map", "placement.devices"}), "placement.map[" + std::to_string(i) + "]",
                      "a device in [0, " + std::to_string(p.devices - 1) + "] (placement.devices)",
                      std::to_string(p.map[i]));
      }
    }
  }
}

}  // namespace config_detail

using config_detail::describe;
using config_detail::emit_experiment;
using config_detail::join;
using config_detail::Loader;
using config_detail::scan_documents;
using config_detail::top_keys;

const std::vector<std::string>& compound_keys() {
  static const std::vector<std::string> keys = {"model.hf_config", "router.semantics"};
  return keys;
}

namespace {

// The node at a "section.key" path of a parsed experiment, without inserting anything; null when absent.
YAML::Node node_at(const YAML::Node& root, const std::string& path) {
  const size_t dot = path.find('.');
  const YAML::Node section = root[path.substr(0, dot)];
  if (!section.IsDefined() || !section.IsMap()) return YAML::Node();
  const YAML::Node value = section[path.substr(dot + 1)];
  return value.IsDefined() ? value : YAML::Node();
}

// `trace`: also load the experiment without each compound key it gives (Experiment::without_key), from the
// same tree and --set origins, so that what the key changed is what the loader did.
Experiment load_text(const std::string& yaml_text, const std::string& source_name,
                     const std::vector<std::string>& overrides, bool trace) {
  Loader loader(source_name);
  try {
    YAML::Node root;
    try {
      const auto documents = scan_documents(yaml_text);
      if (documents.size() > 1) {
        throw ConfigError(source_name + ":" + std::to_string(documents[1].root.line + 1) +
                          ": expected one YAML document, got " + std::to_string(documents.size()));
      }
      if (!documents.empty()) root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& ex) {
      throw ConfigError(source_name + ":" + std::to_string(ex.mark.line + 1) + ": invalid YAML: " + ex.msg);
    }
    if (!root.IsMap()) {
      const std::string got = (!root.IsDefined() || root.IsNull()) ? "an empty document" : describe(root);
      const std::string line = root.Mark().line >= 0 ? ":" + std::to_string(root.Mark().line + 1) : "";
      throw ConfigError(source_name + line + ": expected a YAML map with the sections " + join(top_keys(), ", ") +
                        ", got " + got);
    }
    for (const std::string& kv : overrides) loader.apply_set(root, kv);
    const Loader before_read = loader;  // its --set origins, for the loads without a compound key
    Experiment e = loader.read(root);
    e.source_file = source_name;
    for (const std::string& key : trace ? compound_keys() : std::vector<std::string>{}) {
      const YAML::Node given = node_at(root, key);
      if (!given.IsDefined() || given.IsNull()) continue;
      YAML::Node without = YAML::Clone(root);
      YAML::Node section = without[key.substr(0, key.find('.'))];
      section.remove(key.substr(key.find('.') + 1));
      try {
        Loader l = before_read;
        Experiment w = l.read(without);
        w.source_file = source_name;
        e.without_key[key] = std::make_shared<const Experiment>(std::move(w));
      } catch (const Error&) {
        // The experiment needs the key to load (e.g. the model's expert count comes from it): the key acts.
      } catch (const YAML::Exception&) {
      }
    }
    return e;
  } catch (const ConfigError& ex) {
    throw ex;  // as it is: a ConfigError derived from it would lose its missing_file
  } catch (const YAML::Exception& ex) {
    throw ConfigError(source_name + ": invalid YAML: " + ex.what());
  }
}

}  // namespace

Experiment load_experiment_text(const std::string& yaml_text, const std::string& source_name,
                                const std::vector<std::string>& overrides) {
  return load_text(yaml_text, source_name, overrides, true);
}

Experiment load_experiment_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": expected an experiment file, got a folder");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<ConfigError>(path, path + ": cannot open the experiment file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read the experiment file");
  Experiment e = load_experiment_text(text.str(), path, overrides);
  if (!overrides.empty()) {
    // The file alone, for the judgement of its own keys; a file that needs its --set to load has none.
    try {
      e.as_written = std::make_shared<const Experiment>(load_experiment_text(text.str(), path, {}));
    } catch (const Error&) {
    }
  }
  return e;
}

Experiment default_experiment(const std::vector<std::string>& overrides) {
  const auto& files = embedded_files();
  auto it = files.find("configs/quickstart.yaml");
  if (it == files.end()) throw ConfigError("<built-in>: configs/quickstart.yaml is not embedded in this build");
  return load_experiment_text(it->second, "<built-in>", overrides);
}

std::string experiment_to_yaml(const Experiment& e) {
  YAML::Emitter out;
  emit_experiment(out, e);
  return std::string(out.c_str()) + "\n";
}

namespace {

nlohmann::json yaml_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& kv : n) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return j;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& item : n) j.push_back(yaml_to_json(item));
      return j;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = n.Scalar();
      if (n.Tag() == "!") return text;  // quoted: a string whatever it reads as
      if (text == "true" || text == "false") return text == "true";
      long long i = 0;
      if (YAML::convert<long long>::decode(n, i)) return i;
      double d = 0;
      if (YAML::convert<double>::decode(n, d) && std::isfinite(d)) return d;
      return text;
    }
    default:
      return nullptr;
  }
}

}  // namespace

nlohmann::json experiment_to_json(const Experiment& e) { return yaml_to_json(YAML::Load(experiment_to_yaml(e))); }

void apply_override(Experiment& e, const std::string& key_eq_value) { apply_overrides(e, {key_eq_value}); }

void apply_overrides(Experiment& e, const std::vector<std::string>& settings) {
  const std::string source = e.source_file.empty() ? "<effective>" : "<effective " + e.source_file + ">";
  // Convention keys the experiment left to its semantics preset stay out of the text, so that the preset
  // (perhaps a new one, or one that follows a new score or top_k) sets them again.
  YAML::Emitter text;
  emit_experiment(text, e, true);
  Experiment updated = load_text(std::string(text.c_str()) + "\n", source, settings, false);
  updated.source_file = e.source_file;
  // The re-emitted text gives every key: the user gave what e's user gave, and what this override changed
  // (not the convention keys a changed preset set again, nor what model.hf_config filled again).
  const std::vector<std::string> before = experiment_key_values(e);
  const std::vector<std::string> after = experiment_key_values(updated);
  const std::vector<std::string> paths = schema_key_paths();
  const auto& left = updated.router.given_preset_keys;
  const auto listed = [](const std::vector<std::string>& v, const std::string& k) {
    return std::find(v.begin(), v.end(), k) != v.end();
  };
  std::vector<std::string> given, set;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& k = paths[i];
    const bool preset = k.rfind("router.", 0) == 0 && !listed(left, k.substr(7)) &&
                        listed(semantics_preset_keys(), k.substr(7));
    const bool changed = before[i] != after[i] && !preset && !listed(updated.model.hf_config_keys, k);
    if (listed(e.given_keys, k) || changed) given.push_back(k);
    if (listed(e.set_keys, k) || changed) set.push_back(k);
  }
  updated.given_keys = given;
  updated.set_keys = set;
  updated.as_written = e.as_written;
  // What each compound key changed, row by row: the experiment without it takes the same override (an override
  // of the key itself leaves it as it was: the row without the key is the row before).
  std::vector<std::string> set_keys;
  for (const std::string& s : settings) {
    std::string set_key = s.substr(0, s.find('='));
    while (!set_key.empty() && set_key.back() == ' ') set_key.pop_back();
    while (!set_key.empty() && set_key.front() == ' ') set_key.erase(set_key.begin());
    set_keys.push_back(set_key);
  }
  for (const std::string& key : compound_keys()) {
    const auto it = e.without_key.find(key);
    if (std::find(set_keys.begin(), set_keys.end(), key) != set_keys.end()) {
      updated.without_key[key] = it != e.without_key.end() ? it->second : std::make_shared<const Experiment>(e);
      continue;
    }
    if (it == e.without_key.end()) continue;
    Experiment w = *it->second;
    try {
      apply_overrides(w, settings);
      updated.without_key[key] = std::make_shared<const Experiment>(std::move(w));
    } catch (const Error&) {
    }
  }
  // An unchanged hardware reference keeps naming where it was first given, not the re-emitted text.
  if (updated.hardware.name == e.hardware.name && updated.hardware.inline_yaml == e.hardware.inline_yaml) {
    updated.hardware.origin = e.hardware.origin;
  }
  e = std::move(updated);
}

}  // namespace moesim
