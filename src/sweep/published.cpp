// Published kernel tables against the cost model (published.hpp). The routing is the benchmarks' own:
// vLLM's benchmarks/kernels/benchmark_moe.py and SGLang's tuning_fused_moe_triton.py draw gating logits
// with torch.randn, so each token's top-k is a uniformly random set of k distinct experts; drawn here by a
// partial Fisher-Yates shuffle on counter_rng, kPublishedDraws times, and the model's times averaged.
// aiconfigurator's collector routes `balanced`: one deterministic round-robin.
// Host only. Covered by tests/sweep/published_test.cpp.
#include "src/sweep/published.hpp"
#include "src/sweep/published_serve.hpp"
#include "src/sweep/published_step.hpp"
#include "src/sweep/table_cells.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "src/common/counter_rng.hpp"
#include "src/common/embedded.hpp"
#include "src/common/error.hpp"
#include "src/common/median.hpp"
#include "src/workload/load_distribution.hpp"

namespace moesim {

// The required columns once, the optional ones appended in their order.
#define MOESIM_PUBLISHED_COLUMNS \
  "gpu,dtype,experts,n,k,top_k,tp,batch,measured_us,source,date,tool,kernel_config,routing,notes,scope"
const char* const kPublishedHeader = MOESIM_PUBLISHED_COLUMNS;
const char* const kPublishedHeaderEp = MOESIM_PUBLISHED_COLUMNS ",ep";
const char* const kPublishedHeaderGated = MOESIM_PUBLISHED_COLUMNS ",ep,gated";
const char* const kPublishedHeaderFitted = MOESIM_PUBLISHED_COLUMNS ",ep,gated,fitted";
#undef MOESIM_PUBLISHED_COLUMNS

std::string dtype_cell(const ExpertFormat& f) {
  return f.weights == WeightDtype::same ? to_string(f.dtype) : to_string(f.weights);
}

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kStreamPublished = 0x7075626c;  // "publ": the routing draws of one point
constexpr const char* kValidationDir = "data/validation/";


double parse_time_us(const TableCell& w, const std::string& s) {
  const double v = whole_number(s);
  if (!std::isfinite(v) || v <= 0 || v > 1e9) w.fail("measured_us", "a positive time in microseconds", s);
  return v;
}

KernelScope parse_scope(const TableCell& w, const std::string& s) {
  for (KernelScope v : {KernelScope::layer, KernelScope::experts, KernelScope::up_gemm, KernelScope::down_gemm})
    if (s == to_string(v)) return v;
  w.fail("scope", "layer, experts, up_gemm or down_gemm", s);
}

ExpertFormat parse_dtype_cell(const TableCell& w, const std::string& s) {
  for (Dtype d : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8})
    if (s == to_string(d)) return d;
  // Weight-only 4-bit kernels (vLLM's Marlin W4A16, the mxfp4 MoE) compute in bf16.
  for (WeightDtype q : {WeightDtype::int4, WeightDtype::mxfp4})
    if (s == to_string(q)) return {Dtype::bf16, q, true};
  w.fail("dtype", "fp32, tf32, bf16, fp16, fp8, int8, int4 or mxfp4", s);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) throw InputError(path.string() + ": cannot read the file");
  return ss.str();
}

std::string stem_of(const std::string& origin) { return fs::path(origin).stem().string(); }

bool is_builtin_origin(const std::string& origin) { return origin.rfind(kValidationDir, 0) == 0; }

}  // namespace

HardwareProfile published_table_profile(const std::string& origin, int line, const std::string& cell,
                                        std::string& profile_ref) {
  const TableCell w{origin, line};
  const auto names = builtin_hardware_names();
  HardwareRef ref;
  if (std::binary_search(names.begin(), names.end(), cell)) {
    ref.name = profile_ref = cell;
    return load_hardware_profile(ref, "");
  }
  const fs::path path(cell);
  const bool yaml = path.extension() == ".yaml" || path.extension() == ".yml";
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  if (!yaml || is_builtin_origin(w.origin))
    w.fail("gpu", "a built-in hardware profile (" + list + ") or a profile .yaml file relative to the table", cell);
  ref.name = profile_ref = path.is_absolute() ? cell : (fs::path(w.origin).parent_path() / path).string();
  ref.origin = w.origin + ":" + std::to_string(w.line) + ": gpu";
  try {
    return load_hardware_profile(ref, "");
  } catch (const ConfigError& e) {
    throw InputError(e.what());
  }
}

std::vector<PublishedFile> published_files(const std::string& spec) {
  std::vector<PublishedFile> out;
  if (spec == "all") {
    for (const auto& [path, text] : embedded_files()) {
      if (path.rfind(kValidationDir, 0) == 0 && fs::path(path).extension() == ".csv") out.push_back({path, text});
    }
    return out;
  }
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(spec, ec))
      if (entry.path().extension() == ".csv") files.push_back(entry.path());
    if (files.empty()) throw InputError(spec + ": expected a folder holding validation .csv files, got none");
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) out.push_back({f.string(), read_file(f)});
  } else if (fs::is_regular_file(spec, ec)) {
    out.push_back({spec, read_file(spec)});
  } else {
    throw InputError("--published: expected 'all', a validation CSV or a folder of them, got '" + spec + "'");
  }
  return out;
}

