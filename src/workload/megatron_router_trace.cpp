// Reader of Megatron-LM's router decision traces (see megatron_loads.hpp for the format's source): the tokens
// per expert of every decoder layer, summed over the steps, read a line at a time. Host only, deterministic.
// Covered by tests/workload/megatron_loads_test.cpp and tests/fuzz (megatron_router_trace).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/workload/megatron_loads.hpp"

namespace moesim {
namespace {

constexpr int64_t kMaxLayerNumber = 1 << 24;

// A non-negative integer member, at most `max`.
int64_t count_member(const nlohmann::json& j, const char* key, int64_t max, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw InputError(where + std::string(key) + ": expected an integer, got none");
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > max)
    throw InputError(where + std::string(key) + ": expected an integer in [0, " + std::to_string(max) + "], got " +
                     it->dump().substr(0, 64));
  return it->get<int64_t>();
}

}  // namespace

bool is_megatron_router_trace_line(const std::string& line) {
  if (line.find("\"top_indices\"") == std::string::npos) return false;
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  return j.is_object() && j.contains("top_indices");
}

MegatronLoads parse_megatron_router_trace(std::istream& in, const std::string& name, int num_experts, int top_k) {
  MOESIM_REQUIRE(num_experts >= 1, "parse_megatron_router_trace needs num_experts >= 1");
  std::map<int, std::vector<int64_t>> counts;
  std::map<int, int64_t> lines_per_layer;
  int topk_seen = 0;
  std::string line;
  std::vector<int64_t> seen(static_cast<size_t>(num_experts), -1);  // the last token that chose each expert
  int64_t token_serial = 0;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name + ":" + std::to_string(lineno) + ": ";
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object())
      throw InputError(where + "expected a JSON object (a " + kMegatronRouterTrace + " line), got '" + line.substr(0, 40) + "'");
    const auto block = j.find("block");
    if (block != j.end() && !block->is_string())
      throw InputError(where + "block: expected \"decoder\" or \"mtp\", got " + block->dump().substr(0, 64));
    const std::string block_name = block == j.end() ? "decoder" : block->get<std::string>();
    if (block_name != "decoder" && block_name != "mtp")
      throw InputError(where + "block: expected \"decoder\" or \"mtp\", got \"" + block_name.substr(0, 64) + "\"");
    count_member(j, "step", std::numeric_limits<int64_t>::max(), where);
    const int layer = static_cast<int>(count_member(j, "layer", kMaxLayerNumber, where));
    const int64_t num_tokens = count_member(j, "num_tokens", std::numeric_limits<int32_t>::max(), where);
    const int topk = static_cast<int>(count_member(j, "topk", num_experts, where));
    if (topk < 1) throw InputError(where + "topk: expected at least 1, got 0");
    if (top_k > 0 && topk != top_k)
      throw InputError(where + "topk: expected model.top_k = " + std::to_string(top_k) + ", got " + std::to_string(topk));
    if (topk_seen > 0 && topk != topk_seen)
      throw InputError(where + "topk: expected " + std::to_string(topk_seen) + " as on the lines before, got " +
                       std::to_string(topk));
    topk_seen = topk;
    const auto top = j.find("top_indices");
    if (top == j.end() || !top->is_array() || static_cast<int64_t>(top->size()) != num_tokens)
      throw InputError(where + "top_indices: expected num_tokens = " + std::to_string(num_tokens) +
                       " lists of expert ids, got " +
                       (top == j.end() ? std::string("none")
                                       : top->is_array() ? std::to_string(top->size()) + " entries" : top->dump().substr(0, 40)));
    if (block_name == "mtp") continue;
    std::vector<int64_t>& c = counts[layer];
    c.resize(static_cast<size_t>(num_experts), 0);
    for (size_t t = 0; t < top->size(); ++t) {
      const nlohmann::json& row = (*top)[t];
      const std::string at = where + "top_indices[" + std::to_string(t) + "]: ";
      if (!row.is_array() || static_cast<int>(row.size()) != topk)
        throw InputError(at + "expected topk = " + std::to_string(topk) + " expert ids, got " +
                         (row.is_array() ? std::to_string(row.size()) : row.dump().substr(0, 40)));
      ++token_serial;
      for (const nlohmann::json& x : row) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= num_experts)
          throw InputError(at + "expected expert ids in [0, " + std::to_string(num_experts - 1) +
                           "] (model.experts, or the slots of workload.expert_map), got " + x.dump().substr(0, 40));
        const size_t e = static_cast<size_t>(x.get<int64_t>());
        if (seen[e] == token_serial) throw InputError(at + "expected distinct expert ids, got " + row.dump().substr(0, 80));
        seen[e] = token_serial;
        c[e] += 1;
      }
    }
    lines_per_layer[layer] += 1;
  }
  if (in.bad()) throw InputError(name + ": cannot read the router trace");
  if (counts.empty())
    throw InputError(name + ": expected at least one decoder line of a " + std::string(kMegatronRouterTrace) +
                     " (JSON Lines with \"top_indices\"), got none");
  MegatronLoads out;
  out.num_physical_experts = num_experts;
  out.top_k = topk_seen;
  for (auto& [layer, c] : counts) {
    out.layers.push_back(layer);
    out.forward_counts.push_back(lines_per_layer[layer]);
    out.counts.push_back(std::move(c));
  }
  return out;
}

MegatronLoads read_megatron_router_trace(const std::string& path, int num_experts, int top_k) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": cannot read a directory: expected a router trace file (router_trace_rank{R}.jsonl)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the router trace");
  return parse_megatron_router_trace(in, path, num_experts, top_k);
}

}  // namespace moesim
