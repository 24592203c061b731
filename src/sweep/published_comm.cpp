// Published dispatch/combine measurements: the communication-table reader, each row modeled by the all-to-all
// of `run` (src/cost/all_to_all.hpp), the per-family fit and the leave-one-table-out validation (see
// published_comm.hpp). Deterministic. Host only. Covered by tests/sweep/published_comm_test.cpp.
#include "src/sweep/published_comm.hpp"
#include "src/sweep/table_cells.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "src/common/error.hpp"

namespace moesim {

const char* const kCommHeader =
    "phase,gpu,kernel,ep,tokens_per_rank,hidden,top_k,experts,dtype,routing,measured_us,source,notes,node_limit,"
    "devices_per_node";

const char* to_string(CommPhase p) { return p == CommPhase::dispatch ? "dispatch" : "combine"; }

namespace {

}  // namespace

CommTable parse_comm_csv(const std::string& text, const std::string& origin) {
  CommTable table;
  table.origin = origin;
  table.name = std::filesystem::path(origin).stem().string();
  std::istringstream in(text);
  std::string line, gpu;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const TableCell c{origin, number};
    if (number == 1) {
      if (line != kCommHeader) c.fail("header", std::string("the columns ") + kCommHeader, line.substr(0, 80));
      continue;
    }
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv_line(line);
    if (f.size() != 15) c.fail("row", "15 fields", std::to_string(f.size()) + " fields");
    CommPoint p;
    p.line = number;
    static const CommPhase kPhases[] = {CommPhase::dispatch, CommPhase::combine};
    p.phase = table_choice(c, "phase", f[0], kPhases);
    if (gpu.empty()) {
      table.hardware = published_table_profile(origin, number, f[1], table.profile_ref);
      gpu = f[1];
    } else if (f[1] != gpu) {
      c.fail("gpu", "'" + gpu + "' as on the table's first row (one GPU per table)", f[1]);
    }
    static const A2aKernel kKernels[] = {A2aKernel::simple, A2aKernel::normal, A2aKernel::low_latency};
    p.kernel = table_choice(c, "kernel", f[2], kKernels);
    p.ep = static_cast<int>(c.integer("ep", f[3], 2, kCommMaxDevices));
    p.tokens_per_rank = c.integer("tokens_per_rank", f[4], 1, kPublishedMaxBatch);
    p.hidden = c.integer("hidden", f[5], 1, int64_t(1) << 20);
    p.experts = static_cast<int>(c.integer("experts", f[7], 1, 65536));
    p.top_k = static_cast<int>(c.integer("top_k", f[6], 1, std::min(p.experts, kPublishedMaxTopK)));
    static const A2aDtype kDtypes[] = {A2aDtype::fp8, A2aDtype::bf16, A2aDtype::fp16, A2aDtype::fp32};
    p.dtype = table_choice(c, "dtype", f[8], kDtypes);
    if (f[9] == "uniform_random") p.fanout = A2aFanout::random;
    else if (f[9] == "balanced") p.fanout = A2aFanout::spread;
    else c.fail("routing", "uniform_random or balanced", f[9]);
    const double us = whole_number(f[10]);
    if (!std::isfinite(us) || us <= 0 || us > 1e9)
      c.fail("measured_us", "a positive time in microseconds", f[10]);
    p.measured_s = us * 1e-6;
    p.source = f[11];
    if (p.source.empty()) c.fail("source", "the measurement's source", "");
    p.notes = f[12];
    if (!f[13].empty()) p.node_limit = static_cast<int>(c.integer("node_limit", f[13], 1, kCommMaxDevices));
    if (!f[14].empty())
      p.devices_per_node = static_cast<int>(c.integer("devices_per_node", f[14], 1, kCommMaxDevices));
    if (!table.points.empty() && p.kernel != table.points.front().kernel)
      c.fail("kernel", std::string("'") + to_string(table.points.front().kernel) + "' as on the table's first row (one kernel per table)", f[2]);
    try {
      comm_model_input(p, table.hardware);
    } catch (const ConfigError& e) {
      c.fail("gpu", "a profile with the links " + std::to_string(p.ep) + " devices need (" + e.what() + ")", f[1]);
    }
    table.points.push_back(std::move(p));
  }
  if (number == 0) throw InputError(origin + ": expected the header line " + std::string(kCommHeader) + ", got an empty file");
  if (table.points.empty()) throw InputError(origin + ": expected at least one measurement row, got none");
  return table;
}

