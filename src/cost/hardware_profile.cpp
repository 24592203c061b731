// Hardware profiles: YAML -> validated HardwareProfile in SI units, name/file/inline resolution, and the
// weights-only critical batch. Every figure is read from the profile; the defaults in hardware_profile.hpp
// apply only to keys a profile leaves out. Host only. Covered by tests/cost/hardware_profile_test.cpp.
#include "src/cost/hardware_profile.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "src/common/digest.hpp"
#include "src/common/embedded.hpp"
#include "src/common/error.hpp"

namespace moesim {
namespace {

constexpr const char* kHardwareDir = "configs/hardware/";
constexpr const char* kA2aFitKeys[] = {
    "a2a_normal_dispatch_us",           "a2a_normal_combine_us",           "a2a_normal_scale_up_efficiency",
    "a2a_normal_scale_out_efficiency",  "a2a_low_latency_dispatch_us",     "a2a_low_latency_combine_us",
    "a2a_low_latency_scale_up_efficiency", "a2a_low_latency_scale_out_efficiency"};
constexpr Dtype kDtypes[] = {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8};

std::optional<double> HardwareProfile::*peak_member(Dtype d) {
  switch (d) {
    case Dtype::fp32: return &HardwareProfile::peak_fp32_flops_per_s;
    case Dtype::tf32: return &HardwareProfile::peak_tf32_flops_per_s;
    case Dtype::bf16: return &HardwareProfile::peak_bf16_flops_per_s;
    case Dtype::fp16: return &HardwareProfile::peak_fp16_flops_per_s;
    case Dtype::fp8: return &HardwareProfile::peak_fp8_flops_per_s;
    case Dtype::int8: return &HardwareProfile::peak_int8_flops_per_s;
  }
  return &HardwareProfile::peak_fp32_flops_per_s;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Null: return "null";
    default: return "nothing";
  }
}

// How a numeric key is read: its unit scale to SI, and which values are allowed.
enum class Rule { positive, non_negative, fraction, unit, positive_int };

struct NumericKey {
  const char* key;
  double scale;
  Rule rule;
  double HardwareProfile::*real;  // exactly one of real/integer is set
  int HardwareProfile::*integer;
};

const std::vector<NumericKey>& numeric_keys() {
  using H = HardwareProfile;
  static const std::vector<NumericKey> keys = {
      {"memory_bandwidth_gbs", 1e9, Rule::positive, &H::memory_bandwidth_bytes_per_s, nullptr},
      {"memory_gib", 1073741824.0, Rule::positive, &H::memory_bytes, nullptr},
      {"sm_count", 1, Rule::positive_int, nullptr, &H::sm_count},
      {"smem_per_sm_kib", 1024.0, Rule::positive, &H::smem_per_sm_bytes, nullptr},
      {"l2_mib", 1048576.0, Rule::positive, &H::l2_bytes, nullptr},
      {"launch_overhead_us", 1e-6, Rule::non_negative, &H::launch_overhead_s, nullptr},
      {"k_step_us", 1e-6, Rule::non_negative, &H::k_step_s, nullptr},
      {"link_bandwidth_gbs", 1e9, Rule::positive, &H::link_bandwidth_bytes_per_s, nullptr},
      {"link_latency_us", 1e-6, Rule::non_negative, &H::link_latency_s, nullptr},
      {"devices_per_node", 1, Rule::positive_int, nullptr, &H::devices_per_node},
      {"inter_node_bandwidth_gbs", 1e9, Rule::positive, &H::inter_node_bandwidth_bytes_per_s, nullptr},
      {"inter_node_latency_us", 1e-6, Rule::non_negative, &H::inter_node_latency_s, nullptr},
      {"a2a_normal_dispatch_us", 1e-6, Rule::non_negative, &H::a2a_normal_dispatch_s, nullptr},
      {"a2a_normal_combine_us", 1e-6, Rule::non_negative, &H::a2a_normal_combine_s, nullptr},
      {"a2a_normal_scale_up_efficiency", 1, Rule::fraction, &H::a2a_normal_scale_up_efficiency, nullptr},
      {"a2a_normal_scale_out_efficiency", 1, Rule::fraction, &H::a2a_normal_scale_out_efficiency, nullptr},
      {"a2a_low_latency_dispatch_us", 1e-6, Rule::non_negative, &H::a2a_low_latency_dispatch_s, nullptr},
      {"a2a_low_latency_combine_us", 1e-6, Rule::non_negative, &H::a2a_low_latency_combine_s, nullptr},
      {"a2a_low_latency_scale_up_efficiency", 1, Rule::fraction, &H::a2a_low_latency_scale_up_efficiency, nullptr},
      {"a2a_low_latency_scale_out_efficiency", 1, Rule::fraction, &H::a2a_low_latency_scale_out_efficiency, nullptr},
      {"tile_m", 1, Rule::positive_int, nullptr, &H::tile_m},
      {"tile_n", 1, Rule::positive_int, nullptr, &H::tile_n},
      {"efficiency_flops", 1, Rule::fraction, &H::efficiency_flops, nullptr},
      {"efficiency_bw", 1, Rule::fraction, &H::efficiency_bw, nullptr},
      {"memory_compute_overlap", 1, Rule::unit, &H::memory_compute_overlap, nullptr},
  };
  return keys;
}

std::vector<std::string> known_keys() {
  std::vector<std::string> k = {"name", "description", "source", "sources", "base", "peak_tflops", "machine"};
  for (const NumericKey& n : numeric_keys()) k.push_back(n.key);
  k.push_back("calibrated");
  k.push_back("mxfp8");
  return k;
}

// Keys a `sources:` entry may name: every figure, and each peak_tflops.DTYPE.
bool is_figure_key(const std::string& k) {
  if (k == "peak_tflops" || k == "calibrated" || k == "mxfp8") return true;
  for (Dtype d : kDtypes)
    if (k == std::string("peak_tflops.") + to_string(d)) return true;
  for (const NumericKey& n : numeric_keys())
    if (k == n.key) return true;
  return false;
}

class Parser {
 public:
  Parser(std::string source, bool lines) : source_(std::move(source)), lines_(lines) {}

