// The serving-step tables' validation report (see step_validation_report.hpp).
#include "src/report/step_validation_report.hpp"

#include <cstdio>
#include <sstream>

#include "src/common/error.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using nlohmann::json;

std::string pct(double e) { return (e >= 0 ? "+" : "") + text::fixed(100 * e, 1) + "%"; }

std::string setup_cell(const StepRow& r) {
  std::ostringstream os;
  os << "EP" << r.ep;
  if (r.tp > 1) os << " TP" << r.tp;
  if (r.phase == StepPhase::decode) os << " " << r.requests_per_gpu << "req kv" << r.kv_len;
  else os << " " << r.tokens_per_gpu << "tok";
  if (r.mtp_draft > 0) os << " mtp" << r.mtp_draft;
  if (r.overlap == A2aOverlap::two_batch) os << " tbo";
  if (r.redundant_experts > 0) os << " +" << r.redundant_experts;
  return os.str();
}

std::string figures_text(const StepFigures& f) {
  std::ostringstream os;
  os << "other kernels a layer and micro-batch " << text::fixed(f.other_kernels, 2) << ", attention core at "
     << text::fixed(f.attention_efficiency, 3) << " of the bf16 peak and bandwidth, a decode launch "
     << text::fixed(f.decode_launch_share, 3) << " of the profile's";
  return os.str();
}

json figures_json(const StepFigures& f) {
  return {{"other_kernels", f.other_kernels}, {"attention_efficiency", f.attention_efficiency},
          {"decode_launch_share", f.decode_launch_share}};
}

json summary_json(const ErrorSummary& e) {
  return {{"median_abs_error", e.median_abs}, {"mean_error", e.mean}, {"worst_error", e.worst}, {"points", e.points}};
}

// A row marked fitted 0 whose scope is not the step's shows no error (TensorRT-LLM's iteration: only its
// synchronization share is compared); balancedness rows, routing's figures, always do.
bool compared(const StepResult& r) { return r.row.fitted || r.row.quantity == StepQuantity::balancedness; }

std::string table_text(const StepValidation& v) {
  std::ostringstream os;
  os << "serving-step tables: one step modeled per configuration (src/step/serving_step); model: the shipped figures "
        "(ServingFit), held_out: figures fitted without the row's table (a table: one source's one phase)\n";
  for (const std::string& t : v.tables) {
    os << "\n" << t << "\n";
    char line[320];
    std::snprintf(line, sizeof line, "%-7s %-12s %-11s %-30s %-9s %-28s %10s %10s %8s %10s %8s\n", "phase", "model", "gpu",
                  "setup", "routing", "quantity", "measured", "model", "error", "held_out", "error");
    os << line;
    for (const StepResult& r : v.rows) {
      if (r.row.table != t) continue;
      std::snprintf(line, sizeof line, "%-7s %-12s %-11s %-30s %-9s %-28s %10s %10s %8s %10s %8s\n", to_string(r.row.phase),
                    r.row.model.c_str(), r.row.gpu.c_str(), setup_cell(r.row).c_str(), r.row.routing.c_str(),
                    to_string(r.row.quantity), text::real(r.row.measured).c_str(), text::real(r.model).c_str(),
                    compared(r) ? pct(r.error(false)).c_str() : "-", text::real(r.held_out).c_str(),
                    compared(r) ? pct(r.error(true)).c_str() : "-");
      os << line;
      if (!r.approximation.empty() && &r == &*std::find_if(v.rows.begin(), v.rows.end(), [&](const StepResult& x) {
            return x.row.table == t && !x.approximation.empty();
          }))
        os << "  (" << r.approximation << ")\n";
    }
  }
  os << "\nserving-step error by quantity (median |error|, mean signed error; rows marked fitted 0 left out, but for\n"
        "  balancedness, which is routing's and no fitted figure moves):\n";
  for (const StepQuantitySummary& q : v.quantities) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-28s %3d rows  model %5.1f%% (%+.1f%%)  held_out %5.1f%% (%+.1f%%)\n",
                  to_string(q.quantity), q.model.points, 100 * q.model.median_abs, 100 * q.model.mean,
                  100 * q.held_out.median_abs, 100 * q.held_out.mean);
    os << line;
  }
  os << "  every fitted time and throughput: " << v.model.points << " rows, median |error| model " << text::fixed(100 * v.model.median_abs, 1)
     << "%, held_out " << text::fixed(100 * v.held_out.median_abs, 1) << "%\n";
  if (v.prefill_balance_ratio_measured > 0)
    os << "SGLang prefill, perfect balance over default routing (tokens/s): measured "
       << text::fixed(v.prefill_balance_ratio_measured, 3) << ", model " << text::fixed(v.prefill_balance_ratio_model, 3)
       << "\n";
  if (v.sync_share_measured > 0)
    os << "synchronization share of the layer: measured " << text::fixed(100 * v.sync_share_measured, 1) << "%, model "
       << text::fixed(100 * v.sync_share_model, 1) << "%\n";
  os << text::wrap("shipped step figures: " + figures_text(v.fit) + "; refitted on every table: " + figures_text(v.refit))
     << "\n";
  return os.str();
}

