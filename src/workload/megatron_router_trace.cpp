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

RouterTraceReader::RouterTraceReader(std::istream& in, std::string name, int num_experts, int top_k)
    : in_(in), name_(std::move(name)), num_experts_(num_experts), top_k_(top_k),
      seen_(static_cast<size_t>(std::max(1, num_experts)), -1) {
  MOESIM_REQUIRE(num_experts >= 1, "RouterTraceReader needs num_experts >= 1");
}

bool RouterTraceReader::next(RouterTraceLine& out) {
  std::string line;
  while (std::getline(in_, line)) {
    ++lineno_;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name_ + ":" + std::to_string(lineno_) + ": ";
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object())
      throw InputError(where + "expected a JSON object (a " + kMegatronRouterTrace + " line), got '" + line.substr(0, 40) + "'");
    const auto block = j.find("block");
    if (block != j.end() && !block->is_string())
      throw InputError(where + "block: expected \"decoder\" or \"mtp\", got " + block->dump().substr(0, 64));
    const std::string block_name = block == j.end() ? "decoder" : block->get<std::string>();
    if (block_name != "decoder" && block_name != "mtp")
      throw InputError(where + "block: expected \"decoder\" or \"mtp\", got \"" + block_name.substr(0, 64) + "\"");
    out.line = lineno_;
    out.decoder = block_name == "decoder";
    out.step = count_member(j, "step", std::numeric_limits<int64_t>::max(), where);
    out.layer = static_cast<int>(count_member(j, "layer", kMaxLayerNumber, where));
    out.num_tokens = count_member(j, "num_tokens", std::numeric_limits<int32_t>::max(), where);
    out.topk = static_cast<int>(count_member(j, "topk", num_experts_, where));
    if (out.topk < 1) throw InputError(where + "topk: expected at least 1, got 0");
    if (top_k_ > 0 && out.topk != top_k_)
      throw InputError(where + "topk: expected model.top_k = " + std::to_string(top_k_) + ", got " + std::to_string(out.topk));
    if (topk_seen_ > 0 && out.topk != topk_seen_)
      throw InputError(where + "topk: expected " + std::to_string(topk_seen_) + " as on the lines before, got " +
                       std::to_string(out.topk));
    topk_seen_ = out.topk;
    const auto top = j.find("top_indices");
    if (top == j.end() || !top->is_array() || static_cast<int64_t>(top->size()) != out.num_tokens)
      throw InputError(where + "top_indices: expected num_tokens = " + std::to_string(out.num_tokens) +
                       " lists of expert ids, got " +
                       (top == j.end() ? std::string("none")
                                       : top->is_array() ? std::to_string(top->size()) + " entries" : top->dump().substr(0, 40)));
    out.experts.clear();
    if (!out.decoder) return true;
    out.experts.reserve(static_cast<size_t>(out.num_tokens) * static_cast<size_t>(out.topk));
    for (size_t t = 0; t < top->size(); ++t) {
      const nlohmann::json& row = (*top)[t];
      const std::string at = where + "top_indices[" + std::to_string(t) + "]: ";
      if (!row.is_array() || static_cast<int>(row.size()) != out.topk)
        throw InputError(at + "expected topk = " + std::to_string(out.topk) + " expert ids, got " +
                         (row.is_array() ? std::to_string(row.size()) : row.dump().substr(0, 40)));
      ++token_serial_;
      for (const nlohmann::json& x : row) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= num_experts_)
          throw InputError(at + "expected expert ids in [0, " + std::to_string(num_experts_ - 1) +
                           "] (model.experts, or the slots of workload.expert_map), got " + x.dump().substr(0, 40));
        const size_t e = static_cast<size_t>(x.get<int64_t>());
        if (seen_[e] == token_serial_) throw InputError(at + "expected distinct expert ids, got " + row.dump().substr(0, 80));
        seen_[e] = token_serial_;
        out.experts.push_back(static_cast<int32_t>(e));
      }
    }
    ++decoder_lines_;
    return true;
  }
  if (in_.bad()) throw InputError(name_ + ": cannot read the router trace");
  if (decoder_lines_ == 0)
    throw InputError(name_ + ": expected at least one decoder line of a " + std::string(kMegatronRouterTrace) +
                     " (JSON Lines with \"top_indices\"), got none");
  return false;
}

bool is_megatron_router_trace_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) return is_megatron_router_trace_line(line);
  }
  return false;
}

MegatronLoads parse_megatron_router_trace(std::istream& in, const std::string& name, int num_experts, int top_k) {
  std::map<int, std::vector<int64_t>> counts;
  std::map<int, int64_t> lines_per_layer;
  RouterTraceReader reader(in, name, num_experts, top_k);
  RouterTraceLine line;
  int topk = 0;
  while (reader.next(line)) {
    if (!line.decoder) continue;
    topk = line.topk;
    std::vector<int64_t>& c = counts[line.layer];
    c.resize(static_cast<size_t>(num_experts), 0);
    for (int32_t e : line.experts) c[static_cast<size_t>(e)] += 1;
    lines_per_layer[line.layer] += 1;
  }
  MegatronLoads out;
  out.num_physical_experts = num_experts;
  out.top_k = topk;
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
  if (!in) throw open_failure<InputError>(path, path + ": cannot open the router trace");
  return parse_megatron_router_trace(in, path, num_experts, top_k);
}

}  // namespace moesim