  std::string where(const YAML::Node& n) const {
    const YAML::Mark m = n.Mark();
    if (lines_ && m.line >= 0) return source_ + ":" + std::to_string(m.line + 1);
    return source_;
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& what,
                         const std::string& got) const {
    throw ConfigError(where(at) + ": hardware" + (key.empty() ? "" : "." + key) + ": expected " + what +
                      ", got " + got);
  }

  double number(const YAML::Node& n, const std::string& key, Rule rule) const {
    const char* what = rule == Rule::positive       ? "a positive number"
                       : rule == Rule::non_negative ? "a number >= 0"
                       : rule == Rule::fraction     ? "a number in (0, 1]"
                       : rule == Rule::unit         ? "a number in [0, 1]"
                                                    : "a positive integer";
    if (!n.IsScalar()) fail(n, key, what, describe(n));
    double v = 0;
    if (rule == Rule::positive_int) {
      long long i = 0;
      if (!YAML::convert<long long>::decode(n, i) || i < 1 || i > (1 << 30)) fail(n, key, what, describe(n));
      return static_cast<double>(i);
    }
    if (!YAML::convert<double>::decode(n, v) || !std::isfinite(v)) fail(n, key, what, describe(n));
    const bool ok = rule == Rule::positive       ? v > 0
                    : rule == Rule::non_negative ? v >= 0
                    : rule == Rule::unit         ? (v >= 0 && v <= 1)
                                                 : (v > 0 && v <= 1);
    if (!ok) fail(n, key, what, describe(n));
    return v;
  }

  std::string text(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, key, "a string", describe(n));
    return n.Scalar();
  }