bool is_comm_table(const std::string& text) {
  const std::string first = text.substr(0, text.find('\n'));
  return first.rfind("phase,gpu,", 0) == 0;
}

bool is_training_table(const std::string& text) { return text.rfind("model,", 0) == 0; }

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

const char* to_string(PublishedRouting r) {
  switch (r) {
    case PublishedRouting::uniform: return "uniform";
    case PublishedRouting::balanced: return "balanced";
    case PublishedRouting::power_law: return "power_law";
    case PublishedRouting::concentrated: return "concentrated";
  }
  return "?";
}

const char* to_string(PublishedColumn c) {
  switch (c) {
    case PublishedColumn::ideal: return "ideal";
    case PublishedColumn::model: return "model";
    case PublishedColumn::held_out: return "held_out";
  }
  return "?";
}

PublishedTable parse_published_csv(const std::string& text, const std::string& origin) {
  PublishedTable table;
  table.origin = origin;
  table.name = stem_of(origin);
  std::istringstream in(text);
  std::string line;
  int number = 0;
  std::size_t columns = 0;
  std::string gpu;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const TableCell w{origin, number};
    if (number == 1) {
      if (line != kPublishedHeader && line != kPublishedHeaderEp && line != kPublishedHeaderGated &&
          line != kPublishedHeaderFitted)
        w.fail("header", std::string("the columns ") + kPublishedHeader + " (and optionally ,ep or ,ep,gated or ,ep,gated,fitted)",
               line.substr(0, 80));
      columns = split_csv_line(line).size();
      continue;
    }
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv_line(line);
    if (f.size() != columns)
      w.fail("row", std::to_string(columns) + " fields", std::to_string(f.size()) + " fields");
    PublishedPoint p;
    p.line = number;
    p.gpu = f[0];
    if (gpu.empty()) {
      table.hardware = published_table_profile(origin, number, p.gpu, table.profile_ref);
      gpu = p.gpu;
    } else if (p.gpu != gpu) {
      w.fail("gpu", "'" + gpu + "' as on the table's first row (one GPU per table)", p.gpu);
    }
    p.format = parse_dtype_cell(w, f[1]);
    p.experts = static_cast<int>(w.integer("experts", f[2], 1, 65536));
    p.n = w.integer("n", f[3], 1, int64_t(1) << 20);
    p.k = w.integer("k", f[4], 1, int64_t(1) << 20);
    p.top_k = static_cast<int>(w.integer("top_k", f[5], 1, std::min(p.experts, kPublishedMaxTopK)));
    p.tp = static_cast<int>(w.integer("tp", f[6], 1, 1024));
    p.batch = w.integer("batch", f[7], 1, kPublishedMaxBatch);
    p.measured_s = parse_time_us(w, f[8]) * 1e-6;
    p.source = f[9];
    if (p.source.empty()) w.fail("source", "the measurement's source (owner/repo#PR)", "");
    p.tool = f[11];
    p.routing = f[13] == "balanced"       ? PublishedRouting::balanced
                : f[13] == "concentrated" ? PublishedRouting::concentrated
                                          : PublishedRouting::uniform;
    if (f[13].rfind("power_law:", 0) == 0) {
      const double alpha = whole_number(f[13].substr(10));
      if (!(alpha > 0 && alpha <= 10) || std::fabs(alpha - 1.0) < 1e-9)
        w.fail("routing", "power_law:ALPHA with ALPHA in (0, 10], not 1", f[13]);
      p.routing = PublishedRouting::power_law;
      p.alpha = alpha;
      if (p.experts > kPublishedMaxPowerLawExperts)
        w.fail("experts", "at most " + std::to_string(kPublishedMaxPowerLawExperts) +
                              " with routing power_law (each row draws " + std::to_string(kPowerLawDraws) + " routings)",
               f[2]);
    }
    p.scope = parse_scope(w, f[15]);
    if (columns > 16) {
      p.ep = static_cast<int>(w.integer("ep", f[16], 1, p.experts));
      if (p.experts % p.ep != 0) w.fail("ep", "a divisor of experts (" + std::to_string(p.experts) + ")", f[16]);
    }
    if (columns > 17) {
      if (f[17] != "0" && f[17] != "1") w.fail("gated", "1 (SwiGLU experts) or 0 (non-gated: relu^2, GELU)", f[17]);
      p.format.gated = f[17] == "1";
    }
    if (columns > 18) {
      if (f[18] != "0" && f[18] != "1")
        w.fail("fitted", "1 (the fits may see the row) or 0 (validation only: a kernel run does not model)", f[18]);
      p.fitted = f[18] == "1";
    }
    if (!peak_flops_per_s(table.hardware, p.format.dtype))
      w.fail("dtype", std::string("a dtype with a dense peak on ") + table.hardware.name, f[1]);
    table.points.push_back(std::move(p));
  }
  if (number == 0) throw InputError(origin + ": expected the header line " + std::string(kPublishedHeader) + ", got an empty file");
  if (table.points.empty()) throw InputError(origin + ": expected at least one measurement row, got none");
  return table;
}

