// Published kernel tables against the cost model (published.hpp). The routing is the benchmarks' own:
// vLLM's benchmarks/kernels/benchmark_moe.py and SGLang's tuning_fused_moe_triton.py draw gating logits
// with torch.randn, so each token's top-k is a uniformly random set of k distinct experts; drawn here by a
// partial Fisher-Yates shuffle on counter_rng, kPublishedDraws times, and the terms averaged.
// Host only. Covered by tests/sweep/published_test.cpp.
#include "src/sweep/published.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "src/common/counter_rng.hpp"
#include "src/common/embedded.hpp"
#include "src/common/error.hpp"
#include "src/common/median.hpp"

namespace moesim {

const char* const kPublishedHeader =
    "gpu,dtype,experts,n,k,top_k,tp,batch,measured_us,source,date,tool,kernel_config,routing,notes,scope";

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kStreamPublished = 0x7075626c;  // "publ": the routing draws of one point
constexpr const char* kValidationDir = "data/validation/";

struct Where {
  const std::string& origin;
  int line;
  [[noreturn]] void fail(const char* column, const std::string& expected, const std::string& got) const {
    throw InputError(origin + ":" + std::to_string(line) + ": " + column + ": expected " + expected + ", got '" +
                     got + "'");
  }
};

int64_t parse_positive(const Where& w, const char* column, const std::string& s, int64_t max) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || v < 1 || v > max)
    w.fail(column, "an integer from 1 to " + std::to_string(max), s);
  return v;
}

double parse_time_us(const Where& w, const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v) || v <= 0 || v > 1e9)
    w.fail("measured_us", "a positive time in microseconds", s);
  return v;
}

PublishedScope parse_scope(const Where& w, const std::string& s) {
  for (PublishedScope v : {PublishedScope::layer, PublishedScope::up_gemm, PublishedScope::down_gemm})
    if (s == to_string(v)) return v;
  w.fail("scope", "layer, up_gemm or down_gemm", s);
}

Dtype parse_dtype_cell(const Where& w, const std::string& s) {
  for (Dtype d : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8})
    if (s == to_string(d)) return d;
  w.fail("dtype", "fp32, tf32, bf16, fp16, fp8 or int8", s);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) throw InputError(path.string() + ": cannot read the file");
  return ss.str();
}

std::string stem_of(const std::string& origin) { return fs::path(origin).stem().string(); }

GemmPart gemm_part(PublishedScope s) {
  switch (s) {
    case PublishedScope::layer: return GemmPart::both;
    case PublishedScope::up_gemm: return GemmPart::up;
    case PublishedScope::down_gemm: return GemmPart::down;
  }
  return GemmPart::both;
}

}  // namespace

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

const char* to_string(PublishedScope s) {
  switch (s) {
    case PublishedScope::layer: return "layer";
    case PublishedScope::up_gemm: return "up_gemm";
    case PublishedScope::down_gemm: return "down_gemm";
  }
  return "?";
}

// vLLM's fused_experts (model_executor/layers/fused_moe/fused_moe.py) as benchmark_moe.py times it:
// fused_topk (topk_softmax), moe_align_block_size, the w1 fused_moe_kernel, silu_and_mul, the w2
// fused_moe_kernel and moe_sum: 6 kernels. A direct fused_moe_kernel call is 1.
int scope_kernels(PublishedScope s) { return s == PublishedScope::layer ? 6 : 1; }

const char* to_string(PublishedColumn c) {
  switch (c) {
    case PublishedColumn::ideal: return "ideal";
    case PublishedColumn::quantized: return "quantized";
    case PublishedColumn::calibrated: return "calibrated";
    case PublishedColumn::held_out: return "held_out";
  }
  return "?";
}