std::vector<CommTable> load_published_comm(const std::string& spec) {
  std::vector<CommTable> tables;
  std::size_t points = 0;
  for (const PublishedFile& f : published_files(spec)) {
    if (!is_comm_table(f.text)) continue;
    tables.push_back(parse_comm_csv(f.text, f.origin));
    points += tables.back().points.size();
  }
  if (tables.size() > kPublishedMaxTables || points > kPublishedMaxPoints) {
    throw InputError("--published " + spec + ": expected at most " + std::to_string(kPublishedMaxTables) +
                     " communication tables and " + std::to_string(kPublishedMaxPoints) + " points, got " +
                     std::to_string(tables.size()) + " tables and " + std::to_string(points) + " points");
  }
  std::sort(tables.begin(), tables.end(), [](const CommTable& a, const CommTable& b) { return a.name < b.name; });
  return tables;
}

CommModelInput comm_model_input(const CommPoint& p, const HardwareProfile& hw) {
  CommModelInput in;
  in.hardware = hw;
  if (p.devices_per_node > 0) in.hardware.devices_per_node = p.devices_per_node;
  A2aTraffic& t = in.traffic;
  t.device_assignments.assign(p.ep, p.tokens_per_rank * p.top_k);
  t.num_tokens = p.tokens_per_rank * p.ep;
  t.top_k = p.top_k;
  t.num_experts = p.experts;
  t.node_limit = p.node_limit;
  t.fanout = p.fanout;
  const double bytes = a2a_copy_bytes(p.dtype, Dtype::bf16, p.hidden);
  t.dispatch_bytes = t.combine_bytes = bytes;
  in.per_node = a2a_devices_per_node(in.hardware, p.ep);
  in.copies = a2a_copies(p.kernel, t, in.per_node);
  return in;
}

namespace {

ErrorSummary summarize(const std::vector<double>& e) { return summarize_errors(e); }

}  // namespace

double comm_time_s(const CommPoint& p, const CommModelInput& in, const A2aFigures& figures) {
  const A2aCost c = a2a_cost_of(in.hardware, p.kernel, in.copies, in.per_node, in.traffic.dispatch_bytes,
                                in.traffic.combine_bytes, figures);
  return p.phase == CommPhase::dispatch ? c.dispatch.time_s : c.combine.time_s;
}

CommFit fit_comm(const std::vector<CommSample>& samples) {
  MOESIM_REQUIRE(!samples.empty(), "a communication fit needs points");
  // The four figures: dispatch floor, combine floor (us), scale-up and scale-out efficiency.
  const double lo[4] = {0, 0, 0.05, 0.05}, hi[4] = {500, 500, 1, 1};
  const auto loss = [&](const double* x) {
    const A2aFigures f{x[0] * 1e-6, x[1] * 1e-6, x[2], x[3]};
    double sum = 0;
    for (const CommSample& s : samples) {
      const double r = std::log(comm_time_s(s.point, s.input, f) / s.point.measured_s);
      sum += s.weight * r * r;
    }
    for (int i = 0; i < 2; ++i) {
      const double d = (x[i] - kCommPriorFloor_us) / kCommPriorFloor_us;
      sum += kCommPriorWeight * d * d;
    }
    return sum;
  };
  double best[4] = {kCommPriorFloor_us, kCommPriorFloor_us, 0.8, 0.9}, best_loss = loss(best);
  // Coordinate grids, each round a finer grid around the best point, until the steps are tiny.
  double span[4] = {250, 250, 0.5, 0.5};
  for (int round = 0; round < 24; ++round) {
    for (int axis = 0; axis < 4; ++axis) {
      const double centre = best[axis];
      for (int i = -8; i <= 8; ++i) {
        double x[4] = {best[0], best[1], best[2], best[3]};
        x[axis] = std::min(hi[axis], std::max(lo[axis], centre + span[axis] * i / 8.0));
        const double l = loss(x);
        if (l < best_loss) {
          best_loss = l;
          std::copy(x, x + 4, best);
        }
      }
    }
    for (double& s : span) s *= 0.6;
  }
  CommFit fit;
  fit.figures = {best[0] * 1e-6, best[1] * 1e-6, best[2], best[3]};
  fit.points = static_cast<int>(samples.size());
  return fit;
}