std::vector<PublishedTable> load_published(const std::string& spec) {
  std::vector<PublishedTable> tables;
  for (const PublishedFile& f : published_files(spec))
    if (!is_comm_table(f.text) && !is_training_table(f.text) && !is_step_table(f.text) &&
        !is_balancedness_table(f.text) && !is_serve_table(f.text))
      tables.push_back(parse_published_csv(f.text, f.origin));
  if (tables.empty()) return tables;  // a communication table alone (load_published_comm) is not an error here
  std::size_t points = 0;
  for (const PublishedTable& t : tables) points += t.points.size();
  if (tables.size() > kPublishedMaxTables || points > kPublishedMaxPoints) {
    throw InputError("--published " + spec + ": expected at most " + std::to_string(kPublishedMaxTables) +
                     " tables and " + std::to_string(kPublishedMaxPoints) +
                     " points (the leave-one-out fits grow as tables x points), got " + std::to_string(tables.size()) +
                     " tables and " + std::to_string(points) + " points");
  }
  std::sort(tables.begin(), tables.end(), [](const PublishedTable& a, const PublishedTable& b) { return a.name < b.name; });
  return tables;
}

double whole_number(const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  return used == 0 || used != s.size() ? std::nan("") : v;
}

bool skewed(PublishedRouting r) { return r == PublishedRouting::power_law || r == PublishedRouting::concentrated; }

int published_draws(const PublishedPoint& p) {
  switch (p.routing) {
    case PublishedRouting::balanced:
    case PublishedRouting::concentrated: return 1;
    case PublishedRouting::power_law: return kPowerLawDraws;
    case PublishedRouting::uniform: break;
  }
  return kPublishedDraws;
}

std::vector<int64_t> published_loads(const PublishedPoint& p, int draw) {
  MOESIM_REQUIRE(p.experts >= 1 && p.top_k >= 1 && p.top_k <= p.experts && p.batch >= 1 && p.ep >= 1 &&
                     p.experts % p.ep == 0,
                 "a published point needs 1 <= top_k <= experts, batch >= 1 and ep dividing experts");
  const int local = p.experts / p.ep;
  const uint64_t seed = static_cast<uint64_t>(p.experts) * 1000003u + static_cast<uint64_t>(p.top_k) * 7919u +
                        static_cast<uint64_t>(p.batch);
  if (p.routing == PublishedRouting::concentrated) {
    std::vector<int64_t> load(static_cast<std::size_t>(local), 0);
    for (int e = 0; e < std::min(p.top_k, local); ++e) load[static_cast<std::size_t>(e)] = p.batch;
    return load;
  }
  if (p.routing != PublishedRouting::uniform) {
    std::vector<int64_t> all = p.routing == PublishedRouting::balanced
                                   ? balanced_round_robin_loads(p.batch, p.experts, p.top_k)
                                   : power_law_loads(p.batch, p.experts, p.top_k, p.alpha, p.ep, seed,
                                                     static_cast<uint64_t>(draw));
    all.resize(static_cast<std::size_t>(local));  // the timed GPU: experts [0, E / ep)
    return all;
  }
  std::vector<int64_t> load(static_cast<std::size_t>(local), 0);
  const auto count = [&](int expert) {
    if (expert < local) ++load[static_cast<std::size_t>(expert)];
  };
  std::vector<int> order(static_cast<std::size_t>(p.experts)), picks(static_cast<std::size_t>(p.top_k));
  std::iota(order.begin(), order.end(), 0);
  uint64_t index = 0;
  for (int64_t token = 0; token < p.batch; ++token) {
    for (int j = 0; j < p.top_k; ++j) {  // partial Fisher-Yates: order[0..k) is a uniform k-subset
      const double u = counter_uniform(seed, kStreamPublished + static_cast<uint64_t>(draw), index++);
      const int pick = j + std::min(p.experts - j - 1, static_cast<int>(u * (p.experts - j)));
      picks[static_cast<std::size_t>(j)] = pick;
      std::swap(order[static_cast<std::size_t>(j)], order[static_cast<std::size_t>(pick)]);
      count(order[static_cast<std::size_t>(j)]);
    }
    // Undo the swaps, last first: order is the identity again in O(k), not O(E), per token.
    for (int j = p.top_k - 1; j >= 0; --j)
      std::swap(order[static_cast<std::size_t>(j)], order[static_cast<std::size_t>(picks[static_cast<std::size_t>(j)])]);
  }
  return load;
}

