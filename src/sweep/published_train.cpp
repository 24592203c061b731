// Published training-step tables against the training step (see published_train.hpp).
#include "src/sweep/published_train.hpp"
#include "src/sweep/table_cells.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "src/common/embedded.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/train/train_fit.hpp"
#include "src/train/train_input.hpp"
#include "src/train/train_routing.hpp"

namespace moesim {

const char* const kTrainingHeader =
    "model,gpu,gpus,devices_per_node,tp,pp,vpp,ep,etp,cp,seq_len,global_batch,micro_batch,precision,recompute,"
    "dispatcher,routing,capacity_factor,quantity,measured,unit,source,notes";

namespace {

namespace fs = std::filesystem;
constexpr const char* kTrainingDir = "data/training-step/";
constexpr int kRequiredColumns = 23;
// The fit's coordinate search: sweeps over the figures, golden-section steps per figure (0.618^16: 5e-4 of a
// figure's range).
constexpr int kFitSweeps = 6, kFitSteps = 16;

// An integer cell from 1 to max; an empty cell is `empty` when that is > 0.
int64_t cell_int(const TableCell& w, const char* column, const std::string& s, int64_t max, int64_t empty = 0) {
  if (s.empty() && empty > 0) return empty;
  return w.integer(column, s, 1, max, empty > 0);
}

template <class E, std::size_t N>
E cell_enum(const TableCell& w, const char* column, const std::string& s, const E (&values)[N], const std::string& empty_as) {
  const std::string v = s.empty() ? empty_as : s;
  std::string list;
  for (E e : values) {
    if (v == to_string(e)) return e;
    list += (list.empty() ? "" : ", ") + std::string(to_string(e));
  }
  w.fail(column, "one of " + list + (empty_as.empty() ? "" : " (empty: " + empty_as + ")"), s);
}

}  // namespace

const char* to_string(TrainQuantity q) {
  switch (q) {
    case TrainQuantity::step_s: return "step_s";
    case TrainQuantity::tokens_per_s_per_gpu: return "tokens_per_s_per_gpu";
    case TrainQuantity::tflops_per_gpu: return "tflops_per_gpu";
    case TrainQuantity::mfu: return "mfu";
    case TrainQuantity::a2a_ms: return "a2a_ms";
    case TrainQuantity::experts_ms: return "experts_ms";
  }
  return "?";
}

const char* unit_of(TrainQuantity q) {
  switch (q) {
    case TrainQuantity::step_s: return "s";
    case TrainQuantity::tokens_per_s_per_gpu: return "tokens/s";
    case TrainQuantity::tflops_per_gpu: return "TFLOP/s";
    case TrainQuantity::mfu: return "%";
    case TrainQuantity::a2a_ms:
    case TrainQuantity::experts_ms: return "ms";
  }
  return "?";
}

TrainingTable parse_training_csv(const std::string& text, const std::string& origin) {
  TrainingTable table;
  table.origin = origin;
  table.name = fs::path(origin).stem().string();
  std::istringstream in(text);
  std::string line;
  int number = 0;
  std::size_t columns = 0;
  int fitted_column = -1, ep_overlap_column = -1;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const TableCell w{origin, number};
    if (number == 1) {
      if (line.rfind(kTrainingHeader, 0) != 0 ||
          (line.size() > std::string(kTrainingHeader).size() && line[std::string(kTrainingHeader).size()] != ','))
        w.fail("header", std::string("the columns ") + kTrainingHeader + " (more may follow notes)", line.substr(0, 120));
      const std::vector<std::string> head = split_csv_line(line);
      columns = head.size();
      for (std::size_t i = kRequiredColumns; i < head.size(); ++i)
        if (head[i] == "fitted") fitted_column = static_cast<int>(i);
        else if (head[i] == "ep_overlap") ep_overlap_column = static_cast<int>(i);
      continue;
    }
    if (line.empty()) continue;
    if (table.points.size() >= kTrainingMaxRows)
      w.fail("row", "at most " + std::to_string(kTrainingMaxRows) + " rows in a table", "more");
    const std::vector<std::string> f = split_csv_line(line);
    if (f.size() != columns) w.fail("row", std::to_string(columns) + " fields", std::to_string(f.size()) + " fields");
    TrainingPoint p;
    p.line = number;
    p.model = f[0];
    p.gpu = f[1];
    TrainConfig& t = p.train;
    t.gpus = static_cast<int>(cell_int(w, "gpus", f[2], 1 << 20));
    p.devices_per_node = f[3].empty() ? 0 : static_cast<int>(cell_int(w, "devices_per_node", f[3], 1 << 20));
    t.tp = static_cast<int>(cell_int(w, "tp", f[4], 1 << 20, 1));
    t.pp = static_cast<int>(cell_int(w, "pp", f[5], 4096, 1));
    t.vpp = static_cast<int>(cell_int(w, "vpp", f[6], 4096, 1));
    t.ep = static_cast<int>(cell_int(w, "ep", f[7], 65536, 1));
    t.etp = static_cast<int>(cell_int(w, "etp", f[8], 1 << 20, 1));
    t.cp = static_cast<int>(cell_int(w, "cp", f[9], 1 << 20, 1));
    t.seq_len = cell_int(w, "seq_len", f[10], int64_t{1} << 24);
    t.global_batch = cell_int(w, "global_batch", f[11], int64_t{1} << 30);
    t.micro_batch = cell_int(w, "micro_batch", f[12], int64_t{1} << 30);
    static const TrainPrecision kPrecisions[] = {TrainPrecision::bf16, TrainPrecision::fp8, TrainPrecision::fp8_blockwise,
                                                 TrainPrecision::mxfp8};
    t.precision = cell_enum(w, "precision", f[13], kPrecisions, "");
    static const Recompute kRecomputes[] = {Recompute::none, Recompute::selective, Recompute::moe, Recompute::full};
    t.recompute = cell_enum(w, "recompute", f[14], kRecomputes, "none");
    static const Dispatcher kDispatchers[] = {Dispatcher::alltoall, Dispatcher::deepep, Dispatcher::hybridep};
    t.dispatcher = cell_enum(w, "dispatcher", f[15], kDispatchers, "");
    const std::optional<TrainRouting> r = parse_train_routing(f[16]);
    if (!r)
      w.fail("routing", "forced_balance, model, power_law:ALPHA (ALPHA in (0, 10], not 1) or rank_overload:X (X >= 1)",
             f[16]);
    t.routing = *r;
    if (f[17] == "dropless") {
      p.capacity_factor = 0;
    } else {
      const double cf = whole_number(f[17]);
      if (!std::isfinite(cf) || cf <= 0 || cf > 1000) w.fail("capacity_factor", "a number in (0, 1000] or dropless", f[17]);
      p.capacity_factor = cf;
    }
    static const TrainQuantity kQuantities[] = {TrainQuantity::step_s, TrainQuantity::tokens_per_s_per_gpu,
                                                TrainQuantity::tflops_per_gpu, TrainQuantity::mfu,
                                                TrainQuantity::a2a_ms, TrainQuantity::experts_ms};
    p.quantity = cell_enum(w, "quantity", f[18], kQuantities, "");
    p.measured = whole_number(f[19]);
    if (!std::isfinite(p.measured) || p.measured <= 0 || p.measured > 1e12)
      w.fail("measured", "a positive number", f[19]);
    if (f[20] != unit_of(p.quantity))
      w.fail("unit", std::string(unit_of(p.quantity)) + " for quantity " + to_string(p.quantity), f[20]);
    p.source = f[21];
    if (p.source.empty()) w.fail("source", "the measurement's source", "");
    p.notes = f[22];
    if (fitted_column >= 0) {
      const std::string& c = f[static_cast<std::size_t>(fitted_column)];
      if (c != "0" && c != "1") w.fail("fitted", "1 (the fits may see the row) or 0 (validation only)", c);
      p.fitted = c == "1";
    }
    if (ep_overlap_column >= 0) {
      const std::string& c = f[static_cast<std::size_t>(ep_overlap_column)];
      if (c != "0" && c != "1" && !c.empty())
        w.fail("ep_overlap", "1 (the all-to-all under another micro-batch's compute), 0 or empty (0)", c);
      p.train.ep_overlap = c == "1";
    }
    table.points.push_back(std::move(p));
  }
  if (number == 0) throw InputError(origin + ": expected the header line " + std::string(kTrainingHeader) + ", got an empty file");
  if (table.points.empty()) throw InputError(origin + ": expected at least one measurement row, got none");
  return table;
}