  // Reads the keys of `root` over `hw` (defaults, or a base profile). allow_base: `base:` accepted.
  void read(const YAML::Node& root, HardwareProfile& hw, bool allow_base) const {
    if (!root.IsMap()) fail(root, "", "a map of profile keys (" + join(known_keys(), ", ") + ")", describe(root));
    const YAML::Node base = root["base"];
    if (base) {
      if (!allow_base) fail(base, "base", "no base in a built-in profile", describe(base));
      const std::string name = text(base, "base");
      const auto& files = embedded_files();
      const auto it = files.find(kHardwareDir + name + ".yaml");
      if (it == files.end()) fail(base, "base", "a built-in profile (" + join(builtin_hardware_names(), ", ") + ")", describe(base));
      hw = parse_hardware_profile(it->second, it->first);
    }
    const YAML::Node own_sources = root["sources"];
    std::set<std::string> seen;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node k = it->first;
      const YAML::Node v = it->second;
      if (!k.IsScalar()) fail(k, "", "a key name", describe(k));
      const std::string key = k.Scalar();
      if (!seen.insert(key).second) fail(k, key, "each key once", "a second '" + key + "'");
      if (key == "base") continue;
      if (base && key != "peak_tflops" && is_figure_key(key)) override_note(own_sources, key, hw);
      if (key == "name") {
        hw.name = text(v, key);
      } else if (key == "description") {
        hw.description = text(v, key);
      } else if (key == "source") {
        hw.source = text(v, key);
      } else if (key == "sources") {
        read_sources(v, hw);
      } else if (key == "peak_tflops") {
        read_peaks(v, hw, base.IsDefined(), own_sources);
      } else if (key == "machine") {
        hw.machine = read_machine(v);
      } else if (key == "calibrated") {
        bool b = false;
        if (!v.IsScalar() || !YAML::convert<bool>::decode(v, b)) fail(v, key, "true or false", describe(v));
        hw.calibrated = b;
      } else if (key == "mxfp8") {
        bool b = false;
        if (!v.IsScalar() || !YAML::convert<bool>::decode(v, b)) fail(v, key, "true or false", describe(v));
        hw.mxfp8 = b;
      } else {
        const NumericKey* nk = nullptr;
        for (const NumericKey& n : numeric_keys())
          if (key == n.key) nk = &n;
        if (!nk) fail(k, key, "a known key (" + join(known_keys(), ", ") + ")", "'" + key + "'");
        const double x = number(v, key, nk->rule);
        if (nk->real) hw.*(nk->real) = x * nk->scale;
        else hw.*(nk->integer) = static_cast<int>(x);
      }
    }
    bool any_peak = false;
    for (Dtype d : kDtypes) any_peak = any_peak || (hw.*peak_member(d)).has_value();
    if (!any_peak) fail(root, "peak_tflops", "a map of dense peaks, e.g. {fp16: 65}", "nothing");
    if (hw.memory_bandwidth_bytes_per_s <= 0) fail(root, "memory_bandwidth_gbs", "a positive number", "nothing");
    if (hw.sm_count <= 0) fail(root, "sm_count", "a positive integer", "nothing");
  }

 private:
  // A key set over a base profile no longer has the base's source: it gets its own note, or this one.
  void override_note(const YAML::Node& own_sources, const std::string& key, HardwareProfile& hw) const {
    if (!(own_sources.IsDefined() && own_sources.IsMap() && own_sources[key])) hw.sources[key] = "set in " + source_;
  }

  void read_peaks(const YAML::Node& v, HardwareProfile& hw, bool from_base, const YAML::Node& own_sources) const {
    if (!v.IsMap() || v.size() == 0) fail(v, "peak_tflops", "a map from dtype to dense TFLOP/s, e.g. {fp16: 65}", describe(v));
    std::set<std::string> seen;
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string d = it->first.IsScalar() ? it->first.Scalar() : "";
      const std::string key = "peak_tflops." + d;
      if (!seen.insert(d).second) fail(it->first, key, "each dtype once", "a second '" + d + "'");
      bool found = false;
      for (Dtype t : kDtypes) {
        if (d != to_string(t)) continue;
        found = true;
        hw.*peak_member(t) = number(it->second, key, Rule::positive) * 1e12;
        if (from_base) override_note(own_sources, key, hw);
      }
      if (!found) fail(it->first, key, "a dtype (fp32, tf32, bf16, fp16, fp8, int8)", describe(it->first));
    }
  }

  MachineSignature read_machine(const YAML::Node& v) const {
    const char* what = "a map {cpu_model: STRING, cores: N, blas_core: STRING, threads: N}";
    if (!v.IsMap()) fail(v, "machine", what, describe(v));
    MachineSignature m;
    std::set<std::string> seen;
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
      if (!seen.insert(k).second) fail(it->first, "machine." + k, "each key once", "a second '" + k + "'");
      if (k == "cpu_model") m.cpu_model = text(it->second, "machine.cpu_model");
      else if (k == "blas_core") m.blas_core = text(it->second, "machine.blas_core");
      else if (k == "cores") m.cores = static_cast<int>(number(it->second, "machine.cores", Rule::positive_int));
      else if (k == "threads") m.threads = static_cast<int>(number(it->second, "machine.threads", Rule::positive_int));
      else fail(it->first, "machine." + k, "cpu_model, cores, blas_core or threads", "'" + k + "'");
    }
    if (seen.size() != 4) fail(v, "machine", what, "only " + std::to_string(seen.size()) + " of the four keys");
    return m;
  }

  void read_sources(const YAML::Node& v, HardwareProfile& hw) const {
    if (!v.IsMap()) fail(v, "sources", "a map from a profile key to its source note", describe(v));
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
      if (!is_figure_key(k)) fail(it->first, "sources." + k, "a figure key of this profile", describe(it->first));
      hw.sources[k] = text(it->second, "sources." + k);
    }
  }

  std::string source_;
  bool lines_;
};