PublishedTerms published_terms(const PublishedPoint& p, const HardwareProfile& hw) {
  const ExpertRoofline model(hw, p.k, p.n, p.format);
  PublishedTerms t;
  t.kernels = scope_kernels(p.scope);
  const int draws = published_draws(p);
  for (int draw = 0; draw < draws; ++draw) {
    GroupedCost g(model);
    int64_t local_rows = 0;
    for (int64_t rows : published_loads(p, draw)) {
      g.add(rows);
      local_rows += rows;
    }
    // Expert parallel on one GPU: the other ranks' assignments ride along (GroupedCost::add_idle_rows).
    g.add_idle_rows(p.batch * p.top_k - local_rows);
    t.draws.push_back(g.terms(p.scope));
    t.active_experts += static_cast<double>(g.experts());
  }
  t.active_experts /= draws;
  return t;
}

double published_time_s(const PublishedTerms& t, const KernelFigures& f) {
  double sum = 0;
  for (const KernelTerms& d : t.draws) sum += kernel_time_s(d, f);
  return sum / static_cast<double>(t.draws.size());
}

double published_ideal_s(const PublishedTerms& t) {
  double sum = 0;
  for (const KernelTerms& d : t.draws) sum += kernel_ideal_s(d, KernelFigures{});
  return sum / static_cast<double>(t.draws.size());
}

PublishedFit fit_published(const std::vector<PublishedSample>& samples, const KernelFigures* prior) {
  MOESIM_REQUIRE(!samples.empty(), "a fit needs at least one published point");
  std::vector<double> log_measured;
  for (const PublishedSample& s : samples) log_measured.push_back(std::log(s.measured_s));
  const auto loss = [&](double log_bw, double log_flops, double launch_s, double step_s) {
    KernelFigures f;
    f.efficiency_bw = std::exp(log_bw);
    f.efficiency_flops = std::exp(log_flops);
    f.launch_s = launch_s;
    f.k_step_s = step_s;
    double sum = 0;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      f.overlap = samples[i].overlap;
      const double d = std::log(published_time_s(samples[i].terms, f)) - log_measured[i];
      sum += d * d;
    }
    if (prior) {
      const double a = log_bw - std::log(prior->efficiency_bw), b = log_flops - std::log(prior->efficiency_flops);
      const double c = (launch_s - prior->launch_s) / kPriorLaunchScale_s;
      const double d = (step_s - prior->k_step_s) / kPriorKStepScale_s;
      sum += kPriorWeight * (a * a + b * b + c * c + d * d);
    }
    return sum;
  };
  // Without a prior, a coarse grid first: log efficiencies over [log 0.02, 0] in 6 steps, launch 0..48 us
  // in 8 us steps, the K step 0..2 us in 0.4 us steps, scanned from the highest efficiencies, the lowest
  // launch and K step, so a flat direction keeps those (a term no point binds stays at its ideal). With a
  // prior, its figures are the start. Then 10 rounds of a 5^4 grid around the best, the step halved each
  // round.
  const double lo = std::log(0.02), kMaxLaunch = 50e-6, kMaxStep = 4e-6;
  double step = -lo / 6.0, launch_step = 8e-6, k_step = 0.4e-6;
  double best = HUGE_VAL, best_bw = 0, best_flops = 0, best_launch = 0, best_k = 0;
  if (prior) {
    best_bw = std::clamp(std::log(prior->efficiency_bw), lo, 0.0);
    best_flops = std::clamp(std::log(prior->efficiency_flops), lo, 0.0);
    best_launch = std::clamp(prior->launch_s, 0.0, kMaxLaunch);
    best_k = std::clamp(prior->k_step_s, 0.0, kMaxStep);
    best = loss(best_bw, best_flops, best_launch, best_k);
  } else {
    for (int i = 6; i >= 0; --i)
      for (int j = 6; j >= 0; --j)
        for (int l = 0; l <= 6; ++l)
          for (int q = 0; q <= 5; ++q) {
            const double v = loss(lo + i * step, lo + j * step, l * launch_step, q * k_step);
            if (v < best) best = v, best_bw = lo + i * step, best_flops = lo + j * step, best_launch = l * launch_step,
                          best_k = q * k_step;
          }
  }
  for (int round = 0; round < 10; ++round) {
    step /= 2.0;
    launch_step /= 2.0;
    k_step /= 2.0;
    const double c_bw = best_bw, c_flops = best_flops, c_launch = best_launch, c_k = best_k;
    for (int i = 2; i >= -2; --i)
      for (int j = 2; j >= -2; --j)
        for (int l = -2; l <= 2; ++l)
          for (int q = -2; q <= 2; ++q) {
            const double a = std::clamp(c_bw + i * step, lo, 0.0), b = std::clamp(c_flops + j * step, lo, 0.0);
            const double c = std::clamp(c_launch + l * launch_step, 0.0, kMaxLaunch);
            const double d = std::clamp(c_k + q * k_step, 0.0, kMaxStep);
            const double v = loss(a, b, c, d);
            if (v < best) best = v, best_bw = a, best_flops = b, best_launch = c, best_k = d;
          }
  }
  PublishedFit fit;
  fit.figures.efficiency_bw = std::exp(best_bw);
  fit.figures.efficiency_flops = std::exp(best_flops);
  fit.figures.launch_s = best_launch;
  fit.figures.k_step_s = best_k;
  fit.points = static_cast<int>(samples.size());
  return fit;
}