double CommRow::error(PublishedColumn c) const {
  const double m = c == PublishedColumn::held_out ? held_out_s : model_s;
  return m / point.measured_s - 1.0;
}

namespace {

std::vector<CommSample> samples_of(const std::vector<CommTable>& tables, A2aKernel kernel, int skip) {
  std::vector<CommSample> out;
  for (int t = 0; t < static_cast<int>(tables.size()); ++t) {
    if (t == skip) continue;
    int n = 0;
    for (const CommPoint& p : tables[t].points) n += p.kernel == kernel ? 1 : 0;
    for (const CommPoint& p : tables[t].points) {
      if (p.kernel != kernel) continue;
      out.push_back({p, comm_model_input(p, tables[t].hardware), 1.0 / n});
    }
  }
  return out;
}

}  // namespace

CommValidation validate_comm(const std::vector<CommTable>& tables) {
  CommValidation v;
  for (A2aKernel k : {A2aKernel::normal, A2aKernel::low_latency}) {
    const std::vector<CommSample> all = samples_of(tables, k, -1);
    if (all.empty()) continue;
    CommFamily fam;
    fam.kernel = k;
    fam.fit = fit_comm(all);
    for (const CommTable& t : tables)
      if (std::any_of(t.points.begin(), t.points.end(), [k](const CommPoint& p) { return p.kernel == k; }))
        fam.tables.push_back(t.name);
    v.families.push_back(fam);
  }
  std::vector<double> model_all, held_all;
  std::map<A2aKernel, std::pair<std::vector<double>, std::vector<double>>> by_family;
  for (int t = 0; t < static_cast<int>(tables.size()); ++t) {
    CommTableResult r;
    r.table = tables[t];
    r.table.points.clear();
    r.gpu = tables[t].hardware.name;
    r.kernel = tables[t].points.front().kernel;
    // The held-out figures: the family's fit over every other table (none: the shipped figures).
    const std::vector<CommSample> others = samples_of(tables, r.kernel, t);
    const bool fitted = r.kernel != A2aKernel::simple && !others.empty();
    r.held_out_fit.figures = a2a_figures(tables[t].hardware, r.kernel);
    if (fitted) r.held_out_fit = fit_comm(others);
    r.held_out_basis = fitted ? "the family's other tables" : "none";
    std::vector<double> model_e, held_e;
    for (const CommPoint& p : tables[t].points) {
      const CommModelInput in = comm_model_input(p, tables[t].hardware);
      CommRow row;
      row.table = t;
      row.point = p;
      row.model_s = comm_time_s(p, in, a2a_figures(in.hardware, p.kernel));
      row.held_out_s = comm_time_s(p, in, r.held_out_fit.figures);
      model_e.push_back(row.error(PublishedColumn::model));
      held_e.push_back(row.error(PublishedColumn::held_out));
      v.rows.push_back(row);
    }
    r.model = summarize(model_e);
    r.held_out = summarize(held_e);
    model_all.insert(model_all.end(), model_e.begin(), model_e.end());
    held_all.insert(held_all.end(), held_e.begin(), held_e.end());
    auto& fam = by_family[r.kernel];
    fam.first.insert(fam.first.end(), model_e.begin(), model_e.end());
    fam.second.insert(fam.second.end(), held_e.begin(), held_e.end());
    v.tables.push_back(std::move(r));
  }
  for (CommFamily& f : v.families) {
    f.model = summarize(by_family[f.kernel].first);
    f.held_out = summarize(by_family[f.kernel].second);
  }
  v.model = summarize(model_all);
  v.held_out = summarize(held_all);
  return v;
}

}  // namespace moesim
