// Reader of Megatron-Core "mcore_ep_load_dump_v1" .npz dumps (see megatron_loads.hpp for the format's source).
// Host only. Covered by tests/workload/megatron_loads_test.cpp and tests/fuzz (megatron_npz).
#include "src/workload/megatron_loads.hpp"

#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "src/common/error.hpp"
#include "src/workload/npz_file.hpp"

namespace moesim {
namespace {

constexpr int64_t kMaxPhysicalExperts = 65536;
constexpr int64_t kMaxLayerNumber = 1 << 24;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

const NpyArray& member(const std::map<std::string, NpyArray>& m, const std::string& key, const std::string& name) {
  const auto it = m.find(key);
  if (it == m.end()) throw InputError(name + ": " + key + ": expected this member of a " + kMegatronDumpVersion + " dump, got none");
  return it->second;
}

const NpyArray& ints(const std::map<std::string, NpyArray>& m, const std::string& key, size_t dims,
                     const std::string& name) {
  const NpyArray& a = member(m, key, name);
  if (a.is_text || a.shape.size() != dims)
    throw InputError(name + ": " + key + ": expected an integer array of " + std::to_string(dims) + " dimension(s), got " +
                     (a.is_text ? std::string("a string") : "shape " + shape_text(a.shape)));
  return a;
}

int64_t scalar(const std::map<std::string, NpyArray>& m, const std::string& key, const std::string& name) {
  return ints(m, key, 0, name).ints.at(0);
}

}  // namespace

MegatronLoads parse_megatron_npz(const std::string& bytes, const std::string& name) {
  const std::map<std::string, NpyArray> m = parse_npz(bytes, name);
  const NpyArray& version = member(m, "dump_version", name);
  if (!version.is_text || version.text != kMegatronDumpVersion)
    throw InputError(name + ": dump_version: expected '" + kMegatronDumpVersion + "', got " +
                     (version.is_text ? "'" + version.text.substr(0, 64) + "'" : std::string("a number array")));
  const NpyArray& loads = ints(m, "loads", 3, name);
  const NpyArray& layer_numbers = ints(m, "layer_numbers", 1, name);
  const NpyArray& forward_counts = ints(m, "forward_counts", 1, name);
  const int64_t L = loads.shape[0], F = loads.shape[1], G = loads.shape[2];
  MegatronLoads out;
  out.num_physical_experts = scalar(m, "num_global_physical_experts", name);
  if (out.num_physical_experts != G || G < 1 || G > kMaxPhysicalExperts)
    throw InputError(name + ": num_global_physical_experts: expected 1.." + std::to_string(kMaxPhysicalExperts) +
                     " and equal to the last dimension of loads " + shape_text(loads.shape) + ", got " +
                     std::to_string(out.num_physical_experts));
  if (L < 1) throw InputError(name + ": loads: expected at least one MoE layer, got shape " + shape_text(loads.shape));
  if (layer_numbers.shape[0] != L || forward_counts.shape[0] != L)
    throw InputError(name + ": layer_numbers, forward_counts: expected " + std::to_string(L) +
                     " entries each (the first dimension of loads), got " + std::to_string(layer_numbers.shape[0]) +
                     " and " + std::to_string(forward_counts.shape[0]));
  if (m.count("ep_size")) {
    out.ep_size = scalar(m, "ep_size", name);
    if (out.ep_size < 1 || G % out.ep_size != 0)
      throw InputError(name + ": ep_size: expected a divisor of num_global_physical_experts=" + std::to_string(G) +
                       ", got " + std::to_string(out.ep_size));
    if (m.count("num_local_physical_experts") && scalar(m, "num_local_physical_experts", name) * out.ep_size != G)
      throw InputError(name + ": num_local_physical_experts: expected " + std::to_string(G / out.ep_size) +
                       " (num_global_physical_experts / ep_size), got " +
                       std::to_string(scalar(m, "num_local_physical_experts", name)));
  }
  if (m.count("ep_rank")) {
    out.ep_rank = scalar(m, "ep_rank", name);
    if (out.ep_rank < 0 || (out.ep_size > 0 && out.ep_rank >= out.ep_size))
      throw InputError(name + ": ep_rank: expected a rank in [0, ep_size), got " + std::to_string(out.ep_rank));
  }
  for (int64_t l = 0; l < L; ++l) {
    const int64_t layer = layer_numbers.ints[l];
    if (layer < 0 || layer > kMaxLayerNumber || (l > 0 && layer <= layer_numbers.ints[l - 1]))
      throw InputError(name + ": layer_numbers[" + std::to_string(l) + "]: expected ascending layer numbers in [0, " +
                       std::to_string(kMaxLayerNumber) + "], got " + std::to_string(layer));
    const int64_t fc = forward_counts.ints[l];
    if (fc < 0 || fc > F)
      throw InputError(name + ": forward_counts[" + std::to_string(l) + "]: expected 0.." + std::to_string(F) +
                       " (the forwards in loads), got " + std::to_string(fc));
    std::vector<int64_t> sum(G, 0);
    for (int64_t f = 0; f < fc; ++f) {
      for (int64_t g = 0; g < G; ++g) {
        const int64_t v = loads.ints[(l * F + f) * G + g];
        // Megatron writes int32; the bound keeps the sums of any integer dtype exact in int64.
        if (v < 0 || v > std::numeric_limits<int32_t>::max())
          throw InputError(name + ": loads[" + std::to_string(l) + ", " + std::to_string(f) + ", " + std::to_string(g) +
                           "]: expected a token count in [0, 2^31), got " + std::to_string(v));
        sum[g] += v;
      }
    }
    out.layers.push_back(static_cast<int>(layer));
    out.forward_counts.push_back(fc);
    out.counts.push_back(std::move(sum));
  }
  return out;
}

MegatronLoads read_megatron_npz(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<InputError>(path, path + ": cannot open the Megatron load dump");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path + ": cannot read the Megatron load dump");
  return parse_megatron_npz(text.str(), path);
}

MegatronLoads combine_megatron_loads(const std::vector<MegatronLoads>& dumps, const std::vector<std::string>& names) {
  MOESIM_REQUIRE(!dumps.empty() && dumps.size() == names.size(), "combine_megatron_loads needs named dumps");
  MegatronLoads out = dumps.front();
  for (size_t i = 1; i < dumps.size(); ++i) {
    const MegatronLoads& d = dumps[i];
    if (d.layers != out.layers || d.num_physical_experts != out.num_physical_experts)
      throw InputError(names[i] + ": layer_numbers, num_global_physical_experts: expected the same as " + names[0] +
                       " (ranks of one EP group), got different ones");
    for (size_t l = 0; l < out.counts.size(); ++l) {
      for (size_t g = 0; g < out.counts[l].size(); ++g) out.counts[l][g] += d.counts[l][g];
      out.forward_counts[l] += d.forward_counts[l];
    }
    out.num_ranks += 1;
  }
  out.ep_rank = -1;
  return out;
}

}  // namespace moesim