namespace {

std::vector<PublishedSample> table_samples(const PublishedTable& t) {
  std::vector<PublishedSample> out;
  for (const PublishedPoint& p : t.points) {
    try {
      const bool weight_only = p.format.weights != WeightDtype::same;
      out.push_back({published_terms(p, t.hardware), p.measured_s, t.hardware.memory_compute_overlap,
                     p.fitted && !skewed(p.routing) && !weight_only, weight_only});
    } catch (const Error& e) {  // e.g. a shape the profile cannot cost: name the row
      throw InputError(t.origin + ":" + std::to_string(p.line) + ": " + e.what());
    }
  }
  return out;
}

ShippedFit shipped_fit_of(const std::vector<PublishedTable>& tables,
                          const std::vector<std::vector<PublishedSample>>& samples, const std::string& gpu, int skip) {
  ShippedFit out;
  std::vector<PublishedSample> all, own;
  for (std::size_t t = 0; t < tables.size(); ++t) {
    if (static_cast<int>(t) == skip) continue;
    const bool mine = tables[t].hardware.name == gpu;
    bool fitted = false;
    for (const PublishedSample& s : samples[t]) {
      if (!s.fitted) continue;
      fitted = true;
      all.push_back(s);
      if (mine) own.push_back(s);
    }
    if (mine && fitted) out.gpu_tables.push_back(tables[t].name);
  }
  if (all.empty()) return out;
  out.pooled = fit_published(all);
  out.gpu = own.empty() ? out.pooled : fit_published(own, &out.pooled.figures);
  return out;
}

WeightOnlyShares fit_weight_only_of(const std::vector<PublishedTable>& tables,
                                    const std::vector<std::vector<PublishedSample>>& samples, int skip) {
  struct Point {
    const PublishedTerms* terms;
    KernelFigures figures;
    double log_measured;
  };
  std::vector<Point> points;
  for (std::size_t t = 0; t < tables.size(); ++t) {
    if (static_cast<int>(t) == skip) continue;
    const KernelFigures shipped = KernelFigures::of(tables[t].hardware);
    for (std::size_t i = 0; i < samples[t].size(); ++i) {
      const PublishedSample& s = samples[t][i];
      if (s.weight_only && tables[t].points[i].fitted && !skewed(tables[t].points[i].routing))
        points.push_back({&s.terms, shipped, std::log(s.measured_s)});
    }
  }
  WeightOnlyShares out;
  out.points = static_cast<int>(points.size());
  if (points.empty()) return out;
  const auto loss = [&](double log_bw, double log_flops, double log_reread, double log_k) {
    double sum = 0;
    for (Point& p : points) {
      p.figures.weight_only_bw_share = std::exp(log_bw);
      p.figures.weight_only_flops_share = std::exp(log_flops);
      p.figures.weight_only_reread_share = std::exp(log_reread);
      p.figures.weight_only_k_step_share = std::exp(log_k);
      const double d = std::log(published_time_s(*p.terms, p.figures)) - p.log_measured;
      sum += d * d;
    }
    return sum;
  };
  // Log shares over [log 0.02, 0] in 12 steps (from the highest: a direction no point binds stays at 1) at
  // a K-step share of 1; then the K-step share over [0, log 8] in 12 steps from the lowest (dequantizing
  // lengthens a step; unbound, it stays 1); then 10 rounds of a 5^4 grid around the best, the steps halved
  // each round.
  const double lo = std::log(0.02), k_hi = std::log(8.0);
  double step = -lo / 12.0, k_step = k_hi / 12.0, best = HUGE_VAL, best_bw = 0, best_flops = 0, best_reread = 0,
         best_k = 0;
  for (int i = 12; i >= 0; --i)
    for (int j = 12; j >= 0; --j)
      for (int r = 12; r >= 0; --r) {
        const double v = loss(lo + i * step, lo + j * step, lo + r * step, 0.0);
        if (v < best) best = v, best_bw = lo + i * step, best_flops = lo + j * step, best_reread = lo + r * step;
      }
  for (int q = 1; q <= 12; ++q) {
    const double v = loss(best_bw, best_flops, best_reread, q * k_step);
    if (v < best) best = v, best_k = q * k_step;
  }
  for (int round = 0; round < 10; ++round) {
    step /= 2.0;
    k_step /= 2.0;
    const double c_bw = best_bw, c_flops = best_flops, c_reread = best_reread, c_k = best_k;
    for (int i = 2; i >= -2; --i)
      for (int j = 2; j >= -2; --j)
        for (int r = 2; r >= -2; --r)
          for (int q = -2; q <= 2; ++q) {
            const double a = std::clamp(c_bw + i * step, lo, 0.0), b = std::clamp(c_flops + j * step, lo, 0.0),
                         c = std::clamp(c_reread + r * step, lo, 0.0), d = std::clamp(c_k + q * k_step, 0.0, k_hi);
            const double v = loss(a, b, c, d);
            if (v < best) best = v, best_bw = a, best_flops = b, best_reread = c, best_k = d;
          }
  }
  out.bw_share = std::exp(best_bw);
  out.flops_share = std::exp(best_flops);
  out.reread_share = std::exp(best_reread);
  out.k_step_share = std::exp(best_k);
  return out;
}

}  // namespace