PublishedTable parse_published_csv(const std::string& text, const std::string& origin) {
  PublishedTable table;
  table.origin = origin;
  table.name = stem_of(origin);
  const std::vector<std::string> header = split_csv_line(kPublishedHeader);
  std::istringstream in(text);
  std::string line;
  int number = 0;
  const auto names = builtin_hardware_names();
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const Where w{origin, number};
    if (number == 1) {
      if (line != kPublishedHeader) w.fail("header", std::string("the columns ") + kPublishedHeader, line.substr(0, 80));
      continue;
    }
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv_line(line);
    if (f.size() != header.size())
      w.fail("row", std::to_string(header.size()) + " fields", std::to_string(f.size()) + " fields");
    PublishedPoint p;
    p.line = number;
    p.gpu = f[0];
    if (!std::binary_search(names.begin(), names.end(), p.gpu)) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      w.fail("gpu", "a built-in hardware profile (" + list + ")", p.gpu);
    }
    p.dtype = parse_dtype_cell(w, f[1]);
    p.experts = static_cast<int>(parse_positive(w, "experts", f[2], 65536));
    p.n = parse_positive(w, "n", f[3], int64_t(1) << 20);
    p.k = parse_positive(w, "k", f[4], int64_t(1) << 20);
    p.top_k = static_cast<int>(parse_positive(w, "top_k", f[5], std::min(p.experts, kPublishedMaxTopK)));
    p.tp = static_cast<int>(parse_positive(w, "tp", f[6], 1024));
    p.batch = parse_positive(w, "batch", f[7], kPublishedMaxBatch);
    p.measured_s = parse_time_us(w, f[8]) * 1e-6;
    p.source = f[9];
    if (p.source.empty()) w.fail("source", "the measurement's source (owner/repo#PR)", "");
    p.tool = f[11];
    p.scope = parse_scope(w, f[15]);
    table.points.push_back(std::move(p));
  }
  if (number == 0) throw InputError(origin + ": expected the header line " + std::string(kPublishedHeader) + ", got an empty file");
  if (table.points.empty()) throw InputError(origin + ": expected at least one measurement row, got none");
  return table;
}

std::vector<PublishedTable> load_published(const std::string& spec) {
  std::vector<PublishedTable> tables;
  if (spec == "all") {
    for (const auto& [path, text] : embedded_files()) {
      if (path.rfind(kValidationDir, 0) == 0 && fs::path(path).extension() == ".csv")
        tables.push_back(parse_published_csv(text, path));
    }
  } else {
    std::error_code ec;
    if (fs::is_directory(spec, ec)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(spec, ec))
        if (entry.path().extension() == ".csv") files.push_back(entry.path());
      if (files.empty()) throw InputError(spec + ": expected a folder holding validation .csv files, got none");
      for (const fs::path& f : files) tables.push_back(parse_published_csv(read_file(f), f.string()));
    } else if (fs::is_regular_file(spec, ec)) {
      tables.push_back(parse_published_csv(read_file(spec), spec));
    } else {
      throw InputError("--published: expected 'all', a validation CSV or a folder of them, got '" + spec + "'");
    }
  }
  if (tables.empty()) throw InputError("--published " + spec + ": expected at least one table, got none");
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