std::vector<TrainingTable> load_training_tables(const std::string& spec) {
  std::vector<TrainingTable> tables;
  if (spec == "all") {
    for (const auto& [path, text] : embedded_files())
      if (path.rfind(kTrainingDir, 0) == 0 && fs::path(path).extension() == ".csv")
        tables.push_back(parse_training_csv(text, path));
  } else {
    for (const PublishedFile& f : published_files(spec))
      if (is_training_table(f.text)) tables.push_back(parse_training_csv(f.text, f.origin));
  }
  if (tables.size() > kTrainingMaxTables)
    throw InputError("--published " + spec + ": expected at most " + std::to_string(kTrainingMaxTables) +
                     " training tables, got " + std::to_string(tables.size()));
  std::sort(tables.begin(), tables.end(), [](const TrainingTable& a, const TrainingTable& b) { return a.name < b.name; });
  return tables;
}

// One row's inputs, resolved once: the profile, the model, the layout and both routings' loads.
struct TrainingSample {
  int table = 0;
  const TrainingPoint* point = nullptr;
  HardwareProfile hw;
  TrainShape shape;
  TrainLayout layout;
  ExpertRows rows;
  TrainLoads actual, reference;
  bool fp8 = false;
};

namespace {

// The routers of a validation, one per model and capacity factor (the key), so that rows of one setup (a time row
// and a TFLOP/s row; a forced-balance row and a real router's) route their segments once.
using Routers = std::map<std::string, std::unique_ptr<TrainRouter>>;

std::unique_ptr<TrainingSample> make_sample(const TrainingTable& table, int t, const TrainingPoint& p, Routers& routers) {
  const TableCell w{table.origin, p.line};
  auto s = std::make_unique<TrainingSample>();
  s->table = t;
  s->point = &p;
  std::string ref;
  s->hw = published_table_profile(table.origin, p.line, p.gpu, ref);
  if (p.devices_per_node > 0) s->hw.devices_per_node = p.devices_per_node;
  Experiment e = table_model(w, p.model, kTrainingDir);
  e.train = p.train;
  e.router.capacity_factor = p.capacity_factor;
  e.router.layout = Layout::dropless;
  s->shape = train_shape(e.model);
  s->fp8 = p.train.precision != TrainPrecision::bf16;
  try {
    s->layout = train_layout(e.train, s->shape, s->hw.devices_per_node);
    const std::string key = fs::path(table.origin).parent_path().string() + "|" + p.model + "|" +
                            std::to_string(p.capacity_factor);
    std::unique_ptr<TrainRouter>& router = routers[key];
    if (!router) router = std::make_unique<TrainRouter>(e);
    s->actual = router->loads(p.train.routing, s->layout);
    s->reference = router->reference(s->layout);
    // What the profile cannot run (a precision without its peak, MXFP8 on Hopper, no inter-node link) is the
    // row's error, found once here rather than inside a fit.
    model_train_step(s->hw, s->shape, s->layout, s->rows, s->actual, s->reference, TrainFigures::fitted());
  } catch (const ConfigError& ex) {
    // The layout's keys are the table's columns: train.ep is the ep column.
    std::string what = ex.what();
    if (what.rfind("train.", 0) == 0) what = what.substr(6);
    throw InputError(table.origin + ":" + std::to_string(p.line) + ": " + what);
  }
  return s;
}

double predict(const TrainingSample& s, const TrainFigures& f, TrainStep* step = nullptr) {
  const TrainStep st = model_train_step(s.hw, s.shape, s.layout, s.rows, s.actual, s.reference, f);
  if (step) *step = st;
  switch (s.point->quantity) {
    case TrainQuantity::step_s: return st.step_s;
    case TrainQuantity::tokens_per_s_per_gpu: return st.tokens_per_s_per_gpu;
    case TrainQuantity::tflops_per_gpu: return st.tflops_per_gpu;
    case TrainQuantity::mfu: return st.mfu * 100;
    case TrainQuantity::a2a_ms: return st.a2a_forward_s * 1e3;
    case TrainQuantity::experts_ms: return st.experts_forward_s * 1e3;
  }
  return 0;
}

// Time ratios go with the quantity: a rate's ratio is inverted, so that every ratio reads as time (>1: slower).
bool is_rate(TrainQuantity q) {
  return q == TrainQuantity::tokens_per_s_per_gpu || q == TrainQuantity::tflops_per_gpu || q == TrainQuantity::mfu;
}

// Two rows of one setup: every column but the quantity, the measurement, its unit and the notes alike.
bool same_setup(const TrainingPoint& a, const TrainingPoint& b) {
  Experiment x, y;
  x.train = a.train;
  y.train = b.train;
  return a.model == b.model && a.gpu == b.gpu && a.devices_per_node == b.devices_per_node &&
         a.capacity_factor == b.capacity_factor && a.source == b.source &&
         experiment_to_yaml(x) == experiment_to_yaml(y);
}

double loss(const std::vector<const TrainingSample*>& samples, const std::map<int, double>& weight,
            const TrainFigures& f) {
  double sum = 0;
  for (const TrainingSample* s : samples) {
    const double r = std::log(predict(*s, f) / s->point->measured);
    sum += weight.at(s->table) * r * r;
  }
  return sum;
}

}  // namespace