WeightOnlyShares fit_weight_only(const std::vector<PublishedTable>& tables, int skip) {
  std::vector<std::vector<PublishedSample>> samples;
  for (const PublishedTable& t : tables) samples.push_back(table_samples(t));
  return fit_weight_only_of(tables, samples, skip);
}

ShippedFit shipped_fit(const std::vector<PublishedTable>& tables, const std::string& gpu, int skip) {
  std::vector<std::vector<PublishedSample>> samples;
  for (const PublishedTable& t : tables) samples.push_back(table_samples(t));
  return shipped_fit_of(tables, samples, gpu, skip);
}

double column_s(const PublishedRow& r, PublishedColumn c) {
  switch (c) {
    case PublishedColumn::ideal: return r.ideal_s;
    case PublishedColumn::model: return r.model_s;
    case PublishedColumn::held_out: return r.held_out_s;
  }
  return 0;
}

double column_error(const PublishedRow& r, PublishedColumn c) {
  return (column_s(r, c) - r.point.measured_s) / r.point.measured_s;
}

ErrorSummary summarize_errors(const std::vector<double>& errors) {
  ErrorSummary s;
  s.points = static_cast<int>(errors.size());
  if (errors.empty()) return s;
  std::vector<double> abs_errors;
  for (double e : errors) {
    abs_errors.push_back(std::fabs(e));
    if (std::fabs(e) > std::fabs(s.worst)) s.worst = e;
  }
  s.median_abs = median(abs_errors);
  double sum = 0;
  for (double e : errors) sum += e;
  s.mean = sum / static_cast<double>(errors.size());
  return s;
}

const char* to_string(PublishedRegime r) {
  switch (r) {
    case PublishedRegime::fitted_routing: return "balanced and uniform routing";
    case PublishedRegime::decode_wide_ep: return "decode, ep >= 8 (<= 64 tokens)";
    case PublishedRegime::decode_ep1: return "decode, ep 1 (<= 64 tokens)";
    case PublishedRegime::large_batch: return "prefill and large batches (> 64 tokens)";
    case PublishedRegime::ep1: return "ep 1, every batch";
    case PublishedRegime::wide_ep: return "ep >= 8, every batch";
    case PublishedRegime::every: return "every point";
  }
  return "?";
}

bool in_regime(const PublishedPoint& p, PublishedRegime r) {
  const bool decode = p.batch <= kDecodeMaxTokens;
  switch (r) {
    case PublishedRegime::fitted_routing:
      return p.routing == PublishedRouting::balanced || p.routing == PublishedRouting::uniform;
    case PublishedRegime::decode_wide_ep: return decode && p.ep >= kWideEp;
    case PublishedRegime::decode_ep1: return decode && p.ep == 1;
    case PublishedRegime::large_batch: return !decode;
    case PublishedRegime::ep1: return p.ep == 1;
    case PublishedRegime::wide_ep: return p.ep >= kWideEp;
    case PublishedRegime::every: return true;
  }
  return false;
}

std::vector<RegimeSummary> summarize_regimes(const PublishedValidation& v) {
  std::vector<RegimeSummary> out;
  for (PublishedRegime regime : kPublishedRegimes) {
    std::vector<double> model, held;
    for (const PublishedRow& r : v.rows) {
      if (!in_regime(r.point, regime)) continue;
      model.push_back(column_error(r, PublishedColumn::model));
      if (!v.tables[static_cast<std::size_t>(r.table)].fitted_on.empty())
        held.push_back(column_error(r, PublishedColumn::held_out));
    }
    out.push_back({regime, summarize_errors(model), summarize_errors(held)});
  }
  return out;
}

