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
     << " repeats; hardware " << r.hardware << " (the kernel model)\n\n";
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
  os << "num_tokens,active_experts,rows,compute_bound,predicted_s,measured_s,error\n";
  for (const ValidatePoint& p : r.points)
    os << p.num_tokens << "," << p.active_experts << "," << p.rows << "," << (p.compute_bound ? 1 : 0) << ","
       << real(p.predicted_s) << "," << real(p.measured_s) << ","
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
                   {"measured_s", p.measured_s},
                   {"error", p.error}});
  j["points"] = pts;
  j["load_average_before"] = r.load_before;
  j["load_average_after"] = r.load_after;
  j["cores_online"] = r.cores_online;
  j["median_ape"] = r.median_ape;
  j["mean_ape"] = r.mean_ape;
  return j.dump(2) + "\n";
}

std::string pct(double e) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f", e * 100);
  return buf;
}

// The mean of a term over a row's routing draws.
double mean_term(const PublishedTerms& t, double KernelTerms::*term) {
  double sum = 0;
  for (const KernelTerms& d : t.draws) sum += d.*term;
  return t.draws.empty() ? 0.0 : sum / static_cast<double>(t.draws.size());
}

std::string figures_text(const KernelFigures& f) {
  return "efficiency_bw " + fixed(f.efficiency_bw, 3) + ", efficiency_flops " + fixed(f.efficiency_flops, 3) +
         ", launch " + fixed(f.launch_s * 1e6, 2) + " us, K step " + fixed(f.k_step_s * 1e6, 3) + " us";
}