PublishedTerms published_terms(const PublishedPoint& p, const HardwareProfile& hw) {
  MOESIM_REQUIRE(p.experts >= 1 && p.top_k >= 1 && p.top_k <= p.experts && p.batch >= 1,
                 "a published point needs 1 <= top_k <= experts and batch >= 1");
  const ExpertRoofline model(hw, p.k, p.n, p.dtype);
  const GemmPart part = gemm_part(p.scope);
  const double flop_share = part == GemmPart::both ? 1.0 : part == GemmPart::up ? 2.0 / 3.0 : 1.0 / 3.0;
  PublishedTerms t;
  t.kernels = scope_kernels(p.scope);
  std::vector<int> order(static_cast<std::size_t>(p.experts)), picks(static_cast<std::size_t>(p.top_k));
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> load(static_cast<std::size_t>(p.experts));
  const uint64_t seed = static_cast<uint64_t>(p.experts) * 1000003u + static_cast<uint64_t>(p.top_k) * 7919u +
                        static_cast<uint64_t>(p.batch);
  for (int draw = 0; draw < kPublishedDraws; ++draw) {
    std::fill(load.begin(), load.end(), 0);
    uint64_t index = 0;
    for (int64_t token = 0; token < p.batch; ++token) {
      for (int j = 0; j < p.top_k; ++j) {  // partial Fisher-Yates: order[0..k) is a uniform k-subset
        const double u = counter_uniform(seed, kStreamPublished + static_cast<uint64_t>(draw), index++);
        const int pick = j + std::min(p.experts - j - 1, static_cast<int>(u * (p.experts - j)));
        picks[static_cast<std::size_t>(j)] = pick;
        std::swap(order[static_cast<std::size_t>(j)], order[static_cast<std::size_t>(pick)]);
        ++load[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])];
      }
      // Undo the swaps, last first: order is the identity again in O(k), not O(E), per token.
      for (int j = p.top_k - 1; j >= 0; --j)
        std::swap(order[static_cast<std::size_t>(j)], order[static_cast<std::size_t>(picks[static_cast<std::size_t>(j)])]);
    }
    GroupedCost g(model);
    for (int64_t rows : load) g.add(rows);
    const GroupedCost::Terms terms = g.terms(part);
    const int64_t row_tiles = g.launch_row_tiles();
    const auto steps = [&](int64_t col_tiles, int64_t k_dim) {
      const int64_t tiles = row_tiles * col_tiles;
      return static_cast<double>((tiles + hw.sm_count - 1) / hw.sm_count) *
             static_cast<double>((k_dim + kPublishedKStep - 1) / kPublishedKStep);
    };
    if (part != GemmPart::down) t.k_steps += steps(model.col_tiles_up, p.k);
    if (part != GemmPart::up) t.k_steps += steps(model.col_tiles_down, p.n);
    t.memory_s += terms.memory_s;
    t.compute_s += terms.compute_s;
    t.ideal_compute_s += static_cast<double>(g.rows()) * model.flops_per_row * flop_share / model.peak_flops_per_s;
    t.active_experts += static_cast<double>(g.experts());
  }
  const double draws = kPublishedDraws;
  t.memory_s /= draws;
  t.compute_s /= draws;
  t.ideal_compute_s /= draws;
  t.active_experts /= draws;
  t.k_steps /= draws;
  return t;
}

double published_time_s(const PublishedTerms& t, const PublishedFit& fit, double overlap) {
  return t.kernels * fit.launch_overhead_s +
         std::max(t.k_steps * fit.k_step_s,
                  combine_terms(t.memory_s / fit.efficiency_bw, t.compute_s / fit.efficiency_flops, overlap));
}

PublishedFit fit_published(const std::vector<PublishedSample>& samples, bool fit_k_step) {
  MOESIM_REQUIRE(!samples.empty(), "a fit needs at least one published point");
  std::vector<double> log_measured;
  for (const PublishedSample& s : samples) log_measured.push_back(std::log(s.measured_s));
  const auto loss = [&](double log_bw, double log_flops, double launch_s, double step_s) {
    PublishedFit f;
    f.efficiency_bw = std::exp(log_bw);
    f.efficiency_flops = std::exp(log_flops);
    f.launch_overhead_s = launch_s;
    f.k_step_s = step_s;
    double sum = 0;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const double d = std::log(published_time_s(samples[i].terms, f, samples[i].overlap)) - log_measured[i];
      sum += d * d;
    }
    return sum;
  };
  // Grid: log efficiencies over [log 0.02, 0] in 24 steps, launch 0..48 us in 4 us steps, the K step
  // 0..2 us in 0.2 us steps; then 5 rounds of a 7^4 grid at a third of the step around the best. Scanned
  // from the highest efficiencies, the lowest launch and K step, so a flat direction keeps those (a term
  // no point binds stays at its ideal).
  const double lo = std::log(0.02), kMaxLaunch = 50e-6, kMaxStep = fit_k_step ? 4e-6 : 0.0;
  double step = -lo / 24.0, launch_step = 4e-6, k_step = 0.2e-6;
  double best = HUGE_VAL, best_bw = 0, best_flops = 0, best_launch = 0, best_k = 0;
  for (int i = 24; i >= 0; --i)
    for (int j = 24; j >= 0; --j)
      for (int l = 0; l <= 12; ++l)
        for (int q = 0; q <= (fit_k_step ? 10 : 0); ++q) {
          const double v = loss(lo + i * step, lo + j * step, l * launch_step, q * k_step);
          if (v < best) best = v, best_bw = lo + i * step, best_flops = lo + j * step, best_launch = l * launch_step,
                        best_k = q * k_step;
        }
  for (int round = 0; round < 5; ++round) {
    step /= 3.0;
    launch_step /= 3.0;
    k_step /= 3.0;
    const double c_bw = best_bw, c_flops = best_flops, c_launch = best_launch, c_k = best_k;
    for (int i = 3; i >= -3; --i)
      for (int j = 3; j >= -3; --j)
        for (int l = -3; l <= 3; ++l)
          for (int q = -3; q <= 3; ++q) {
            const double a = std::clamp(c_bw + i * step, lo, 0.0), b = std::clamp(c_flops + j * step, lo, 0.0);
            const double c = std::clamp(c_launch + l * launch_step, 0.0, kMaxLaunch);
            const double d = std::clamp(c_k + q * k_step, 0.0, kMaxStep);
            const double v = loss(a, b, c, d);
            if (v < best) best = v, best_bw = a, best_flops = b, best_launch = c, best_k = d;
          }
  }
  PublishedFit fit;
  fit.efficiency_bw = std::exp(best_bw);
  fit.efficiency_flops = std::exp(best_flops);
  fit.launch_overhead_s = best_launch;
  fit.k_step_s = best_k;
  fit.points = static_cast<int>(samples.size());
  return fit;
}