PublishedValidation validate_published(const std::vector<PublishedTable>& tables) {
  PublishedValidation v;
  std::vector<std::vector<PublishedSample>> samples;
  for (std::size_t t = 0; t < tables.size(); ++t) {
    MOESIM_REQUIRE(!tables[t].points.empty(), "a published table has no points");
    samples.push_back(table_samples(tables[t]));
    PublishedTableResult res;
    res.table = tables[t];
    res.table.points.clear();
    res.gpu = tables[t].hardware.name;
    res.profile_digest = hardware_digest(tables[t].hardware);
    const KernelFigures shipped = KernelFigures::of(tables[t].hardware);
    for (std::size_t i = 0; i < tables[t].points.size(); ++i) {
      PublishedRow row;
      row.table = static_cast<int>(t);
      row.point = tables[t].points[i];
      row.terms = samples[t][i].terms;
      row.ideal_s = published_ideal_s(row.terms);
      row.model_s = published_time_s(row.terms, shipped);
      v.rows.push_back(std::move(row));
    }
    v.tables.push_back(std::move(res));
  }
  // Leave one table out: the shipped fit (pooled over every table, then the GPU's own tables near it)
  // without the table it predicts. A table no fit sees (power-law rows only) leaves the fits as they are:
  // its GPU's full fit, worked out once.
  std::map<std::string, ShippedFit> full_fit;
  const auto fit_without = [&](std::size_t t) {
    bool fitted = false;
    for (const PublishedSample& s : samples[t]) fitted |= s.fitted;
    if (fitted) return shipped_fit_of(tables, samples, v.tables[t].gpu, static_cast<int>(t));
    auto it = full_fit.find(v.tables[t].gpu);
    if (it == full_fit.end())
      it = full_fit.emplace(v.tables[t].gpu, shipped_fit_of(tables, samples, v.tables[t].gpu, -1)).first;
    return it->second;
  };
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    PublishedTableResult& res = v.tables[t];
    const ShippedFit fit = fit_without(t);
    for (std::size_t o = 0; o < v.tables.size(); ++o)
      if (o != t) res.fitted_on.push_back(v.tables[o].table.name);
    res.held_out_basis = res.fitted_on.empty() ? "none" : "every other table";
    res.fit = fit.gpu;
    // A weight-only table's kernel also takes the shares fitted without it.
    bool weight_only = false;
    for (const PublishedSample& s : samples[t]) weight_only |= s.weight_only;
    if (weight_only) {
      const WeightOnlyShares w = fit_weight_only_of(tables, samples, static_cast<int>(t));
      res.fit.figures.weight_only_bw_share = w.bw_share;
      res.fit.figures.weight_only_flops_share = w.flops_share;
      res.fit.figures.weight_only_reread_share = w.reread_share;
      res.fit.figures.weight_only_k_step_share = w.k_step_share;
    }
  }
  std::vector<std::vector<double>> overall(kPublishedColumnCount);
  std::map<std::string, std::vector<std::vector<double>>> per_gpu;
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    std::vector<std::vector<double>> errors(kPublishedColumnCount);
    auto& gpu = per_gpu[v.tables[t].gpu];
    gpu.resize(kPublishedColumnCount);
    for (PublishedRow& row : v.rows) {
      if (row.table != static_cast<int>(t)) continue;
      const PublishedTableResult& res = v.tables[t];
      if (!res.fitted_on.empty()) {
        KernelFigures f = res.fit.figures;
        f.overlap = samples[t].front().overlap;
        row.held_out_s = published_time_s(row.terms, f);
      }
      for (int c = 0; c < kPublishedColumnCount; ++c) {
        if (kPublishedColumns[c] == PublishedColumn::held_out && res.fitted_on.empty()) continue;
        errors[c].push_back(column_error(row, kPublishedColumns[c]));
        overall[c].push_back(errors[c].back());
        gpu[c].push_back(errors[c].back());
      }
    }
    for (int c = 0; c < kPublishedColumnCount; ++c) v.tables[t].errors[c] = summarize_errors(errors[c]);
  }
  for (const auto& [name, errors] : per_gpu) {
    PublishedGpuSummary g;
    g.gpu = name;
    for (int c = 0; c < kPublishedColumnCount; ++c) g.errors[c] = summarize_errors(errors[c]);
    const ShippedFit fit = shipped_fit_of(tables, samples, name, -1);
    g.fit = fit.gpu;
    g.fitted_tables = fit.gpu_tables;
    v.pooled = fit.pooled;
    v.gpus.push_back(g);
  }
  for (int c = 0; c < kPublishedColumnCount; ++c) v.overall[c] = summarize_errors(overall[c]);
  v.weight_only = fit_weight_only_of(tables, samples, -1);
  // Skew pairs: each skewed row against the balanced row of its table at the same batch.
  for (const PublishedRow& r : v.rows) {
    if (!skewed(r.point.routing)) continue;
    for (const PublishedRow& b : v.rows) {
      const PublishedPoint &x = b.point, &y = r.point;  // the same kernel, shape and batch
      if (b.table != r.table || x.routing != PublishedRouting::balanced || x.batch != y.batch || x.ep != y.ep ||
          x.experts != y.experts || x.top_k != y.top_k || x.n != y.n || x.k != y.k || x.scope != y.scope ||
          dtype_cell(x.format) != dtype_cell(y.format) || x.format.gated != y.format.gated)
        continue;
      SkewPair pair;
      pair.table = r.table;
      pair.batch = r.point.batch;
      pair.ep = r.point.ep;
      pair.alpha = r.point.alpha;
      pair.routing = r.point.routing;
      pair.predicted_ratio = r.model_s / b.model_s;
      pair.measured_ratio = r.point.measured_s / b.point.measured_s;
      pair.weight_only = r.point.format.weights != WeightDtype::same;
      pair.modeled = r.point.fitted;
      v.skew_pairs.push_back(pair);
      break;
    }
  }
  return v;
}