std::string published_table(const PublishedValidation& v) {
  std::ostringstream os;
  os << "published fused-MoE kernel times against the cost model: " << v.tables.size()
     << (v.tables.size() == 1 ? " table, " : " tables, ") << v.rows.size()
     << " points (data/validation/README.md). Routing as each benchmark routes: uniform random top-k (the mean of "
     << kPublishedDraws << " draws) or balanced.\n"
        "columns: ideal (roofline at peak, no launches), model (the kernel model with the profile's figures: the number run and "
        "sweep print), held_out (the same model, its figures fitted as shipped on the other tables: never on this "
        "one)\n";
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    const PublishedTableResult& res = v.tables[t];
    const PublishedPoint* first = nullptr;
    for (const PublishedRow& r : v.rows)
      if (r.table == static_cast<int>(t)) { first = &r.point; break; }
    os << "\n" << res.table.name << " (" << res.table.origin << ")\n  " << res.gpu;
    if (first) {
      os << " " << format_label(first->format) << ", E " << first->experts << ", N " << first->n << ", K " << first->k
         << ", top-" << first->top_k << ", tp " << first->tp << ", ep " << first->ep << ", " << to_string(first->scope)
         << " (" << scope_kernels(first->scope) << (scope_kernels(first->scope) == 1 ? " kernel" : " kernels")
         << "), " << to_string(first->routing) << " routing, " << first->source;
    }
    os << "\n  model: " << figures_text(KernelFigures::of(res.table.hardware)) << "\n  held_out: ";
    if (res.fitted_on.empty()) {
      os << "no other table to fit on\n";
    } else {
      os << "fit on the " << res.fitted_on.size() << " other table" << (res.fitted_on.size() == 1 ? "" : "s") << ": "
         << figures_text(res.fit.figures) << "\n";
    }
    os << "     batch   active  measured_us    ideal_us   err%    model_us   err%  held_out_us   err%\n";
    for (const PublishedRow& r : v.rows) {
      if (r.table != static_cast<int>(t)) continue;
      char line[256];
      std::snprintf(line, sizeof line, "  %8lld  %7.1f  %11.2f  %10.2f  %5s  %10.2f  %5s  %11s  %5s\n",
                    static_cast<long long>(r.point.batch), r.terms.active_experts, r.point.measured_s * 1e6,
                    r.ideal_s * 1e6, pct(column_error(r, PublishedColumn::ideal)).c_str(), r.model_s * 1e6,
                    pct(column_error(r, PublishedColumn::model)).c_str(),
                    res.fitted_on.empty() ? "-" : fixed(r.held_out_s * 1e6, 2).c_str(),
                    res.fitted_on.empty() ? "-" : pct(column_error(r, PublishedColumn::held_out)).c_str());
      os << line;
    }
  }
  os << "\nerror per table: median |error| / worst, %\n";
  char head[256];
  std::snprintf(head, sizeof head, "  %-58s %-15s %6s  %13s  %13s  %13s\n", "table", "gpu", "points", "ideal", "model",
                "held_out");
  os << head;
  const auto cell = [](const ErrorSummary& e) {
    if (e.points == 0) return std::string("-");
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f / %+.0f", e.median_abs * 100, e.worst * 100);
    return std::string(buf);
  };
  const auto summary_line = [&](const std::string& name, const std::string& gpu, int points, const ErrorSummary* e) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-58s %-15s %6d  %13s  %13s  %13s\n", name.c_str(), gpu.c_str(), points,
                  cell(e[0]).c_str(), cell(e[1]).c_str(), cell(e[2]).c_str());
    os << line;
  };
  for (const PublishedTableResult& res : v.tables)
    summary_line(res.table.name, res.gpu, res.errors[0].points, res.errors);
  os << "\nerror per GPU\n";
  for (const PublishedGpuSummary& g : v.gpus) summary_line("gpu", g.gpu, g.errors[0].points, g.errors);
  summary_line("overall", "", v.overall[0].points, v.overall);
  os << "\nerror by regime: median |error| / mean signed error, % (decode: at most " << kDecodeMaxTokens
     << " tokens routed a batch, the table's batch column)\n";
  char regime_line[256];
  std::snprintf(regime_line, sizeof regime_line, "  %-44s %6s  %14s  %14s\n", "regime", "points", "model", "held_out");
  os << regime_line;
  const auto mean_cell = [](const ErrorSummary& e) {
    if (e.points == 0) return std::string("-");
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f / %+.1f", e.median_abs * 100, e.mean * 100);
    return std::string(buf);
  };
  for (const RegimeSummary& s : summarize_regimes(v)) {
    std::snprintf(regime_line, sizeof regime_line, "  %-44s %6d  %14s  %14s\n", to_string(s.regime), s.model.points,
                  mean_cell(s.model).c_str(), mean_cell(s.held_out).c_str());
    os << regime_line;
  }
  if (!v.skew_pairs.empty()) {
    os << "\nwhat skew costs: skewed (power-law or concentrated) / balanced time at the same batch, modeled (the "
          "model column) against measured\n     batch   ep  routing         predicted  measured  error%\n";
    int table = -1;
    for (const SkewPair& p : v.skew_pairs) {
      if (p.table != table) {
        table = p.table;
        os << "  " << v.tables[static_cast<std::size_t>(table)].table.name << "\n";
      }
      char routing[32], line[160];
      if (p.routing == PublishedRouting::power_law) std::snprintf(routing, sizeof routing, "power_law:%.2f", p.alpha);
      else std::snprintf(routing, sizeof routing, "%s", to_string(p.routing));
      std::snprintf(line, sizeof line, "  %8lld  %3d  %-14s  %9.3f  %8.3f  %6s\n", static_cast<long long>(p.batch),
                    p.ep, routing, p.predicted_ratio, p.measured_ratio, pct(p.error()).c_str());
      os << line;
    }
    const auto line = [&](const char* what, const SkewSummary& s) {
      os << what << " where skew moved the measured time more than " << fixed(kSkewMoved * 100, 0)
         << " %: " << s.pairs << ", |error| median " << fixed(s.median_abs * 100, 1) << " %, 90th percentile "
         << fixed(s.p90_abs * 100, 1) << " %, direction right in " << fixed(s.direction_right * 100, 0) << " %\n";
    };
    line("skew pairs with ep 1", summarize_skew(v.skew_pairs, kSkewMoved, true));
    line("  of them the kernels run models", summarize_skew(v.skew_pairs, kSkewMoved, true, SkewKernels::modeled));
    line("    the fused-MoE kernels' (bf16, fp8)", summarize_skew(v.skew_pairs, kSkewMoved, true, SkewKernels::fused));
    line("    the weight-only kernels' (int4, mxfp4)",
         summarize_skew(v.skew_pairs, kSkewMoved, true, SkewKernels::weight_only));
    line("  of them validation-only kernels' (fitted 0)",
         summarize_skew(v.skew_pairs, kSkewMoved, true, SkewKernels::validation_only));
    line("skew pairs, every ep", summarize_skew(v.skew_pairs, kSkewMoved, false));
  }
  return os.str();
}