std::string csv_text(const StepValidation& v) {
  std::ostringstream os;
  os << "table,phase,model,gpu,gpus,ep,attention_dp,tp,requests_per_gpu,tokens_per_gpu,kv_len,mtp_draft,overlap,"
        "redundant_experts,routing,quantity,measured,model,model_error,held_out,held_out_error\n";
  for (const StepResult& r : v.rows) {
    const StepRow& p = r.row;
    os << text::csv_cell(p.table) << "," << to_string(p.phase) << "," << text::csv_cell(p.model) << ","
       << text::csv_cell(p.gpu) << "," << p.gpus << "," << p.ep << "," << p.attention_dp << "," << p.tp << ","
       << p.requests_per_gpu << "," << p.tokens_per_gpu << "," << p.kv_len << "," << p.mtp_draft << ","
       << to_string(p.overlap) << "," << p.redundant_experts << "," << text::csv_cell(p.routing) << ","
       << to_string(p.quantity) << "," << text::real(p.measured) << "," << text::real(r.model) << ","
       << text::real(r.error(false)) << "," << text::real(r.held_out) << "," << text::real(r.error(true)) << "\n";
  }
  return os.str();
}

}  // namespace

json step_validation_json(const StepValidation& v) {
  json rows = json::array();
  for (const StepResult& r : v.rows) {
    const StepRow& p = r.row;
    rows.push_back({{"table", p.table}, {"phase", to_string(p.phase)}, {"model", p.model}, {"gpu", p.gpu},
                    {"setup", setup_cell(p)}, {"routing", p.routing}, {"quantity", to_string(p.quantity)},
                    {"unit", p.unit}, {"measured", p.measured}, {"model_value", r.model},
                    {"model_error", r.error(false)}, {"held_out", r.held_out}, {"held_out_error", r.error(true)},
                    {"approximation", r.approximation}, {"source", p.source}, {"line", p.line}});
  }
  json quantities = json::array();
  for (const StepQuantitySummary& q : v.quantities)
    quantities.push_back({{"quantity", to_string(q.quantity)}, {"model", summary_json(q.model)},
                          {"held_out", summary_json(q.held_out)}});
  json held = json::array();
  for (std::size_t t = 0; t < v.tables.size(); ++t)
    held.push_back({{"table", v.tables[t]}, {"fit", figures_json(v.held_out_fits[t])}});
  json j = {{"rows", rows},
            {"quantities", quantities},
            {"errors", {{"model", summary_json(v.model)}, {"held_out", summary_json(v.held_out)}}},
            {"fit", figures_json(v.fit)},
            {"refit", figures_json(v.refit)},
            {"held_out_fits", held}};
  if (v.prefill_balance_ratio_measured > 0)
    j["prefill_balance_ratio"] = {{"measured", v.prefill_balance_ratio_measured}, {"model", v.prefill_balance_ratio_model}};
  if (v.sync_share_measured > 0) j["sync_share"] = {{"measured", v.sync_share_measured}, {"model", v.sync_share_model}};
  return j;
}

std::string format_step_validation(const StepValidation& v, ReportFormat format) {
  switch (format) {
    case ReportFormat::table: return table_text(v);
    case ReportFormat::markdown: return "```text\n" + table_text(v) + "```\n";
    case ReportFormat::csv: return csv_text(v);
    case ReportFormat::json: return step_validation_json(v).dump(2) + "\n";
  }
  throw InputError("--format: expected table, json, csv or markdown");
}

}  // namespace moesim