SkewSummary summarize_skew(const std::vector<SkewPair>& pairs, double moved, bool ep_one_only, SkewKernels kernels) {
  SkewSummary s;
  std::vector<double> errors;
  int right = 0;
  for (const SkewPair& p : pairs) {
    if (ep_one_only && p.ep != 1) continue;
    const bool in = kernels == SkewKernels::all || (kernels == SkewKernels::validation_only && !p.modeled) ||
                    (p.modeled && (kernels == SkewKernels::modeled || (kernels == SkewKernels::fused && !p.weight_only) ||
                                   (kernels == SkewKernels::weight_only && p.weight_only)));
    if (!in) continue;
    if (std::fabs(p.measured_ratio - 1.0) <= moved) continue;
    errors.push_back(std::fabs(p.error()));
    right += (p.predicted_ratio > 1.0) == (p.measured_ratio > 1.0) ? 1 : 0;
  }
  s.pairs = static_cast<int>(errors.size());
  if (errors.empty()) return s;
  std::sort(errors.begin(), errors.end());
  s.median_abs = median(errors);
  s.p90_abs = errors[static_cast<std::size_t>(std::ceil(0.9 * static_cast<double>(errors.size()))) - 1];
  s.direction_right = static_cast<double>(right) / static_cast<double>(errors.size());
  return s;
}

std::string published_profile_yaml(const std::vector<PublishedTable>& tables, const std::string& base_yaml,
                                   const std::string& name) {
  MOESIM_REQUIRE(!tables.empty(), "a published fit needs tables");
  const HardwareProfile& hw = tables.front().hardware;
  std::vector<PublishedSample> samples;
  std::string names;
  for (const PublishedTable& t : tables) {
    if (t.hardware.name != hw.name)
      throw InputError(t.origin + ":" + std::to_string(t.points.front().line) + ": gpu: expected '" + hw.name +
                       "' (one GPU per fit, as the first table's), got '" + t.hardware.name + "'");
    const std::vector<PublishedSample> own = table_samples(t);
    samples.insert(samples.end(), own.begin(), own.end());
    names += (names.empty() ? "" : ", ") + t.name;
  }
  // As moesim ships a GPU's figures (shipped_fit): its own tables, near the pooled fit of every table.
  KernelFigures pooled;
  pooled.efficiency_bw = PooledFit::efficiency_bw;
  pooled.efficiency_flops = PooledFit::efficiency_flops;
  pooled.launch_s = PooledFit::launch_overhead_us * 1e-6;
  pooled.k_step_s = PooledFit::k_step_us * 1e-6;
  const PublishedFit fit = fit_published(samples, &pooled);
  const auto num = [](double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    return std::string(buf);
  };
  YAML::Node root = YAML::Load(base_yaml);
  const std::string how = "moesim calibrate --from-published: least-squares fit (log time) to " +
                          std::to_string(fit.points) + " published points of " + names;
  root["name"] = name;
  root["source"] = "profile " + hw.name + " with efficiency_bw, efficiency_flops, launch_overhead_us and k_step_us fitted by " + how;
  root["efficiency_bw"] = YAML::Load(num(fit.figures.efficiency_bw, 4));
  root["efficiency_flops"] = YAML::Load(num(fit.figures.efficiency_flops, 4));
  root["launch_overhead_us"] = YAML::Load(num(fit.figures.launch_s * 1e6, 4));
  root["k_step_us"] = YAML::Load(num(fit.figures.k_step_s * 1e6, 4));
  root["calibrated"] = true;
  if (!root["sources"] || !root["sources"].IsMap()) root["sources"] = YAML::Node(YAML::NodeType::Map);
  root["sources"]["efficiency_bw"] = how;
  root["sources"]["efficiency_flops"] = how;
  root["sources"]["launch_overhead_us"] = how + " (the fixed cost of each kernel of the timed scope)";
  root["sources"]["k_step_us"] = how + " (one K step of a GEMM tile: the latency floor)";
  YAML::Emitter out;
  out << root;
  std::ostringstream os;
  os << "# " << name << ": " << hw.name << " with four figures fitted to published fused-MoE kernel times ("
     << names << ").\n# Regenerate: moesim calibrate --from-published FILES --name " << name << "\n"
     << out.c_str() << "\n";
  const std::string text = os.str();
  parse_hardware_profile(text, name + ".yaml");  // loads as written, or this is a bug reported before writing
  return text;
}

}  // namespace moesim
