// Formats `moesim route`'s report (see route_report.hpp). Deterministic. Host only. Covered by
// tests/cli/cli_test.cpp.
#include "src/report/route_report.hpp"

#include <sstream>

#include <nlohmann/json.hpp>

#include "src/report/provenance.hpp"
#include "src/report/text_format.hpp"

namespace moesim {

std::string format_route(const RouteReport& r, ReportFormat format) {
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["moesim_version"] = MOESIM_VERSION;
  j["provenance"] = provenance_json();
  j["experiment"] = experiment_json(r.experiment, r.file);
  j["hardware"] = {{"name", r.experiment.hardware.name}, {"digest", r.hardware_digest}};
  j["file"] = r.file;
  j["num_tokens"] = r.num_tokens;
  j["num_experts"] = r.num_experts;
  j["top_k"] = r.top_k;
  j["gating"] = r.gating;
  j["capacity_factor"] = r.capacity_factor;
  j["memory_estimate_bytes"] = r.memory_estimate_bytes;
  j["memory_limit_bytes"] = r.memory_limit_bytes;
  const nlohmann::json metrics = metrics_to_json(r.metrics);
  j["metrics"] = metrics;
  if (!r.expert_bias.empty()) {
    j["expert_bias"] = r.expert_bias;
    nlohmann::json update = {{"batch", 0}, {"step", 0}, {"layer", 0}, {"bias", r.expert_bias}};
    j["expert_bias_updates"] = nlohmann::json::array();
    j["expert_bias_updates"].push_back(update);
  }
  if (format == ReportFormat::json) return j.dump(2) + "\n";
  std::ostringstream os;
  // A scalar as a cell: its number, empty (CSV) where it does not apply; the per-expert arrays are JSON's.
  auto cell = [](const nlohmann::json& v) { return v.is_number() ? text::real(v.get<double>()) : std::string(); };
  if (format == ReportFormat::csv) {
    os << "file,num_tokens,num_experts,top_k,gating,capacity_factor";
    for (auto it = metrics.begin(); it != metrics.end(); ++it)
      if (!it.value().is_array()) os << "," << it.key();
    os << "\n" << text::csv_cell(r.file) << "," << r.num_tokens << "," << r.num_experts << "," << r.top_k << ","
       << r.gating << "," << text::real(r.capacity_factor);
    for (auto it = metrics.begin(); it != metrics.end(); ++it)
      if (!it.value().is_array()) os << "," << cell(it.value());
    os << "\n";
    return os.str();
  }
  if (format == ReportFormat::markdown) {
    os << "**" << r.file << ": " << r.num_tokens << " tokens x " << r.num_experts << " experts, " << r.gating
       << ", top_k " << r.top_k << "**\n\n| metric | value |\n| :--- | ---: |\n";
    for (auto it = metrics.begin(); it != metrics.end(); ++it) {
      if (it.value().is_array()) continue;
      const std::string v = cell(it.value());
      os << "| " << it.key() << " | " << (v.empty() ? "-" : v) << " |\n";
    }
    os << "\n- load: " << metrics["load"].dump() << "\n- memory estimate: " << text::mib(r.memory_estimate_bytes)
       << " (limit " << text::mib(r.memory_limit_bytes) << ")\n";
    if (!r.expert_bias.empty()) os << "- expert_bias: " << j["expert_bias"].dump() << "\n";
    return os.str();
  }
  os << r.file << ": " << r.num_tokens << " tokens x " << r.num_experts << " experts, " << r.gating << ", top_k "
     << r.top_k << "\n";
  os << "  memory estimate: " << text::mib(r.memory_estimate_bytes) << " (limit " << text::mib(r.memory_limit_bytes)
     << ")\n";
  for (auto it = metrics.begin(); it != metrics.end(); ++it) os << "  " << it.key() << ": " << it.value().dump() << "\n";
  if (!r.expert_bias.empty()) os << "  expert_bias: " << j["expert_bias"].dump() << "\n";
  return os.str();
}

}  // namespace moesim