std::string published_csv(const PublishedValidation& v) {
  std::ostringstream os;
  os << "table,gpu,dtype,experts,n,k,top_k,tp,ep,batch,scope,routing,active_experts,measured_s";
  for (PublishedColumn c : kPublishedColumns) os << "," << to_string(c) << "_s," << to_string(c) << "_error";
  os << "\n";
  for (const PublishedRow& r : v.rows) {
    const PublishedTableResult& res = v.tables[static_cast<std::size_t>(r.table)];
    const PublishedPoint& p = r.point;
    os << text::csv_cell(res.table.name) << "," << p.gpu << "," << dtype_cell(p.format) << "," << p.experts << "," << p.n
       << "," << p.k << "," << p.top_k << "," << p.tp << "," << p.ep << "," << p.batch << "," << to_string(p.scope)
       << "," << to_string(p.routing) << "," << real(r.terms.active_experts) << "," << real(p.measured_s);
    for (PublishedColumn c : kPublishedColumns) {
      if (c == PublishedColumn::held_out && res.fitted_on.empty()) {
        os << ",,";
        continue;
      }
      os << "," << real(column_s(r, c)) << "," << real(column_error(r, c));
    }
    os << "\n";
  }
  return os.str();
}

nlohmann::json summary_json(const ErrorSummary* e) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kPublishedColumnCount; ++c) {
    if (e[c].points == 0) continue;
    j[to_string(kPublishedColumns[c])] = {{"median_abs_error", e[c].median_abs}, {"worst_error", e[c].worst},
                                          {"points", e[c].points}};
  }
  return j;
}