HardwareProfile parse_impl(const std::string& yaml_text, const std::string& source_name, bool lines, bool allow_base) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& ex) {
    throw ConfigError(source_name + (lines ? ":" + std::to_string(ex.mark.line + 1) : std::string()) +
                      ": hardware: invalid YAML: " + ex.msg);
  }
  HardwareProfile hw;
  Parser(source_name, lines).read(root, hw, allow_base);
  // The fitted figures a profile (and its base) left unset come from the pooled fit, and say so.
  for (const char* key : {"efficiency_bw", "efficiency_flops", "launch_overhead_us", "k_step_us"}) {
    if (!hw.sources.count(key) && !(root.IsMap() && root[key])) hw.sources[key] = kPooledFitNote;
  }
  for (const char* key : kA2aFitKeys) {
    if (!hw.sources.count(key) && !(root.IsMap() && root[key])) hw.sources[key] = kA2aPooledFitNote;
  }
  return hw;
}

// `origin`: where the profile's name was given ("FILE:LINE: hardware", "--hardware", ...).
std::string read_file(const std::filesystem::path& p, const std::string& origin) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw open_failure<ConfigError>(p.string(), origin + ": cannot open the profile file " + p.string());
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) throw ConfigError(origin + ": cannot read the profile file " + p.string());
  return os.str();
}

}  // namespace

const char* const kPooledFitNote =
    "pooled fit over every published table (scripts/fit-profiles.sh; docs/cost-model.md "
    "\"Fitted profiles\"): this profile has no table of its own";

const char* const kA2aPooledFitNote =
    "pooled fit of the all-to-all kernel over every published dispatch/combine table of its family (moesim "
    "validate --published; docs/cost-model.md \"The all-to-all\"): this profile has no table of its own";

std::optional<double> peak_flops_per_s(const HardwareProfile& hw, Dtype dtype) {
  return hw.*peak_member(dtype);
}

double require_peak_flops_per_s(const HardwareProfile& hw, Dtype dtype) {
  const std::optional<double> f = peak_flops_per_s(hw, dtype);
  if (f) return *f;
  std::vector<std::string> have;
  for (Dtype d : kDtypes)
    if (peak_flops_per_s(hw, d)) have.push_back(to_string(d));
  throw ConfigError("model.dtype: expected a dtype with a dense peak on hardware " + hw.name + " (" +
                    join(have, ", ") + "), got '" + to_string(dtype) + "'");
}

HardwareProfile parse_hardware_profile(const std::string& yaml_text, const std::string& source_name) {
  const bool builtin = source_name.rfind(kHardwareDir, 0) == 0;
  return parse_impl(yaml_text, source_name, true, !builtin);
}