double column_s(const PublishedRow& r, PublishedColumn c) {
  switch (c) {
    case PublishedColumn::ideal: return r.ideal_s;
    case PublishedColumn::quantized: return r.quantized_s;
    case PublishedColumn::calibrated: return r.calibrated_s;
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
  return s;
}

PublishedValidation validate_published(const std::vector<PublishedTable>& tables) {
  PublishedValidation v;
  std::vector<std::vector<PublishedSample>> samples(tables.size());
  for (std::size_t t = 0; t < tables.size(); ++t) {
    PublishedTableResult res;
    res.table = tables[t];
    res.table.points.clear();
    MOESIM_REQUIRE(!tables[t].points.empty(), "a published table has no points");
    res.gpu = tables[t].points.front().gpu;
    HardwareRef ref;
    ref.name = res.gpu;
    const HardwareProfile hw = load_hardware_profile(ref, "");
    res.profile_digest = hardware_digest(hw);
    for (const PublishedPoint& p : tables[t].points) {
      if (p.gpu != res.gpu)
        throw InputError(tables[t].origin + ":" + std::to_string(p.line) + ": gpu: expected '" + res.gpu +
                         "' as on the table's first row (one GPU per table), got '" + p.gpu + "'");
      PublishedRow row;
      row.table = static_cast<int>(t);
      row.point = p;
      try {
        row.terms = published_terms(p, hw);
      } catch (const Error& e) {  // e.g. a dtype the GPU has no peak for: name the row
        throw InputError(tables[t].origin + ":" + std::to_string(p.line) + ": " + e.what());
      }
      const double launches_s = row.terms.kernels * hw.launch_overhead_s;
      row.ideal_s = std::max(row.terms.memory_s, row.terms.ideal_compute_s);
      row.quantized_s = launches_s + std::max(row.terms.memory_s, row.terms.compute_s);
      row.calibrated_s = launches_s + combine_terms(row.terms.memory_s / hw.efficiency_bw,
                                                    row.terms.compute_s / hw.efficiency_flops,
                                                    hw.memory_compute_overlap);
      samples[t].push_back({row.terms, p.measured_s, hw.memory_compute_overlap});
      v.rows.push_back(std::move(row));
    }
    v.tables.push_back(std::move(res));
  }
  // Leave one table out: fit on every other table. The fitted figures are fractions of each GPU's own
  // peaks and per-kernel costs, so tables of other GPUs inform them; one table of a GPU alone (a single
  // harness, kernel config and batch range) pins four figures poorly.
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    PublishedTableResult& res = v.tables[t];
    std::vector<PublishedSample> train;
    for (std::size_t o = 0; o < v.tables.size(); ++o) {
      if (o == t) continue;
      train.insert(train.end(), samples[o].begin(), samples[o].end());
      res.fitted_on.push_back(v.tables[o].table.name);
    }
    res.held_out_basis = train.empty() ? "none" : "every other table";
    if (!train.empty()) res.fit = fit_published(train);
  }
  std::vector<std::vector<double>> overall(4);
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    std::vector<std::vector<double>> errors(4);
    for (PublishedRow& row : v.rows) {
      if (row.table != static_cast<int>(t)) continue;
      const PublishedTableResult& res = v.tables[t];
      row.held_out_s = res.fitted_on.empty() ? 0.0 : published_time_s(row.terms, res.fit, samples[t].front().overlap);
      for (int c = 0; c < 4; ++c) {
        if (kPublishedColumns[c] == PublishedColumn::held_out && res.fitted_on.empty()) continue;
        errors[c].push_back(column_error(row, kPublishedColumns[c]));
        overall[c].push_back(errors[c].back());
      }
    }
    for (int c = 0; c < 4; ++c) v.tables[t].errors[c] = summarize_errors(errors[c]);
  }
  for (int c = 0; c < 4; ++c) v.overall[c] = summarize_errors(overall[c]);
  return v;
}

