// Formats a validation (src/sweep/validate.hpp): a table with the error summary, the load average and
// a note when the executed weights fit in the last-level cache; CSV; or JSON (schema_version, points).
// Host only. Covered by tests/sweep/validate_test.cpp.
#include "src/report/validate_report.hpp"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/report/provenance.hpp"
#include "src/report/report.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using text::fixed;
using text::real;

std::string format_table(const ValidateResult& r) {
  std::ostringstream os;
  os << "validate: " << r.experiment << " (" << r.source_file << "): " << r.experts << " experts, top-" << r.top_k
     << (r.shared_experts ? ", " + std::to_string(r.shared_experts) + " shared" : std::string()) << ", " << r.gating
     << "; executed and modeled at hidden " << r.hidden << ", ffn " << r.ffn << ", fp32, median of " << r.repeats
     << " repeats; hardware " << r.hardware << " (calibrated column)\n\n";
  os << "  tokens  active     rows  regime   predicted_ms  measured_ms  error_%\n";
  for (const ValidatePoint& p : r.points) {
    char line[160];
    std::snprintf(line, sizeof line, "%8lld  %6d  %7lld  %-7s  %12.4f  %11.4f  %+7.1f\n",
                  static_cast<long long>(p.num_tokens), p.active_experts, static_cast<long long>(p.rows),
                  p.compute_bound ? "compute" : "memory", p.predicted_s * 1e3, p.measured_s * 1e3, p.error * 100);
    os << line;
  }
  os << "\nexpert GEMM phase, " << r.points.size() << " points: median absolute percentage error "
     << fixed(r.median_ape * 100, 1) << "%, mean " << fixed(r.mean_ape * 100, 1) << "%\n";
  if (r.load_before >= 0 && r.load_after >= 0)
    os << "load average (1 min) " << fixed(r.load_before, 2) << " before, " << fixed(r.load_after, 2) << " after, on "
       << r.cores_online << " cores: other processes on these cores stretch the measured times\n";
  if (r.llc_bytes > 0 && r.weight_bytes < r.llc_bytes) {
    os << "note: the executed weights (" << fixed(r.weight_bytes / (1 << 20), 1) << " MiB) fit in the "
       << fixed(r.llc_bytes / (1 << 20), 1)
       << " MiB last-level cache: memory-bound points read the cache, not DRAM; raise execute.hidden/ffn\n";
  }
  return os.str();
}

std::string format_csv(const ValidateResult& r) {
  std::ostringstream os;
  os << "num_tokens,active_experts,rows,compute_bound,predicted_s,predicted_quantized_s,measured_s,error\n";
  for (const ValidatePoint& p : r.points)
    os << p.num_tokens << "," << p.active_experts << "," << p.rows << "," << (p.compute_bound ? 1 : 0) << ","
       << real(p.predicted_s) << "," << real(p.predicted_quantized_s) << "," << real(p.measured_s) << ","
       << real(p.error) << "\n";
  return os.str();
}

std::string format_json(const ValidateResult& r) {
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["moesim_version"] = MOESIM_VERSION;
  j["provenance"] = provenance_json();
  j["experiment"] = experiment_json(r.base, "");
  j["hardware"] = {{"name", r.hardware}, {"digest", r.hardware_digest}};
  j["shape"] = {{"hidden", r.hidden}, {"ffn", r.ffn}, {"experts", r.experts}, {"top_k", r.top_k},
                {"shared_experts", r.shared_experts}, {"gating", r.gating}, {"dtype", "fp32"}};
  j["repeats"] = r.repeats;
  j["weight_bytes"] = r.weight_bytes;
  nlohmann::json pts = nlohmann::json::array();
  for (const ValidatePoint& p : r.points)
    pts.push_back({{"num_tokens", p.num_tokens}, {"active_experts", p.active_experts}, {"rows", p.rows},
                   {"compute_bound", p.compute_bound}, {"predicted_s", p.predicted_s},
                   {"predicted_quantized_s", p.predicted_quantized_s}, {"measured_s", p.measured_s},
                   {"error", p.error}});
  j["points"] = pts;
  j["load_average_before"] = r.load_before;
  j["load_average_after"] = r.load_after;
  j["cores_online"] = r.cores_online;
  j["median_ape"] = r.median_ape;
  j["mean_ape"] = r.mean_ape;
  return j.dump(2) + "\n";
}

}  // namespace

std::string format_validation(const ValidateResult& r, ReportFormat format) {
  switch (format) {
    case ReportFormat::table: return format_table(r);
    case ReportFormat::csv: return format_csv(r);
    case ReportFormat::json: return format_json(r);
    case ReportFormat::markdown: break;
  }
  throw InputError("--format: expected table, csv or json for validate, got 'markdown'");
}

}  // namespace moesim
