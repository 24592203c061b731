// The training tables' validation report (see train_validation_report.hpp).
#include "src/report/train_validation_report.hpp"

#include <cstdio>
#include <sstream>

#include "src/common/error.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using nlohmann::json;

std::string pct(double e) { return (e >= 0 ? "+" : "") + text::fixed(100 * e, 1) + "%"; }

std::string layout_cell(const TrainingPoint& p) {
  const TrainConfig& c = p.train;
  std::ostringstream os;
  os << "TP" << c.tp << " PP" << c.pp;
  if (c.vpp > 1) os << "/" << c.vpp;
  os << " EP" << c.ep;
  if (c.cp > 1) os << " CP" << c.cp;
  if (c.etp > 1) os << " ETP" << c.etp;
  os << " mbs" << c.micro_batch << " gbs" << c.global_batch;
  if (c.seq_len != 4096) os << " s" << c.seq_len;
  return os.str();
}

std::string figures_text(const TrainFigures& f) {
  std::ostringstream os;
  os << "GEMM efficiency bf16 " << text::fixed(f.gemm_efficiency_bf16, 4) << ", fp8 " << text::fixed(f.gemm_efficiency_fp8, 4)
     << ", mxfp8 " << text::fixed(f.gemm_efficiency_mxfp8, 4) << "; layer overhead "
     << text::fixed(f.layer_overhead_s * 1e6, 1) << " us; ep_overlap hides " << text::fixed(f.ep_overlap_fraction, 3)
     << " of the all-to-all at most; attention " << text::fixed(f.attention_efficiency, 2) << " (cited)";
  return os.str();
}

json figures_json(const TrainFigures& f) {
  return {{"gemm_efficiency_bf16", f.gemm_efficiency_bf16}, {"gemm_efficiency_fp8", f.gemm_efficiency_fp8},
          {"gemm_efficiency_mxfp8", f.gemm_efficiency_mxfp8}, {"attention_efficiency", f.attention_efficiency},
          {"layer_overhead_s", f.layer_overhead_s}, {"ep_overlap_fraction", f.ep_overlap_fraction}};
}

json summary_json(const ErrorSummary& e) {
  return {{"median_abs_error", e.median_abs}, {"worst_error", e.worst}, {"points", e.points}};
}

std::string table_text(const TrainingValidation& v) {
  std::ostringstream os;
  os << "training tables: one step modeled per row (moesim train's model_train_step); model: the shipped figures "
        "(TrainFit), held_out: figures fitted without the row's table\n";
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    const TrainingTableResult& res = v.tables[t];
    os << "\n" << res.name << " (" << (res.fitted ? "fitted" : "held out: never fitted") << "; held_out: "
       << res.held_out_basis << ")\n";
    char line[320];
    std::snprintf(line, sizeof line, "%-16s %-11s %5s  %-32s %-6s %-8s %-14s %-21s %10s %10s %8s %10s %8s\n", "model", "gpu",
                  "gpus", "layout", "prec", "disp", "routing", "quantity", "measured", "model", "error", "held_out", "error");
    os << line;
    for (const TrainingRow& r : v.rows) {
      if (r.table != static_cast<int>(t)) continue;
      const TrainingPoint& p = r.point;
      std::string disp = to_string(p.train.dispatcher);
      if (p.train.ep_overlap) disp += "+ov";
      std::snprintf(line, sizeof line, "%-16s %-11s %5d  %-32s %-6s %-8s %-14s %-21s %10s %10s %8s %10s %8s\n",
                    p.model.c_str(), p.gpu.c_str(), p.train.gpus, layout_cell(p).c_str(), to_string(p.train.precision),
                    disp.c_str(), to_string(p.train.routing).c_str(), to_string(p.quantity),
                    text::real(p.measured).c_str(), text::real(r.model).c_str(), pct(r.error(false)).c_str(),
                    text::real(r.held_out).c_str(), pct(r.error(true)).c_str());
      os << line;
    }
    os << "  median |error|: model " << text::fixed(100 * res.model.median_abs, 1) << "% (worst " << pct(res.model.worst)
       << "), held_out " << text::fixed(100 * res.held_out.median_abs, 1) << "% (worst " << pct(res.held_out.worst) << ")\n";
  }
  os << "\ntraining summary: " << v.rows.size() << " rows; median |error| model "
     << text::fixed(100 * v.model.median_abs, 1) << "%, held_out " << text::fixed(100 * v.held_out.median_abs, 1)
     << "%; forced-balance rows (" << v.forced_model.points << "): model " << text::fixed(100 * v.forced_model.median_abs, 1)
     << "%, held_out " << text::fixed(100 * v.forced_held_out.median_abs, 1) << "%\n";
  os << text::wrap("fit on every fitted table (" + std::to_string(v.fit_rows) + " rows; TFLOP/s rows that restate a "
                   "time row are left to it): " + figures_text(v.fit))
     << "\n";
  if (v.pairs.empty()) {
    os << "forced balance against a real router: no pair of rows on one setup\n";
  } else {
    os << "forced balance against a real router (time ratio, real router / forced balance):\n";
    for (const RouterPair& p : v.pairs) {
      const TrainingPoint& a = v.rows[static_cast<std::size_t>(p.forced)].point;
      const TrainingPoint& b = v.rows[static_cast<std::size_t>(p.other)].point;
      char line[256];
      std::snprintf(line, sizeof line, "  %-16s %-11s %-30s %-14s predicted %6.3f measured %6.3f error %+.3f\n",
                    a.model.c_str(), a.gpu.c_str(), layout_cell(a).c_str(), to_string(b.train.routing).c_str(),
                    p.predicted_ratio, p.measured_ratio, p.error());
      os << line;
    }
  }
  return os.str();
}

