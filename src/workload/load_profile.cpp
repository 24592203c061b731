// Reader of per-expert load profiles and the largest-remainder scaling (see load_profile.hpp).
// Host only. Covered by tests/workload/load_profile_test.cpp.
#include "src/workload/load_profile.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/common/json_error.hpp"
#include "src/workload/megatron_loads.hpp"
#include "src/workload/npz_file.hpp"

namespace moesim {
namespace {

using nlohmann::json;

// The profile object of `key`: a flat member of `root`, else a '/' path through nested objects.
const json* find_profile(const json& root, const std::string& key) {
  if (root.contains(key)) return &root.at(key);
  const json* node = &root;
  std::stringstream parts(key);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &node->at(part);
  }
  return node;
}

std::string key_list(const json& root) {
  std::string s;
  int n = 0;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key().rfind('_', 0) == 0) continue;  // "_note" and other comments
    if (n == 12) return s + ", ...";
    s += (n++ ? ", " : "") + it.key();
  }
  return s;
}

// A layer key is a decimal number as written by Python's str(int): no sign, no leading zero ("07" would
// name layer 7 a second time beside "7").
bool parse_layer_name(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  if (s.size() > 1 && s[0] == '0') return false;
  *out = std::atoi(s.c_str());
  return true;
}

}  // namespace

LoadProfile parse_load_profile(const std::string& json_text, const std::string& name, const std::string& key,
                               int num_experts) {
  MOESIM_REQUIRE(num_experts >= 0, "parse_load_profile needs num_experts >= 0, got " << num_experts);
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    throw InputError(name + ": expected a JSON load profile, got invalid JSON: " + json_error_text(e.what()));
  }
  if (!doc.is_object()) throw InputError(name + ": expected a JSON object of load profiles, got " + doc.type_name());
  const json& root = doc.contains("data") && doc.at("data").is_object() ? doc.at("data") : doc;
  std::string chosen = key;
  if (chosen.empty()) {
    std::vector<std::string> keys;
    for (auto it = root.begin(); it != root.end(); ++it)
      if (it.key().rfind('_', 0) != 0) keys.push_back(it.key());
    if (keys.size() != 1) {
      throw InputError(name + ": workload.profile_key: expected one of " + key_list(root) +
                       " (the file holds several profiles), got ''");
    }
    chosen = keys.front();
  }
  const json* p = find_profile(root, chosen);
  if (!p) throw InputError(name + ": workload.profile_key: expected one of " + key_list(root) + ", got '" + chosen + "'");
  if (!p->is_object() || p->empty()) {
    throw InputError(name + ": " + chosen + ": expected a map from layer number to per-expert counts, got " +
                     (p->is_object() ? std::string("an empty map") : std::string(p->type_name())));
  }
  std::vector<std::pair<int, std::vector<int64_t>>> layers;
  for (auto it = p->begin(); it != p->end(); ++it) {
    const std::string where = name + ": " + chosen + "." + it.key();
    int layer = 0;
    if (!parse_layer_name(it.key(), &layer)) {
      throw InputError(name + ": " + chosen + ": expected layer numbers as keys (0, 1, 2, ... without leading zeros), got '" + it.key() + "'");
    }
    const json& counts = it.value();
    if (num_experts == 0 && counts.is_array() && !counts.empty()) num_experts = static_cast<int>(counts.size());
    if (!counts.is_array() || counts.size() != static_cast<size_t>(num_experts)) {
      throw InputError(where + ": expected " + std::to_string(num_experts) +
                       " counts, one per expert (model.experts), got " +
                       (counts.is_array() ? std::to_string(counts.size()) + " entries" : std::string(counts.type_name())));
    }
    std::vector<int64_t> c;
    for (size_t e = 0; e < counts.size(); ++e) {
      const json& v = counts[e];
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        throw InputError(where + "[" + std::to_string(e) + "]: expected a count >= 0, got " + v.dump());
      }
      c.push_back(v.get<int64_t>());
    }
    layers.emplace_back(layer, std::move(c));
  }
  std::sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  LoadProfile out;
  out.key = chosen;
  for (auto& [layer, c] : layers) {
    out.layers.push_back(layer);
    out.counts.push_back(std::move(c));
  }
  return out;
}

LoadProfile read_load_profile(const std::string& path, const std::string& key, int num_experts) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": cannot read a directory: expected a load profile file (JSON)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<InputError>(path, path + ": cannot open the load profile");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": cannot read the load profile");
  return parse_load_profile(text.str(), path, key, num_experts);
}

LoadFormat detect_load_format(const std::string& bytes, const std::string& name) {
  if (looks_like_zip(bytes)) return LoadFormat::megatron_npz;
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && bytes[first] == '{') {
    const size_t end = bytes.find('\n', first);
    const std::string line = bytes.substr(first, end == std::string::npos ? std::string::npos : end - first);
    return is_megatron_router_trace_line(line) ? LoadFormat::megatron_router_trace : LoadFormat::moesim_json;
  }
  throw InputError(name + ": workload.format: expected a load profile recognisable by content (a zip .npz from "
                   "Megatron-Core, a JSON object, or a Megatron-LM router trace), got neither; name the format "
                   "with workload.format");
}

