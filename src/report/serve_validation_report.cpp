// The serving tables' validation report (see serve_validation_report.hpp).
#include "src/report/serve_validation_report.hpp"

#include <cstdio>
#include <sstream>

#include "src/common/error.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using nlohmann::json;

std::string setup_cell(const ServeRow& r) {
  std::ostringstream os;
  os << r.gpus << "x" << r.gpu << " DP" << r.attention_dp << " EP" << r.ep << " c" << r.concurrency << " b"
     << r.max_batch_size << " t" << r.max_num_tokens << " " << r.isl << "/" << r.osl;
  if (r.mtp_draft > 0) os << " mtp" << r.mtp_draft;
  if (r.disaggregated) os << " disagg " << r.prefill_gpus << "P" << r.decode_gpus << "D";
  return os.str();
}

std::string error_cell(const ServeResultRow& r) {
  if (!r.not_modeled.empty()) return "-";
  const double e = r.error();
  return (e >= 0 ? "+" : "") + text::fixed(100 * e, 1) + "%";
}

std::string table_text(const ServeValidation& v) {
  std::ostringstream os;
  os << "serving tables: each configuration's request stream run by moesim serve (src/serve; the step model's shipped "
        "figures, fitted on the step tables only, so every serving row is held out)\n";
  for (const std::string& t : v.tables) {
    os << "\n" << t << "\n";
    char line[400];
    std::snprintf(line, sizeof line, "%-14s %-12s %-6s %-44s %-28s %10s %10s %8s\n", "system", "model", "dtype", "setup",
                  "quantity", "measured", "model", "error");
    os << line;
    std::string notes;
    for (const ServeResultRow& r : v.rows) {
      if (r.row.table != t) continue;
      std::snprintf(line, sizeof line, "%-14s %-12s %-6s %-44s %-28s %10s %10s %8s\n", r.row.system.c_str(),
                    r.row.model.c_str(), r.row.weight_dtype.c_str(), setup_cell(r.row).c_str(), to_string(r.row.quantity),
                    text::real(r.row.measured).c_str(), r.not_modeled.empty() ? text::real(r.model).c_str() : "-",
                    error_cell(r).c_str());
      os << line;
      for (const std::string& n : {r.approximation, r.not_modeled})
        if (!n.empty() && notes.find(n) == std::string::npos) notes += "  (" + n + ")\n";
    }
    os << notes;
  }
  os << "serving tables: " << v.model.points << " modeled rows, median |error| "
     << text::fixed(100 * v.model.median_abs, 1) << "%, mean signed error " << (v.model.mean >= 0 ? "+" : "")
     << text::fixed(100 * v.model.mean, 1) << "%\n";
  return os.str();
}

std::string csv_text(const ServeValidation& v) {
  std::ostringstream os;
  os << "table,system,model,weight_dtype,kv_dtype,gpu,gpus,attention_dp,ep,max_batch_size,max_num_tokens,concurrency,"
        "requests,isl,osl,quantity,measured,model,model_error\n";
  for (const ServeResultRow& r : v.rows) {
    const ServeRow& p = r.row;
    os << text::csv_cell(p.table) << "," << text::csv_cell(p.system) << "," << text::csv_cell(p.model) << ","
       << p.weight_dtype << "," << p.kv_dtype << "," << text::csv_cell(p.gpu) << "," << p.gpus << "," << p.attention_dp
       << "," << p.ep << "," << p.max_batch_size << "," << p.max_num_tokens << "," << p.concurrency << "," << p.requests
       << "," << p.isl << "," << p.osl << "," << to_string(p.quantity) << "," << text::real(p.measured) << ","
       << (r.not_modeled.empty() ? text::real(r.model) : "") << ","
       << (r.not_modeled.empty() ? text::real(r.error()) : "") << "\n";
  }
  return os.str();
}

}  // namespace

json serve_validation_json(const ServeValidation& v) {
  json rows = json::array();
  for (const ServeResultRow& r : v.rows) {
    const ServeRow& p = r.row;
    json row = {{"table", p.table},       {"system", p.system},          {"model", p.model},
                {"gpu", p.gpu},           {"setup", setup_cell(p)},      {"quantity", to_string(p.quantity)},
                {"unit", p.unit},         {"measured", p.measured},      {"approximation", r.approximation},
                {"source", p.source},     {"line", p.line}};
    if (r.not_modeled.empty()) {
      row["model_value"] = r.model;
      row["model_error"] = r.error();
    } else {
      row["not_modeled"] = r.not_modeled;
    }
    rows.push_back(row);
  }
  return {{"rows", rows},
          {"errors",
           {{"model",
             {{"median_abs_error", v.model.median_abs}, {"mean_error", v.model.mean}, {"worst_error", v.model.worst},
              {"points", v.model.points}}}}}};
}

std::string format_serve_validation(const ServeValidation& v, ReportFormat format) {
  switch (format) {
    case ReportFormat::table: return table_text(v);
    case ReportFormat::markdown: return "```text\n" + table_text(v) + "```\n";
    case ReportFormat::csv: return csv_text(v);
    case ReportFormat::json: return serve_validation_json(v).dump(2) + "\n";
  }
  throw InputError("--format: expected table, json, csv or markdown");
}

}  // namespace moesim
