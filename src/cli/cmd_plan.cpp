// `moesim plan LOADS --devices D [--replicas R] [--policy global|hierarchical] --format json|vllm|sglang|trtllm
// [--out FILE]`: an expert-parallel placement of every layer of LOADS (any load source moesim reads: its JSON
// profile, a Megatron-Core .npz dump, a Megatron-LM router trace), made by the EPLB code `run` plans with
// (src/cost/placement.hpp place_experts), written as the file an engine loads (src/report/plan_formats.hpp).
// The placement keys are the experiment's (placement.*, --set), so their checks and messages are run's.
// placement.map reads every format back. Covered by tests/cli/plan_test.cpp.
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/report/atomic_write.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/config/placement_file.hpp"
#include "src/cost/placement.hpp"
#include "src/report/plan_formats.hpp"
#include "src/workload/load_profile.hpp"

namespace moesim::cli {

int cmd_plan(int argc, char** argv) {
  bool help = false, spread = false;
  std::vector<std::string> files;
  std::vector<std::string> overrides;
  std::string format = "json", out, policy, key, load_format = "auto";
  int devices = 0, replicas = 0, nodes = 0, groups = 0, experts = 0, decoder_layers = 0;
  po::options_description desc("moesim plan LOADS --devices D [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "loads", po::value(&files),
      "per-expert loads of each layer: moesim's load-profile JSON, a Megatron-Core .npz dump or a Megatron-LM router "
      "trace (as workload.source load_profile reads them)")(
      "devices", po::value(&devices), "GPUs of the expert-parallel group (placement.devices)")(
      "replicas", po::value(&replicas), "redundant expert slots (placement.replicas; default 0)")(
      "policy", po::value(&policy), "global (default) or hierarchical: DeepSeek EPLB's two policies (placement.policy)")(
      "nodes", po::value(&nodes), "server nodes the devices are split over (placement.nodes; hierarchical packs groups onto them)")(
      "groups", po::value(&groups), "expert groups for the hierarchical policy (placement.groups)")(
      "spread", po::bool_switch(&spread), "no two replicas of one expert on one device (placement.spread_replicas)")(
      "experts", po::value(&experts), "logical experts (model.experts; default: the first layer's count in a JSON profile)")(
      "key", po::value(&key), "the profile of a moesim JSON file to plan (workload.profile_key)")(
      "load-format", po::value(&load_format), "auto, moesim_json, megatron_npz or megatron_router_trace (workload.format)")(
      "layers", po::value(&decoder_layers),
      "sglang: the model's decoder layers (num_hidden_layers), each a row; layers without loads get the trivial map "
      "(default: model.layers when --set model.hf_config names the model, else the last loaded layer + 1)")(
      "format", po::value(&format), "json (moesim's plan) | vllm | sglang | trtllm")(
      "out", po::value(&out), "write the file here (atomically) instead of stdout")(
      "set", po::value(&overrides), "override a config key (repeatable), e.g. --set workload.expert_map=[...]");
  if (parse_or_help(argc, argv, desc, "loads", 1, help)) return kExitOk;
  if (files.empty()) throw InputError("plan: expected a file of per-expert loads (moesim plan LOADS --devices D)");
  if (devices < 1) throw InputError("--devices: expected the expert-parallel group's GPUs, >= 1, got " + std::to_string(devices));
  if (decoder_layers < 0) throw InputError("--layers: expected >= 0, got " + std::to_string(decoder_layers));
  PlacementFileFormat fmt;
  if (format == "json") fmt = PlacementFileFormat::moesim;
  else if (format == "vllm") fmt = PlacementFileFormat::vllm;
  else if (format == "sglang") fmt = PlacementFileFormat::sglang;
  else if (format == "trtllm") fmt = PlacementFileFormat::trtllm;
  else throw InputError("--format: expected json, vllm, sglang or trtllm, got '" + format + "'");
  const std::string& path = files.front();

  LoadFormat probe_format = LoadFormat::detect;
  if (load_format == "moesim_json") probe_format = LoadFormat::moesim_json;
  else if (load_format == "megatron_npz") probe_format = LoadFormat::megatron_npz;
  else if (load_format == "megatron_router_trace") probe_format = LoadFormat::megatron_router_trace;
  else if (load_format != "auto")
    throw InputError("--load-format: expected auto, moesim_json, megatron_npz or megatron_router_trace, got '" +
                     load_format + "'");
  if (experts < 0) throw InputError("--experts: expected >= 1, got " + std::to_string(experts));
  if (experts == 0) {
    // The file's own count: a JSON profile's first layer, a dump's physical experts; a router trace has none.
    const LoadProfile probe = read_load_profile_file(path, probe_format, key, 0, {}, 0);
    experts = probe.counts.empty() ? 0 : static_cast<int>(probe.counts.front().size());
  }
  // The flags as overrides, each remembered with the flag it came from (errors name the flag).
  std::vector<std::pair<std::string, std::string>> flags = {
      {"model.experts=" + std::to_string(experts), "--experts " + std::to_string(experts) + " (the loads' expert count)"},
      {"placement.devices=" + std::to_string(devices), "--devices " + std::to_string(devices)},
      {"placement.replicas=" + std::to_string(replicas), "--replicas " + std::to_string(replicas)},
      {"workload.format=" + load_format, "--load-format " + load_format},
      {"workload.path=" + path, path}};
  // An EPLB plan is what this command makes: global unless --policy says hierarchical.
  flags.push_back({"placement.policy=" + (policy.empty() ? std::string("global") : policy),
                   policy.empty() ? std::string("moesim plan's EPLB policy") : "--policy " + policy});
  if (nodes > 0) flags.push_back({"placement.nodes=" + std::to_string(nodes), "--nodes " + std::to_string(nodes)});
  if (groups > 0) flags.push_back({"placement.groups=" + std::to_string(groups), "--groups " + std::to_string(groups)});
  if (spread) flags.push_back({"placement.spread_replicas=true", "--spread"});
  if (!key.empty()) flags.push_back({"workload.profile_key=" + key, "--key " + key});
  std::vector<std::string> sets = {"placement.kind=expert_parallel", "router.groups=1", "router.topk_groups=1",
                                   "workload.source=load_profile"};
  for (const auto& [set, flag] : flags) sets.push_back(set);
  sets.insert(sets.end(), overrides.begin(), overrides.end());
  const Experiment e = load_with_flags(sets, flags);
  if (e.placement.policy != PlacementPolicy::global && e.placement.policy != PlacementPolicy::hierarchical)
    throw InputError("--policy: expected global or hierarchical (EPLB plans from loads), got '" +
                     std::string(to_string(e.placement.policy)) + "'");
  const LoadProfile profile = read_load_profile_file(path, e.workload.format, e.workload.profile_key, e.model.experts,
                                                     e.workload.expert_map, 0);
  Plan plan;
  plan.source = path;
  plan.experts = e.model.experts;
  plan.devices = e.placement.devices;
  plan.replicas = e.placement.replicas;
  plan.nodes = e.placement.nodes;
  plan.policy = to_string(e.placement.policy);
  // A model named by its config.json knows its decoder layers (DeepSeek-V3: 61, of which 58 are MoE).
  plan.decoder_layers = decoder_layers > 0 || e.model.hf_config.empty() ? decoder_layers : e.model.layers;
  const PlacementConfig placement = resolve_placement(e.placement, e.router);
  for (size_t l = 0; l < profile.layers.size(); ++l) {
    PlannedLayer pl;
    pl.layer = profile.layers[l];
    pl.placement = place_experts(profile.counts[l], placement);
    assign_load(pl.placement, profile.counts[l]);
    plan.layers.push_back(std::move(pl));
  }
  const std::string text = format_plan(plan, fmt);
  if (out.empty()) {
    std::cout << text << std::flush;
  } else {
    write_file_atomic(out, text);
  }
  return kExitOk;
}

}  // namespace moesim::cli