LoadFormat detect_load_format_of_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": cannot read a directory: expected a load profile file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<InputError>(path, path + ": cannot open the load profile");
  // The first non-blank line decides; a JSON profile written on one line is read whole here and again by its
  // reader, a router trace's first line only.
  std::string head, line;
  while (std::getline(in, line)) {
    head += line + "\n";
    if (line.find_first_not_of(" \t\r") != std::string::npos) break;
  }
  if (in.bad()) throw InputError(path + ": cannot read the load profile");
  return detect_load_format(head, path);
}

std::vector<int64_t> fold_expert_map(const std::vector<int64_t>& counts, const std::vector<int>& map, int num_experts,
                                     const std::string& name) {
  if (counts.size() != map.size())
    throw InputError(name + ": workload.expert_map: expected one entry per physical expert (" +
                     std::to_string(counts.size()) + "), got " + std::to_string(map.size()));
  std::vector<int64_t> out(static_cast<size_t>(num_experts), 0);
  std::vector<bool> seen(static_cast<size_t>(num_experts), false);
  for (size_t p = 0; p < map.size(); ++p) {
    if (map[p] < 0 || map[p] >= num_experts)
      throw InputError(name + ": workload.expert_map[" + std::to_string(p) + "]: expected a logical expert in [0, " +
                       std::to_string(num_experts - 1) + "], got " + std::to_string(map[p]));
    out[static_cast<size_t>(map[p])] += counts[p];
    seen[static_cast<size_t>(map[p])] = true;
  }
  for (int e = 0; e < num_experts; ++e) {
    if (!seen[static_cast<size_t>(e)])
      throw InputError(name + ": workload.expert_map: expected every logical expert 0.." + std::to_string(num_experts - 1) +
                       " on at least one physical slot, got none for expert " + std::to_string(e));
  }
  return out;
}

LoadProfile read_load_profile_file(const std::string& path, LoadFormat format, const std::string& key, int num_experts,
                                   const std::vector<int>& expert_map, int top_k) {
  const bool forced = format != LoadFormat::detect;
  const LoadFormat used = forced ? format : detect_load_format_of_file(path);
  const int physical = expert_map.empty() ? num_experts : static_cast<int>(expert_map.size());
  LoadProfile out;
  if (used == LoadFormat::megatron_router_trace) {
    // Read a line at a time: a trace is far larger than its counts.
    if (!forced && !key.empty())
      throw InputError(path + ": workload.profile_key: expected none for a Megatron-LM router trace (one profile per "
                       "file), got '" + key + "'");
    if (physical == 0) throw InputError(path + ": expected the model's expert count for a Megatron-LM router trace");
    const MegatronLoads m = read_megatron_router_trace(path, physical, top_k);
    out.key = kMegatronRouterTrace;
    out.layers = m.layers;
    out.counts = m.counts;
    if (!expert_map.empty()) {
      for (auto& c : out.counts) c = fold_expert_map(c, expert_map, num_experts, path);
    }
    out.format = used;
    out.format_forced = forced;
    return out;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": cannot read a directory: expected a load profile file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<InputError>(path, path + ": cannot open the load profile");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": cannot read the load profile");
  const std::string bytes = text.str();
  if (used == LoadFormat::megatron_npz) {
    if (!forced && !key.empty())
      throw InputError(path + ": workload.profile_key: expected none for a Megatron-Core dump (one profile per file), got '" +
                       key + "'");
    const MegatronLoads m = parse_megatron_npz(bytes, path);
    if (physical != 0 && m.num_physical_experts != physical)
      throw InputError(path + ": num_global_physical_experts: expected " + std::to_string(physical) +
                       (expert_map.empty() ? " (model.experts; give workload.expert_map to fold replicas)"
                                           : " (the entries of workload.expert_map)") +
                       ", got " + std::to_string(m.num_physical_experts));
    out.key = kMegatronDumpVersion;
    out.layers = m.layers;
    out.counts = m.counts;
  } else {
    out = parse_load_profile(bytes, path, key, physical);
  }
  if (!expert_map.empty()) {
    for (auto& c : out.counts) c = fold_expert_map(c, expert_map, num_experts, path);
  }
  out.format = used;
  out.format_forced = forced;
  return out;
}

std::vector<int64_t> scale_loads(const std::vector<int64_t>& counts, int64_t total) {
  MOESIM_REQUIRE(!counts.empty() && total >= 0, "scale_loads needs counts and total >= 0");
  const int64_t E = static_cast<int64_t>(counts.size());
  const double sum = std::accumulate(counts.begin(), counts.end(), 0.0);
  std::vector<int64_t> out(E, 0);
  if (sum <= 0) {
    for (int64_t e = 0; e < E; ++e) out[e] = total / E + (e < total % E ? 1 : 0);
    return out;
  }
  std::vector<double> remainder(E);
  int64_t given = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double exact = static_cast<double>(total) * static_cast<double>(counts[e]) / sum;
    out[e] = static_cast<int64_t>(exact);
    remainder[e] = exact - static_cast<double>(out[e]);
    given += out[e];
  }
  std::vector<int64_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return remainder[a] > remainder[b]; });
  for (int64_t i = 0; given < total; ++i, ++given) out[order[i % E]] += 1;
  return out;
}

}  // namespace moesim
