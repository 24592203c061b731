// `moesim import FILE... --out profile.json`: converts an engine's recorded expert loads once into moesim's
// load-profile JSON ({NAME: {LAYER: [count per expert]}}, what workload.source load_profile reads). Inputs: one
// moesim JSON profile, or one or more Megatron-Core "mcore_ep_load_dump_v1" .npz dumps or Megatron-LM router
// traces (the ranks of one EP group, summed; megatron_loads.hpp), recognised by content or named by --format; --expert-map folds physical slots into logical
// experts. Written atomically. Errors: InputError naming the file and member, exit 2.
// Covered by tests/cli/import_test.cpp.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/report/atomic_write.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/megatron_loads.hpp"

namespace moesim::cli {
namespace {

std::vector<int> parse_map(const std::string& text) {
  std::vector<int> map;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, ',')) {
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0 || v >= 65536)
      throw InputError("--expert-map: expected comma-separated logical experts in [0, 65535], got '" + part + "'");
    map.push_back(static_cast<int>(v));
  }
  if (map.empty()) throw InputError("--expert-map: expected comma-separated logical experts, got none");
  return map;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<InputError>(path, path + ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int cmd_import(int argc, char** argv) {
  bool help = false;
  std::vector<std::string> files;
  std::string format_text = "auto", out, map_text, key, name;
  int experts = 0;
  po::options_description desc("moesim import FILE... --out PROFILE.json");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&files),
      "recorded loads: one moesim JSON profile, or the .npz dumps or router traces (router_trace_rank{R}.jsonl) of "
      "one Megatron EP group's ranks (summed)")(
      "format", po::value(&format_text),
      "auto (by content: zip -> megatron_npz, a first line with \"top_indices\" -> megatron_router_trace, other "
      "'{' -> moesim_json), moesim_json, megatron_npz or megatron_router_trace")(
      "out", po::value(&out), "write moesim's load-profile JSON here (atomically)")(
      "expert-map", po::value(&map_text),
      "the logical expert of each physical slot, comma-separated (replicas share one): folds the counts")(
      "experts", po::value(&experts),
      "logical experts (default: the dump's physical experts, or the largest --expert-map entry + 1; needed for JSON "
      "and router traces)")(
      "key", po::value(&key), "moesim JSON input: the profile to take (workload.profile_key)")(
      "name", po::value(&name), "the profile's key in the output (default: the first input's file name)");
  if (parse_or_help(argc, argv, desc, "file", -1, help)) return kExitOk;
  if (files.empty()) throw InputError("import: expected one or more files of recorded expert loads");
  if (out.empty()) throw InputError("--out: expected an output file for the load profile");
  LoadFormat format = LoadFormat::detect;
  if (format_text == "moesim_json") format = LoadFormat::moesim_json;
  else if (format_text == "megatron_npz") format = LoadFormat::megatron_npz;
  else if (format_text == "megatron_router_trace") format = LoadFormat::megatron_router_trace;
  else if (format_text != "auto")
    throw InputError("--format: expected auto, moesim_json, megatron_npz or megatron_router_trace, got '" + format_text + "'");
  const std::vector<int> map = map_text.empty() ? std::vector<int>{} : parse_map(map_text);
  if (experts < 0 || experts > 65536) throw InputError("--experts: expected 1..65536, got " + std::to_string(experts));
  if (experts == 0 && !map.empty()) experts = *std::max_element(map.begin(), map.end()) + 1;

  std::vector<MegatronLoads> dumps;
  LoadProfile profile;
  LoadFormat first_format = LoadFormat::detect;
  for (const std::string& f : files) {
    const LoadFormat used = format == LoadFormat::detect ? detect_load_format_of_file(f) : format;
    if (first_format == LoadFormat::detect) first_format = used;
    if (used != first_format)
      throw InputError(f + ": expected the same format as " + files.front() + " (" + to_string(first_format) + "), got " +
                       to_string(used));
    if (used == LoadFormat::moesim_json) {
      if (files.size() > 1) throw InputError(f + ": expected one moesim JSON profile alone, got it among " +
                                             std::to_string(files.size()) + " files");
      if (experts == 0) throw InputError(f + ": --experts: expected the profile's expert count for a JSON input");
      profile = read_load_profile_file(f, LoadFormat::moesim_json, key, experts, map);
      continue;
    }
    if (!key.empty()) throw InputError(f + ": --key: expected none for a Megatron dump or trace (one profile per file)");
    if (used == LoadFormat::megatron_router_trace) {
      // A trace records expert ids, not their count: the physical slots are --expert-map's, else --experts.
      if (experts == 0)
        throw InputError(f + ": --experts: expected the model's expert count for a Megatron-LM router trace, got none");
      dumps.push_back(read_megatron_router_trace(f, map.empty() ? experts : static_cast<int>(map.size()), 0));
    } else {
      dumps.push_back(parse_megatron_npz(read_bytes(f), f));
    }
  }
  if (!dumps.empty()) {
    const MegatronLoads m = combine_megatron_loads(dumps, files);
    if (experts == 0) experts = static_cast<int>(m.num_physical_experts);
    profile.key = first_format == LoadFormat::megatron_router_trace ? kMegatronRouterTrace : kMegatronDumpVersion;
    profile.layers = m.layers;
    profile.counts = m.counts;
    if (!map.empty()) {
      for (auto& c : profile.counts) c = fold_expert_map(c, map, experts, files.front());
    } else if (m.num_physical_experts != experts) {
      throw InputError(files.front() + ": num_global_physical_experts: expected " + std::to_string(experts) +
                       " (--experts; give --expert-map to fold replicas), got " + std::to_string(m.num_physical_experts));
    }
  }
  if (name.empty()) {
    name = files.front().substr(files.front().find_last_of('/') + 1);
    const size_t dot = name.rfind('.');
    if (dot != std::string::npos && dot > 0) name.resize(dot);
  }
  if (name.empty() || name[0] == '_' || name == "data")
    throw InputError("--name: expected a profile key not starting with '_' and not 'data', got '" + name + "'");
  std::string note = "moesim import of";
  for (const std::string& f : files) note += " " + f;
  if (!map.empty()) note += "; " + std::to_string(map.size()) + " physical slots folded into " + std::to_string(experts) + " experts";
  // One line per layer: {"_note": ..., NAME: {"LAYER": [counts], ...}}.
  std::string text = "{\n \"_note\": " + nlohmann::json(note).dump() + ",\n " + nlohmann::json(name).dump() + ": {";
  for (size_t l = 0; l < profile.layers.size(); ++l) {
    text += std::string(l ? "," : "") + "\n  \"" + std::to_string(profile.layers[l]) + "\": " +
            nlohmann::json(profile.counts[l]).dump();
  }
  text += "\n }\n}\n";
  write_file_atomic(out, text);
  std::cout << "import: wrote " << out << " (" << profile.layers.size() << " layers, " << experts
            << " experts, profile key " << name << ")\n";
  return kExitOk;
}

}  // namespace moesim::cli