std::string published_json(const PublishedValidation& v) {
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["moesim_version"] = MOESIM_VERSION;
  j["provenance"] = provenance_json();
  j["routing"] = "each table's own: uniform random top-k (torch.randn gating logits), mean of " +
                 std::to_string(kPublishedDraws) + " draws, or balanced (one round-robin routing)";
  nlohmann::json tables = nlohmann::json::array();
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    const PublishedTableResult& res = v.tables[t];
    nlohmann::json tj = {{"name", res.table.name}, {"origin", res.table.origin}, {"gpu", res.gpu},
                         {"hardware_digest", res.profile_digest}, {"held_out_basis", res.held_out_basis},
                         {"fitted_on", res.fitted_on}, {"errors", summary_json(res.errors)}};
    if (!res.fitted_on.empty())
      tj["fit"] = {{"efficiency_bw", res.fit.figures.efficiency_bw},
                   {"efficiency_flops", res.fit.figures.efficiency_flops},
                   {"launch_overhead_s", res.fit.figures.launch_s}, {"k_step_s", res.fit.figures.k_step_s},
                   {"points", res.fit.points}};
    nlohmann::json pts = nlohmann::json::array();
    for (const PublishedRow& r : v.rows) {
      if (r.table != static_cast<int>(t)) continue;
      const PublishedPoint& p = r.point;
      nlohmann::json pj = {{"dtype", dtype_cell(p.format)}, {"gated", p.format.gated}, {"experts", p.experts}, {"n", p.n}, {"k", p.k},
                           {"top_k", p.top_k}, {"tp", p.tp}, {"ep", p.ep}, {"batch", p.batch},
                           {"scope", to_string(p.scope)}, {"routing", to_string(p.routing)},
                           {"kernels", r.terms.kernels}, {"active_experts", r.terms.active_experts},
                           {"memory_s", mean_term(r.terms, &KernelTerms::memory_s)},
                           {"compute_s", mean_term(r.terms, &KernelTerms::compute_s)},
                           {"k_steps", mean_term(r.terms, &KernelTerms::k_steps)},
                           {"measured_s", p.measured_s}, {"source", p.source}, {"line", p.line}};
      for (PublishedColumn c : kPublishedColumns) {
        if (c == PublishedColumn::held_out && res.fitted_on.empty()) continue;
        pj[std::string(to_string(c)) + "_s"] = column_s(r, c);
        pj[std::string(to_string(c)) + "_error"] = column_error(r, c);
      }
      pts.push_back(pj);
    }
    tj["points"] = pts;
    tables.push_back(tj);
  }
  j["tables"] = tables;
  nlohmann::json gpus = nlohmann::json::object();
  const auto fit_json = [](const PublishedFit& f) {
    return nlohmann::json{{"efficiency_bw", f.figures.efficiency_bw}, {"efficiency_flops", f.figures.efficiency_flops},
                          {"launch_overhead_s", f.figures.launch_s}, {"k_step_s", f.figures.k_step_s},
                          {"points", f.points}};
  };
  for (const PublishedGpuSummary& g : v.gpus) {
    gpus[g.gpu] = {{"errors", summary_json(g.errors)}, {"fit", fit_json(g.fit)}, {"fitted_tables", g.fitted_tables}};
  }
  j["gpus"] = gpus;
  j["pooled_fit"] = fit_json(v.pooled);
  j["weight_only_fit"] = {{"bw_share", v.weight_only.bw_share},
                          {"flops_share", v.weight_only.flops_share},
                          {"reread_share", v.weight_only.reread_share},
                          {"k_step_share", v.weight_only.k_step_share},
                          {"points", v.weight_only.points}};
  nlohmann::json pairs = nlohmann::json::array();
  for (const SkewPair& p : v.skew_pairs)
    pairs.push_back({{"table", v.tables[static_cast<std::size_t>(p.table)].table.name}, {"batch", p.batch}, {"ep", p.ep},
                     {"routing", to_string(p.routing)}, {"alpha", p.alpha}, {"predicted_ratio", p.predicted_ratio}, {"measured_ratio", p.measured_ratio},
                     {"error", p.error()}, {"weight_only", p.weight_only}, {"modeled", p.modeled}});
  j["skew_pairs"] = pairs;
  const auto skew_json = [&](bool ep_one, SkewKernels kernels) {
    const SkewSummary s = summarize_skew(v.skew_pairs, kSkewMoved, ep_one, kernels);
    return nlohmann::json{{"pairs", s.pairs}, {"median_abs_error", s.median_abs}, {"p90_abs_error", s.p90_abs},
                          {"direction_right", s.direction_right}};
  };
  j["skew_summary_ep1"] = skew_json(true, SkewKernels::all);
  j["skew_summary"] = skew_json(false, SkewKernels::all);
  j["skew_summary_ep1_fused"] = skew_json(true, SkewKernels::fused);
  j["skew_summary_ep1_weight_only"] = skew_json(true, SkewKernels::weight_only);
  j["skew_summary_ep1_modeled"] = skew_json(true, SkewKernels::modeled);
  j["skew_summary_ep1_validation_only"] = skew_json(true, SkewKernels::validation_only);
  j["overall"] = summary_json(v.overall);
  nlohmann::json regimes = nlohmann::json::array();
  const auto regime_json = [](const ErrorSummary& e) {
    return nlohmann::json{{"median_abs_error", e.median_abs}, {"mean_error", e.mean}, {"points", e.points}};
  };
  for (const RegimeSummary& s : summarize_regimes(v)) {
    nlohmann::json r = {{"regime", to_string(s.regime)}, {"model", regime_json(s.model)}};
    if (s.held_out.points > 0) r["held_out"] = regime_json(s.held_out);
    regimes.push_back(r);
  }
  j["regimes"] = regimes;
  return j.dump(2) + "\n";
}

}  // namespace

std::string format_validation(const ValidateResult& r, ReportFormat format) {
  switch (format) {
    case ReportFormat::table: return format_table(r);
    case ReportFormat::csv: return format_csv(r);
    case ReportFormat::json: return format_json(r);
    // The aligned table is the report, with its notes: in Markdown, a preformatted block.
    case ReportFormat::markdown: return "```text\n" + format_table(r) + "```\n";
  }
  throw InputError("--format: expected table, json, csv or markdown");
}

}  // namespace moesim