TrainFigures fit_training(const std::vector<const TrainingSample*>& samples, int* rows_fitted) {
  // The search starts from fixed figures, not from the shipped ones, so that a refit never depends on what was
  // shipped before (the test that holds TrainFit to the fit refits from here).
  TrainFigures f = TrainFigures::fitted();
  f.gemm_efficiency_bf16 = f.gemm_efficiency_fp8 = f.gemm_efficiency_mxfp8 = 0.5;
  f.layer_overhead_s = 0;
  f.ep_overlap_fraction = 1;
  if (rows_fitted) *rows_fitted = static_cast<int>(samples.size());
  if (samples.empty()) return f;
  std::map<int, double> count, weight;
  bool any[3] = {false, false, false};  // bf16, fp8, mxfp8 rows
  bool overlap = false;                 // a row with train.ep_overlap
  for (const TrainingSample* s : samples) {
    count[s->table] += 1;
    overlap = overlap || (s->point->train.ep_overlap && s->point->train.ep > 1);
    const TrainPrecision p = s->point->train.precision;
    any[p == TrainPrecision::bf16 ? 0 : p == TrainPrecision::mxfp8 ? 2 : 1] = true;
  }
  for (const auto& [t, n] : count) weight[t] = 1.0 / n;
  // The figures, their ranges and whether a row reads them: the bf16 efficiency is read by every row (the output
  // layer runs in bf16); an fp8 efficiency no row reads takes the bf16 one.
  struct Figure {
    double* value;
    double lo, hi;
    bool log_scale, used;
  };
  const Figure figures[] = {{&f.gemm_efficiency_bf16, 0.05, 1.0, true, true},
                            {&f.gemm_efficiency_fp8, 0.05, 1.0, true, any[1]},
                            {&f.gemm_efficiency_mxfp8, 0.05, 1.0, true, any[2]},
                            {&f.layer_overhead_s, 0.0, kMaxLayerOverhead_s, false, true},
                            {&f.ep_overlap_fraction, 0.0, 1.0, false, overlap}};
  const double phi = (std::sqrt(5.0) - 1) / 2;
  for (int sweep = 0; sweep < kFitSweeps; ++sweep) {
    for (const Figure& g : figures) {
      if (!g.used) continue;
      const auto to_value = [&](double x) { return g.log_scale ? std::exp(x) : x; };
      double a = g.log_scale ? std::log(g.lo) : g.lo, b = g.log_scale ? std::log(g.hi) : g.hi;
      auto at = [&](double x) {
        *g.value = to_value(x);
        return loss(samples, weight, f);
      };
      double x1 = b - phi * (b - a), x2 = a + phi * (b - a);
      double f1 = at(x1), f2 = at(x2);
      for (int it = 0; it < kFitSteps; ++it) {
        if (f1 <= f2) {
          b = x2;
          x2 = x1;
          f2 = f1;
          x1 = b - phi * (b - a);
          f1 = at(x1);
        } else {
          a = x1;
          x1 = x2;
          f1 = f2;
          x2 = a + phi * (b - a);
          f2 = at(x2);
        }
      }
      *g.value = to_value(f1 <= f2 ? x1 : x2);
    }
  }
  if (!any[1]) f.gemm_efficiency_fp8 = f.gemm_efficiency_bf16;
  if (!any[2]) f.gemm_efficiency_mxfp8 = f.gemm_efficiency_bf16;
  return f;
}