std::string hardware_profile_file(const HardwareRef& ref, const std::string& experiment_file) {
  namespace fs = std::filesystem;
  if (!ref.inline_yaml.empty() || ref.name.empty()) return "";
  if (embedded_files().count(kHardwareDir + ref.name + ".yaml")) return "";
  std::vector<fs::path> candidates = {ref.name};
  const fs::path exp(experiment_file);
  if (fs::path(ref.name).is_relative() && exp.has_parent_path()) candidates.push_back(exp.parent_path() / ref.name);
  for (const fs::path& p : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

HardwareProfile load_hardware_profile(const HardwareRef& ref, const std::string& experiment_file) {
  if (!ref.inline_yaml.empty()) {
    HardwareProfile hw = parse_impl(ref.inline_yaml, experiment_file, false, true);
    if (hw.name.empty()) hw.name = "inline";
    return hw;
  }
  const auto& files = embedded_files();
  const auto it = files.find(kHardwareDir + ref.name + ".yaml");
  if (it != files.end()) {
    HardwareProfile hw = parse_hardware_profile(it->second, it->first);
    if (hw.name.empty()) hw.name = ref.name;
    return hw;
  }
  namespace fs = std::filesystem;
  const std::string origin = ref.origin.empty() ? experiment_file + ": hardware" : ref.origin;
  const std::string file = hardware_profile_file(ref, experiment_file);
  if (!file.empty()) {
    const fs::path p(file);
    HardwareProfile hw = parse_hardware_profile(read_file(p, origin), p.string());
    if (hw.name.empty()) hw.name = p.stem().string();
    return hw;
  }
  throw ConfigError(origin + ": expected a built-in profile (" + join(builtin_hardware_names(), ", ") +
                    ") or a readable profile YAML file, got '" + ref.name + "'");
}

std::vector<std::string> builtin_hardware_names() {
  std::vector<std::string> names;
  const std::string dir = kHardwareDir, ext = ".yaml";
  for (const auto& [path, text] : embedded_files()) {
    (void)text;
    if (path.size() <= dir.size() + ext.size() || path.compare(0, dir.size(), dir) != 0 ||
        path.compare(path.size() - ext.size(), ext.size(), ext) != 0)
      continue;
    const std::string name = path.substr(dir.size(), path.size() - dir.size() - ext.size());
    if (name.find('/') == std::string::npos) names.push_back(name);
  }
  std::sort(names.begin(), names.end());  // by name: "t4" before "t4-founding"
  return names;
}

double critical_batch(const HardwareProfile& hw, const ExpertFormat& format) {
  const std::optional<double> f = peak_flops_per_s(hw, format.dtype);
  if (!f || hw.memory_bandwidth_bytes_per_s <= 0) return 0.0;
  // docs/design.md "Cost model": B* = F * bytes_per_weight / (2 * BW). A weight GEMM with n tokens does 2 n
  // FLOPs per weight it loads, so it turns compute-bound once 2 n / bytes_per_weight > F / BW.
  return *f * bytes_per_weight(format) / (2.0 * hw.memory_bandwidth_bytes_per_s);
}

std::string describe(const MachineSignature& m) {
  return m.cpu_model + ", " + std::to_string(m.cores) + " cores, BLAS core " + m.blas_core + ", " +
         std::to_string(m.threads) + " threads";
}

std::string hardware_digest(const HardwareProfile& hw) {
  std::string text = "name=" + hw.name + "\n";
  auto add = [&](const char* key, double v) {
    char line[96];
    std::snprintf(line, sizeof line, "%s=%.17g\n", key, v);
    text += line;
  };
  auto add_peak = [&](const char* key, const std::optional<double>& v) {
    if (v) add(key, *v);
    else text += std::string(key) + "=none\n";
  };
  add_peak("peak_fp32", hw.peak_fp32_flops_per_s);
  add_peak("peak_tf32", hw.peak_tf32_flops_per_s);
  add_peak("peak_bf16", hw.peak_bf16_flops_per_s);
  add_peak("peak_fp16", hw.peak_fp16_flops_per_s);
  add_peak("peak_fp8", hw.peak_fp8_flops_per_s);
  add_peak("peak_int8", hw.peak_int8_flops_per_s);
  add("memory_bandwidth", hw.memory_bandwidth_bytes_per_s);
  add("memory_bytes", hw.memory_bytes);
  add("sm_count", hw.sm_count);
  add("smem_per_sm", hw.smem_per_sm_bytes);
  add("l2_bytes", hw.l2_bytes);
  add("launch_overhead", hw.launch_overhead_s);
  add("k_step", hw.k_step_s);
  add("link_bandwidth", hw.link_bandwidth_bytes_per_s);
  add("link_latency", hw.link_latency_s);
  add("devices_per_node", hw.devices_per_node);
  add("inter_node_bandwidth", hw.inter_node_bandwidth_bytes_per_s);
  add("inter_node_latency", hw.inter_node_latency_s);
  add("a2a_normal_dispatch", hw.a2a_normal_dispatch_s);
  add("a2a_normal_combine", hw.a2a_normal_combine_s);
  add("a2a_normal_scale_up_efficiency", hw.a2a_normal_scale_up_efficiency);
  add("a2a_normal_scale_out_efficiency", hw.a2a_normal_scale_out_efficiency);
  add("a2a_low_latency_dispatch", hw.a2a_low_latency_dispatch_s);
  add("a2a_low_latency_combine", hw.a2a_low_latency_combine_s);
  add("a2a_low_latency_scale_up_efficiency", hw.a2a_low_latency_scale_up_efficiency);
  add("a2a_low_latency_scale_out_efficiency", hw.a2a_low_latency_scale_out_efficiency);
  add("tile_m", hw.tile_m);
  add("tile_n", hw.tile_n);
  add("efficiency_flops", hw.efficiency_flops);
  add("efficiency_bw", hw.efficiency_bw);
  add("memory_compute_overlap", hw.memory_compute_overlap);
  add("calibrated", hw.calibrated ? 1 : 0);
  if (hw.mxfp8) add("mxfp8", 1);  // only where set, so that the profiles without it keep their digests
  return bytes_digest(text);
}

}  // namespace moesim