namespace moesim {

namespace {

std::string comm_figures_text(const A2aFigures& f) {
  return "floors " + fixed(f.dispatch_floor_s * 1e6, 1) + " / " + fixed(f.combine_floor_s * 1e6, 1) +
         " us (dispatch / combine), scale-up efficiency " + fixed(f.scale_up_efficiency, 3) +
         ", scale-out efficiency " + fixed(f.scale_out_efficiency, 3);
}

std::string comm_table(const CommValidation& v) {
  std::ostringstream os;
  os << "published expert-parallel dispatch/combine times against the all-to-all model: " << v.tables.size()
     << (v.tables.size() == 1 ? " table, " : " tables, ") << v.rows.size()
     << " points (data/validation/README.md). Routing as each benchmark routes: uniform random top-k or balanced.\n"
        "columns: model (the profile's figures: the number run and sweep print), held_out (the kernel family's "
        "figures fitted on its other tables: never on this one)\n";
  const auto cell = [](const ErrorSummary& e) {
    if (e.points == 0) return std::string("-");
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f / %+.0f", e.median_abs * 100, e.worst * 100);
    return std::string(buf);
  };
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    const CommTableResult& res = v.tables[t];
    os << "\n" << res.table.name << " (" << res.table.origin << ")\n  " << res.gpu << ", " << to_string(res.kernel)
       << " kernel\n  model: " << comm_figures_text(a2a_figures(res.table.hardware, res.kernel)) << "\n  held_out: "
       << (res.held_out_basis == "none" ? "no other table of the family: the model's figures"
                                        : "fit on the family's other tables: " + comm_figures_text(res.held_out_fit.figures))
       << "\n  phase       ep  tokens  dtype  measured_us    model_us   err%  held_out_us   err%\n";
    for (const CommRow& r : v.rows) {
      if (r.table != static_cast<int>(t)) continue;
      char line[200];
      std::snprintf(line, sizeof line, "  %-8s  %4d  %6lld  %-5s  %11.1f  %10.1f  %5s  %11.1f  %5s\n",
                    to_string(r.point.phase), r.point.ep, static_cast<long long>(r.point.tokens_per_rank),
                    to_string(r.point.dtype), r.point.measured_s * 1e6, r.model_s * 1e6,
                    pct(r.error(PublishedColumn::model)).c_str(), r.held_out_s * 1e6,
                    pct(r.error(PublishedColumn::held_out)).c_str());
      os << line;
    }
  }
  os << "\nerror per table: median |error| / worst, %\n";
  char head[200];
  std::snprintf(head, sizeof head, "  %-46s %-12s %-12s %6s  %13s  %13s\n", "table", "gpu", "kernel", "points", "model",
                "held_out");
  os << head;
  for (const CommTableResult& res : v.tables) {
    char line[220];
    std::snprintf(line, sizeof line, "  %-46s %-12s %-12s %6d  %13s  %13s\n", res.table.name.c_str(), res.gpu.c_str(),
                  to_string(res.kernel), res.model.points, cell(res.model).c_str(), cell(res.held_out).c_str());
    os << line;
  }
  os << "\nper kernel family (the figures every profile without its own takes: A2aPooledFit)\n";
  for (const CommFamily& f : v.families) {
    char line[220];
    std::snprintf(line, sizeof line, "  %-46s %-12s %-12s %6d  %13s  %13s\n",
                  (std::to_string(f.tables.size()) + " tables").c_str(), "", to_string(f.kernel), f.model.points,
                  cell(f.model).c_str(), cell(f.held_out).c_str());
    os << line << "    fit on every table: " << comm_figures_text(f.fit.figures) << "\n";
  }
  char line[220];
  std::snprintf(line, sizeof line, "  %-46s %-12s %-12s %6d  %13s  %13s\n", "overall", "", "", v.model.points,
                cell(v.model).c_str(), cell(v.held_out).c_str());
  os << line;
  return os.str();
}

std::string comm_csv(const CommValidation& v) {
  std::ostringstream os;
  os << "table,gpu,kernel,phase,ep,tokens_per_rank,hidden,top_k,experts,dtype,routing,node_limit,devices_per_node,"
        "measured_s,model_s,model_error,held_out_s,held_out_error\n";
  for (const CommRow& r : v.rows) {
    const CommTableResult& res = v.tables[static_cast<std::size_t>(r.table)];
    const CommPoint& p = r.point;
    os << text::csv_cell(res.table.name) << "," << res.gpu << "," << to_string(p.kernel) << "," << to_string(p.phase)
       << "," << p.ep << "," << p.tokens_per_rank << "," << p.hidden << "," << p.top_k << "," << p.experts << ","
       << to_string(p.dtype) << "," << (p.fanout == A2aFanout::spread ? "balanced" : "uniform_random") << ","
       << (p.node_limit > 0 ? std::to_string(p.node_limit) : "") << ","
       << (p.devices_per_node > 0 ? std::to_string(p.devices_per_node) : "") << "," << real(p.measured_s) << ","
       << real(r.model_s) << "," << real(r.error(PublishedColumn::model)) << "," << real(r.held_out_s) << ","
       << real(r.error(PublishedColumn::held_out)) << "\n";
  }
  return os.str();
}

nlohmann::json comm_summary_json(const ErrorSummary& model, const ErrorSummary& held) {
  nlohmann::json j = nlohmann::json::object();
  if (model.points > 0) j["model"] = {{"median_abs_error", model.median_abs}, {"worst_error", model.worst}, {"points", model.points}};
  if (held.points > 0)
    j["held_out"] = {{"median_abs_error", held.median_abs}, {"worst_error", held.worst}, {"points", held.points}};
  return j;
}

nlohmann::json comm_figures_json(const A2aFigures& f) {
  return {{"dispatch_floor_s", f.dispatch_floor_s}, {"combine_floor_s", f.combine_floor_s},
          {"scale_up_efficiency", f.scale_up_efficiency}, {"scale_out_efficiency", f.scale_out_efficiency}};
}

nlohmann::json comm_json(const CommValidation& v) {
  nlohmann::json tables = nlohmann::json::array();
  for (std::size_t t = 0; t < v.tables.size(); ++t) {
    const CommTableResult& res = v.tables[t];
    nlohmann::json tj = {{"name", res.table.name}, {"origin", res.table.origin}, {"gpu", res.gpu},
                         {"kernel", to_string(res.kernel)}, {"held_out_basis", res.held_out_basis},
                         {"model_figures", comm_figures_json(a2a_figures(res.table.hardware, res.kernel))},
                         {"held_out_figures", comm_figures_json(res.held_out_fit.figures)},
                         {"errors", comm_summary_json(res.model, res.held_out)}};
    nlohmann::json pts = nlohmann::json::array();
    for (const CommRow& r : v.rows) {
      if (r.table != static_cast<int>(t)) continue;
      const CommPoint& p = r.point;
      pts.push_back({{"phase", to_string(p.phase)}, {"ep", p.ep}, {"tokens_per_rank", p.tokens_per_rank},
                     {"hidden", p.hidden}, {"top_k", p.top_k}, {"experts", p.experts}, {"dtype", to_string(p.dtype)},
                     {"routing", p.fanout == A2aFanout::spread ? "balanced" : "uniform_random"},
                     {"node_limit", p.node_limit}, {"devices_per_node", p.devices_per_node},
                     {"measured_s", p.measured_s}, {"model_s", r.model_s},
                     {"model_error", r.error(PublishedColumn::model)}, {"held_out_s", r.held_out_s},
                     {"held_out_error", r.error(PublishedColumn::held_out)}, {"source", p.source}, {"line", p.line}});
    }
    tj["points"] = pts;
    tables.push_back(tj);
  }
  nlohmann::json families = nlohmann::json::object();
  for (const CommFamily& f : v.families)
    families[to_string(f.kernel)] = {{"fit", comm_figures_json(f.fit.figures)}, {"points", f.fit.points},
                                     {"tables", f.tables}, {"errors", comm_summary_json(f.model, f.held_out)}};
  return {{"tables", tables}, {"families", families}, {"overall", comm_summary_json(v.model, v.held_out)}};
}

}  // namespace

std::string format_published(const PublishedValidation* kernels, const CommValidation* comm, ReportFormat format) {
  switch (format) {
    case ReportFormat::table: {
      std::string out = kernels ? published_table(*kernels) : "";
      if (comm) out += (out.empty() ? "" : "\n") + comm_table(*comm);
      return out;
    }
    case ReportFormat::csv: {
      std::string out = kernels ? published_csv(*kernels) : "";
      if (comm) out += (out.empty() ? "" : "\n") + comm_csv(*comm);
      return out;
    }
    case ReportFormat::json: {
      nlohmann::json j = kernels ? nlohmann::json::parse(published_json(*kernels))
                                 : nlohmann::json{{"schema_version", kReportSchemaVersion},
                                                  {"moesim_version", MOESIM_VERSION},
                                                  {"provenance", provenance_json()}};
      if (comm) j["communication"] = comm_json(*comm);
      return j.dump(2) + "\n";
    }
    case ReportFormat::markdown: {
      std::string out = kernels ? published_table(*kernels) : "";
      if (comm) out += (out.empty() ? "" : "\n") + comm_table(*comm);
      return "```text\n" + out + "```\n";
    }
  }
  throw InputError("--format: expected table, json, csv or markdown");
}

}  // namespace moesim