TrainingValidation validate_training(const std::vector<TrainingTable>& tables) {
  TrainingValidation v;
  std::vector<std::unique_ptr<TrainingSample>> samples;
  Routers routers;
  for (std::size_t t = 0; t < tables.size(); ++t)
    for (const TrainingPoint& p : tables[t].points)
      samples.push_back(make_sample(tables[t], static_cast<int>(t), p, routers));
  // The rows a fit sees: the fitted ones, but a TFLOP/s or MFU row that restates a time row of the same setup (a
  // source's own FLOP count, not a second measurement).
  auto restates_time = [&](const TrainingSample& s) {
    if (!is_rate(s.point->quantity) || s.point->quantity == TrainQuantity::tokens_per_s_per_gpu) return false;
    for (const auto& o : samples)
      if (o->table == s.table && !(is_rate(o->point->quantity) && o->point->quantity != TrainQuantity::tokens_per_s_per_gpu) &&
          same_setup(*o->point, *s.point))
        return true;
    return false;
  };
  auto fitted_except = [&](int skip) {
    std::vector<const TrainingSample*> out;
    for (const auto& s : samples)
      if (s->point->fitted && s->table != skip && !restates_time(*s)) out.push_back(s.get());
    return out;
  };
  v.fit = fit_training(fitted_except(-1), &v.fit_rows);
  const TrainFigures shipped = TrainFigures::fitted();
  std::vector<double> all_model, all_held, forced_model, forced_held;
  for (std::size_t t = 0; t < tables.size(); ++t) {
    TrainingTableResult res;
    res.name = tables[t].name;
    res.origin = tables[t].origin;
    for (const TrainingPoint& p : tables[t].points) res.fitted = res.fitted || p.fitted;
    if (res.fitted) {
      const std::vector<const TrainingSample*> others = fitted_except(static_cast<int>(t));
      res.held_out_fit = fit_training(others);
      res.held_out_basis = others.empty() ? "none (no other fitted table: TrainFit's start)" : "every other fitted table";
    } else {
      res.held_out_fit = shipped;
      res.held_out_basis = "the shipped fit (this table is never fitted)";
    }
    std::vector<double> em, eh;
    for (const auto& s : samples) {
      if (s->table != static_cast<int>(t)) continue;
      TrainingRow row;
      row.table = static_cast<int>(t);
      row.point = *s->point;
      row.model = predict(*s, shipped, &row.step);
      row.held_out = predict(*s, res.held_out_fit);
      em.push_back(row.error(false));
      eh.push_back(row.error(true));
      all_model.push_back(row.error(false));
      all_held.push_back(row.error(true));
      if (row.point.train.routing.kind == TrainRoutingKind::forced_balance) {
        forced_model.push_back(row.error(false));
        forced_held.push_back(row.error(true));
      }
      v.rows.push_back(std::move(row));
    }
    res.model = summarize_errors(em);
    res.held_out = summarize_errors(eh);
    v.tables.push_back(std::move(res));
  }
  v.model = summarize_errors(all_model);
  v.held_out = summarize_errors(all_held);
  v.forced_model = summarize_errors(forced_model);
  v.forced_held_out = summarize_errors(forced_held);
  // Pairs: the same model, GPU, layout, precision, dispatcher, capacity and quantity under forced balance and
  // under another routing.
  for (std::size_t i = 0; i < v.rows.size(); ++i) {
    const TrainingPoint& a = v.rows[i].point;
    if (a.train.routing.kind != TrainRoutingKind::forced_balance) continue;
    for (std::size_t j = 0; j < v.rows.size(); ++j) {
      const TrainingPoint& b = v.rows[j].point;
      if (b.train.routing.kind == TrainRoutingKind::forced_balance || a.quantity != b.quantity) continue;
      TrainingPoint b_forced = b;
      b_forced.train.routing = a.train.routing;
      b_forced.source = a.source;
      if (!same_setup(a, b_forced)) continue;
      RouterPair pr;
      pr.forced = static_cast<int>(i);
      pr.other = static_cast<int>(j);
      const bool rate = is_rate(a.quantity);
      pr.predicted_ratio = rate ? v.rows[i].model / v.rows[j].model : v.rows[j].model / v.rows[i].model;
      pr.measured_ratio = rate ? a.measured / b.measured : b.measured / a.measured;
      v.pairs.push_back(pr);
    }
  }
  return v;
}

}  // namespace moesim