std::string published_profile_yaml(const std::vector<PublishedTable>& tables, const std::string& base_yaml,
                                   const std::string& name) {
  MOESIM_REQUIRE(!tables.empty(), "a published fit needs tables");
  const std::string gpu = tables.front().points.front().gpu;
  std::vector<PublishedSample> samples;
  std::string names;
  HardwareRef ref;
  ref.name = gpu;
  const HardwareProfile hw = load_hardware_profile(ref, "");
  for (const PublishedTable& t : tables) {
    for (const PublishedPoint& p : t.points) {
      if (p.gpu != gpu)
        throw InputError(t.origin + ":" + std::to_string(p.line) + ": gpu: expected '" + gpu +
                         "' (one GPU per fit, as the first table's), got '" + p.gpu + "'");
      samples.push_back({published_terms(p, hw), p.measured_s, hw.memory_compute_overlap});
    }
    names += (names.empty() ? "" : ", ") + t.name;
  }
  // The profile carries three figures; the cost model has no K-step floor, so the fit holds it at 0.
  const PublishedFit fit = fit_published(samples, false);
  const auto num = [](double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    return std::string(buf);
  };
  YAML::Node root = YAML::Load(base_yaml);
  const std::string how = "moesim calibrate --from-published: least-squares fit (log time) to " +
                          std::to_string(fit.points) + " published points of " + names;
  root["name"] = name;
  root["source"] = "built-in profile " + gpu + " with efficiency_bw, efficiency_flops and launch_overhead_us fitted by " + how;
  root["efficiency_bw"] = YAML::Load(num(fit.efficiency_bw, 4));
  root["efficiency_flops"] = YAML::Load(num(fit.efficiency_flops, 4));
  root["launch_overhead_us"] = YAML::Load(num(fit.launch_overhead_s * 1e6, 4));
  root["calibrated"] = true;
  if (!root["sources"] || !root["sources"].IsMap()) root["sources"] = YAML::Node(YAML::NodeType::Map);
  root["sources"]["efficiency_bw"] = how;
  root["sources"]["efficiency_flops"] = how;
  root["sources"]["launch_overhead_us"] = how + " (the fixed cost of each kernel of the timed scope)";
  YAML::Emitter out;
  out << root;
  std::ostringstream os;
  os << "# " << name << ": " << gpu << " with three figures fitted to published fused-MoE kernel times ("
     << names << ").\n# Regenerate: moesim calibrate --from-published FILES --name " << name << "\n"
     << out.c_str() << "\n";
  const std::string text = os.str();
  parse_hardware_profile(text, name + ".yaml");  // loads as written, or this is a bug reported before writing
  return text;
}

}  // namespace moesim