std::string csv_text(const TrainingValidation& v) {
  std::ostringstream os;
  os << "table,model,gpu,gpus,tp,pp,vpp,ep,etp,cp,seq_len,global_batch,micro_batch,precision,recompute,dispatcher,"
        "ep_overlap,routing,capacity_factor,quantity,measured,model,model_error,held_out,held_out_error,fitted\n";
  for (const TrainingRow& r : v.rows) {
    const TrainingPoint& p = r.point;
    const TrainConfig& c = p.train;
    os << text::csv_cell(v.tables[static_cast<std::size_t>(r.table)].name) << "," << text::csv_cell(p.model) << ","
       << text::csv_cell(p.gpu) << "," << c.gpus << "," << c.tp << "," << c.pp << "," << c.vpp << "," << c.ep << ","
       << c.etp << "," << c.cp << "," << c.seq_len << "," << c.global_batch << "," << c.micro_batch << ","
       << to_string(c.precision) << "," << to_string(c.recompute) << "," << to_string(c.dispatcher) << ","
       << (c.ep_overlap ? 1 : 0) << "," << to_string(c.routing) << ","
       << (p.capacity_factor > 0 ? text::real(p.capacity_factor) : "dropless") << "," << to_string(p.quantity) << ","
       << text::real(p.measured) << "," << text::real(r.model) << "," << text::real(r.error(false)) << ","
       << text::real(r.held_out) << "," << text::real(r.error(true)) << "," << (p.fitted ? 1 : 0) << "\n";
  }
  return os.str();
}

}  // namespace

json training_validation_json(const TrainingValidation& v) {
  json j;
  json tables = json::array();
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    const TrainingTableResult& res = v.tables[t];
    json rows = json::array();
    for (const TrainingRow& r : v.rows) {
      if (r.table != static_cast<int>(t)) continue;
      const TrainingPoint& p = r.point;
      rows.push_back({{"model", p.model}, {"gpu", p.gpu}, {"layout", layout_cell(p)},
                      {"precision", to_string(p.train.precision)}, {"recompute", to_string(p.train.recompute)},
                      {"dispatcher", to_string(p.train.dispatcher)}, {"ep_overlap", p.train.ep_overlap},
                      {"routing", to_string(p.train.routing)}, {"capacity_factor", p.capacity_factor},
                      {"quantity", to_string(p.quantity)}, {"unit", unit_of(p.quantity)}, {"measured", p.measured},
                      {"model", r.model}, {"model_error", r.error(false)}, {"held_out", r.held_out},
                      {"held_out_error", r.error(true)}, {"fitted", p.fitted}, {"step_s", r.step.step_s},
                      {"source", p.source}, {"line", p.line}});
    }
    tables.push_back({{"name", res.name}, {"origin", res.origin}, {"fitted", res.fitted},
                      {"held_out_basis", res.held_out_basis}, {"held_out_fit", figures_json(res.held_out_fit)},
                      {"errors", {{"model", summary_json(res.model)}, {"held_out", summary_json(res.held_out)}}},
                      {"rows", rows}});
  }
  j["tables"] = tables;
  j["fit"] = figures_json(v.fit);
  j["fit_rows"] = v.fit_rows;
  j["errors"] = {{"model", summary_json(v.model)}, {"held_out", summary_json(v.held_out)}};
  j["forced_balance_errors"] = {{"model", summary_json(v.forced_model)}, {"held_out", summary_json(v.forced_held_out)}};
  json pairs = json::array();
  for (const RouterPair& p : v.pairs)
    pairs.push_back({{"forced_row", p.forced}, {"other_row", p.other}, {"predicted_ratio", p.predicted_ratio},
                     {"measured_ratio", p.measured_ratio}, {"error", p.error()}});
  j["router_pairs"] = pairs;
  return j;
}

std::string format_training_validation(const TrainingValidation& v, ReportFormat format) {
  switch (format) {
    case ReportFormat::table: return table_text(v);
    case ReportFormat::markdown: return "```text\n" + table_text(v) + "```\n";
    case ReportFormat::csv: return csv_text(v);
    case ReportFormat::json: return training_validation_json(v).dump(2) + "\n";
  }
  throw InputError("--format: expected table, json, csv or markdown");
}

}  // namespace moesim
