// Formats a sweep's rows (src/sweep/run_sweep.hpp) as an aligned table (modeled times in microseconds
// for the whole model, measured in milliseconds for one layer), CSV with SI units, or JSON
// (schema_version, axes, rows). Deterministic. Host only. Covered by tests/sweep/run_sweep_test.cpp.
#include "src/report/sweep_report.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/provenance.hpp"
#include "src/report/report.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using text::csv_cell;
using text::fixed;
using text::real;

bool any_measured(const SweepResult& s) {
  return std::any_of(s.rows.begin(), s.rows.end(), [](const SweepRow& r) { return r.measured; });
}

bool any_expert_parallel(const SweepResult& s) {
  return std::any_of(s.rows.begin(), s.rows.end(), [](const SweepRow& r) { return r.placement == "expert_parallel"; });
}

double measured_efficiency(const SweepRow& r) {
  return r.measured && r.measured_layer_s > 0 ? r.measured_balanced_layer_s / r.measured_layer_s : NAN;
}

// The table's measured efficiency: none where the point's measured times are noisy (noise_legend).
double shown_measured_efficiency(const SweepRow& r) { return r.measured_noise.noisy ? NAN : measured_efficiency(r); }

// Why some points show meas_eff "-": how many, and the first one's values and reason. Empty when none.
std::string noise_legend(const SweepResult& s) {
  size_t noisy = 0;
  const SweepRow* first = nullptr;
  for (const SweepRow& r : s.rows) {
    if (!r.measured || !r.measured_noise.noisy) continue;
    if (noisy++ == 0) first = &r;
  }
  if (first == nullptr) return "";
  std::string where;
  for (size_t a = 0; a < s.axes.size(); ++a) where += (a ? ", " : "") + s.axes[a].key + "=" + first->values[a];
  std::ostringstream os;
  os << "meas_eff -: " << noisy << " of " << s.rows.size() << " point(s) with noisy measured times";
  if (noisy > 1) os << " (each point's reason: --format json, rows[].measured.noise_reason), the first";
  os << " " << where << ": " << first->measured_noise.reason
     << " (noise); rerun on an idle machine with execute.repeats >= 3\n";
  return os.str();
}

struct Column {
  std::string header;
  std::function<std::string(const SweepRow&)> cell;
  int priority = 0;  // text::fit_columns: 0 always in the table, then the smaller numbers first
};

// The table's columns: times in microseconds (whole model), measured in milliseconds (one layer).
std::vector<Column> table_columns(const SweepResult& s) {
  std::vector<Column> cols;
  for (size_t a = 0; a < s.axes.size(); ++a)
    cols.push_back({s.axes[a].key, [a](const SweepRow& r) { return r.values[a]; }});
  auto us = [](double CostBreakdown::*col, bool balanced) {
    return [col, balanced](const SweepRow& r) { return fixed((balanced ? r.balanced : r.actual).*col * 1e6, 1); };
  };
  cols.push_back({"tokens", [](const SweepRow& r) { return std::to_string(r.num_tokens); }, 2});
  cols.push_back({"crit_batch", [](const SweepRow& r) { return fixed(r.critical_batch, 1); }, 6});
  cols.push_back({"ideal_us", us(&CostBreakdown::ideal_s, false), 4});
  cols.push_back({"quant_us", us(&CostBreakdown::quantized_s, false), 0});
  cols.push_back({"bal_ideal_us", us(&CostBreakdown::ideal_s, true), 5});
  cols.push_back({"bal_quant_us", us(&CostBreakdown::quantized_s, true), 1});
  cols.push_back({"ref_us", [](const SweepRow& r) { return fixed(r.erosion.reference_s * 1e6, 1); }, 3});
  cols.push_back({"imb_us", [](const SweepRow& r) { return fixed(r.erosion.imbalance_s * 1e6, 1); }, 0});
  cols.push_back({"imb_tile_us", [](const SweepRow& r) { return fixed(r.erosion.imbalance_tiles_s * 1e6, 1); }, 0});
  cols.push_back({"comm_imb_us", [](const SweepRow& r) { return fixed(r.erosion.communication_imbalance_s * 1e6, 1); },
                  any_expert_parallel(s) ? 0 : 7});
  cols.push_back({"imb_cost", [](const SweepRow& r) { return fixed(100.0 * imbalance_cost_fraction(r.erosion), 1) + "%"; }, 0});
  cols.push_back({"idle_save", [](const SweepRow& r) { return fixed(100.0 * idle_saving_fraction(r.erosion), 1) + "%"; }, 0});
  cols.push_back({"batch_eff", [](const SweepRow& r) { return fixed(r.batching_efficiency, 3); }, 8});
  cols.push_back({"us_per_token", [](const SweepRow& r) { return fixed(r.time_per_token_s * 1e6, 3); }, 0});
  cols.push_back({"imbalance", [](const SweepRow& r) { return fixed(r.imbalance, 3); }, 0});
  cols.push_back({"drop_rate", [](const SweepRow& r) { return fixed(r.drop_rate, 4); }, 1});
  if (any_measured(s)) {
    cols.push_back({"meas_experts_ms", [](const SweepRow& r) { return r.measured ? fixed(r.measured_experts_s * 1e3, 3) : "-"; }, 3});
    cols.push_back({"meas_layer_ms", [](const SweepRow& r) { return r.measured ? fixed(r.measured_layer_s * 1e3, 3) : "-"; }, 2});
    cols.push_back({"meas_eff", [](const SweepRow& r) { return fixed(shown_measured_efficiency(r), 3); }, 2});
  }
  return cols;
}

// What redundant experts buy, when placement.replicas is an axis: each point with replicas against the point of
// the same other values without them, "placement.devices=32: 32 redundant experts: MoE layers 43.4 -> 39.0 ms,
// 1.11x; balancedness 0.61 -> 0.78"; "" otherwise.
std::string replica_lines(const SweepResult& s) {
  size_t axis = s.axes.size();
  for (size_t a = 0; a < s.axes.size(); ++a)
    if (s.axes[a].keys.size() == 1 && s.axes[a].keys.front() == "placement.replicas") axis = a;
  if (axis == s.axes.size()) return "";
  std::ostringstream os;
  for (const SweepRow& r : s.rows) {
    if (r.values[axis] == "0") continue;
    const SweepRow* base = nullptr;
    for (const SweepRow& b : s.rows) {
      if (b.values[axis] != "0") continue;
      bool same = true;
      for (size_t a = 0; a < s.axes.size(); ++a) same = same && (a == axis || b.values[a] == r.values[a]);
      if (same) base = &b;
    }
    if (!base) continue;
    std::string others;
    for (size_t a = 0; a < s.axes.size(); ++a)
      if (a != axis) others += (others.empty() ? "" : " ") + s.axes[a].key + "=" + r.values[a];
    const double before = base->actual.quantized_s, after = r.actual.quantized_s;
    os << (others.empty() ? std::string() : others + ": ") << r.values[axis] << " redundant experts: MoE layers "
       << fixed(before * 1e3, 1) << " -> " << fixed(after * 1e3, 1) << " ms, " << fixed(after > 0 ? before / after : 1.0, 2)
       << "x; balancedness " << fixed(base->balancedness, 2) << " -> " << fixed(r.balancedness, 2) << "\n";
  }
  return os.str();
}

// "label: the knee ..." for every curve of a batch sweep, and the rule; "" without a batch axis.
std::string knee_lines(const SweepResult& s) {
  if (s.knees.empty()) return "";
  std::ostringstream os;
  auto tokens = [&](const std::optional<int64_t>& t, const SweepKnee& k) {
    return t ? std::to_string(*t) + " tokens" : "beyond " + std::to_string(s.rows[k.rows.back()].num_tokens);
  };
  os << "knee (time per token falls less than 29% per doubling of the batch past it):\n";
  for (const SweepKnee& k : s.knees) {
    const SweepRow& first = s.rows[k.rows.front()];
    std::string label;
    for (size_t a = 0; a < s.axes.size(); ++a)
      if (!k.values[a].empty()) label += (label.empty() ? "" : ", ") + s.axes[a].key + "=" + k.values[a];
    if (label.empty()) label = first.gating;
    if (k.tokens == k.balanced_tokens)
      os << "  " << label << ": this routing keeps the knee where balanced routing has it, at " << tokens(k.tokens, k);
    else
      os << "  " << label << ": this routing moves the knee from " << tokens(k.balanced_tokens, k) << " (balanced) to "
         << tokens(k.tokens, k);
    if (k.imbalance_cost_past) os << " and costs " << fixed(100.0 * *k.imbalance_cost_past, 1)
                                     << "% past it (imbalance over the balanced time)";
    os << "\n";
  }
  return os.str();
}

// The table's columns as a Markdown table, then the same legend and knee lines as the table.
std::string format_markdown(const SweepResult& s);

std::string format_table(const SweepResult& s, bool wide) {
  const std::vector<Column> cols = table_columns(s);
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width(cols.size());
  std::vector<int> priority;
  for (size_t c = 0; c < cols.size(); ++c) {
    width[c] = cols[c].header.size();
    priority.push_back(c < s.axes.size() ? 0 : cols[c].priority);
  }
  for (const SweepRow& r : s.rows) {
    std::vector<std::string> line;
    for (size_t c = 0; c < cols.size(); ++c) {
      line.push_back(cols[c].cell(r));
      width[c] = std::max(width[c], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  const std::vector<size_t> fit = text::fit_columns(width, priority, wide ? 0 : text::kTerminalWidth);
  std::ostringstream os;
  auto emit_line = [&](const std::vector<std::string>& line) {
    for (size_t j = 0; j < fit.size(); ++j) {
      const size_t c = fit[j];
      const std::string pad(width[c] - line[c].size(), ' ');
      os << (j ? "  " : "") << (c < s.axes.size() ? line[c] + pad : pad + line[c]);
    }
    os << "\n";
  };
  std::vector<std::string> header;
  for (const Column& c : cols) header.push_back(c.header);
  emit_line(header);
  for (const auto& line : cells) emit_line(line);
  if (fit.size() < cols.size()) {
    std::string left;
    for (size_t c = 0; c < cols.size(); ++c)
      if (std::find(fit.begin(), fit.end(), c) == fit.end()) left += (left.empty() ? "" : ", ") + header[c];
    os << text::wrap("(--wide adds " + left + "; --format csv, json and markdown have every column)") << "\n";
  }
  const SweepRow* first = s.rows.empty() ? nullptr : &s.rows.front();
  std::ostringstream legend;  // wrapped within the width unless --wide (the knee lines stay whole: one a curve)
  legend << "\n" << s.experiment << " (" << s.source_file << "), " << s.rows.size() << " points";
  if (first) {
    legend << "; hardware " << first->hardware << ", placement " << first->placement;
    if (first->placement == "expert_parallel") legend << " over " << first->devices << " devices";
  }
  legend << "\n";
  if (first)
    legend << "modeled times (*_us) cover the " << first->moe_layers << " MoE layers of model.layers = " << first->layers
       << ", each costed as the simulated MoE layer (same loads): the expert FFNs of one forward pass\n";
  legend << "ideal: roofline at the profile's achieved rates; quant: the kernel model (row tiles in waves, the K-step "
        "floor, the profile's efficiencies and the layer's launches), the number run prints;\n"
        "bal_*: the same tokens under perfectly balanced routing; ref_us: the delivered assignments balanced, ideal; "
        "imb_us: the straggler on the ideal roofline; imb_tile_us: the tiles and floors the uneven loads pay beyond "
        "the same assignments over the same active experts; comm_imb_us: what the skew of the received tokens adds "
        "to the all-to-all (each the mean over one tile phase of batch sizes); imb_cost: their sum over quant_us, "
        "what imbalance costs; idle_save: what skew saves by leaving experts idle, over quant_us; batch_eff (--wide): "
        "the balanced counterfactual's time over the routing's, net of both;\n"
        "crit_batch = peak_flops x bytes_per_weight / (2 x bandwidth), weights only\n";
  os << (wide ? legend.str() : text::wrap(legend.str()));
  os << knee_lines(s);
  os << replica_lines(s);
  if (any_measured(s))
    os << "meas_*: one executed layer at the execute: size on this CPU (not x layers); meas_eff = balanced / actual\n"
       << noise_legend(s);
  return os.str();
}

std::string format_markdown(const SweepResult& s) {
  const std::vector<Column> cols = table_columns(s);
  std::ostringstream os;
  os << "|";
  for (const Column& c : cols) os << " " << c.header << " |";
  os << "\n|";
  for (size_t c = 0; c < cols.size(); ++c) os << (c < s.axes.size() ? " :--- |" : " ---: |");
  os << "\n";
  for (const SweepRow& r : s.rows) {
    os << "|";
    for (const Column& c : cols) os << " " << c.cell(r) << " |";
    os << "\n";
  }
  // The legend of the table, as bullets.
  const std::string table = format_table(s, true);
  const size_t legend = table.find("\n\n");
  if (legend != std::string::npos) {
    std::istringstream lines(table.substr(legend + 2));
    os << "\n";
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) os << (line.rfind("  ", 0) == 0 ? "  - " + line.substr(2) : "- " + line) << "\n";
  }
  return os.str();
}

// The curve row `row` belongs to; null without a batch axis.
const SweepKnee* knee_of(const SweepResult& s, size_t row) {
  for (const SweepKnee& k : s.knees)
    if (std::find(k.rows.begin(), k.rows.end(), row) != k.rows.end()) return &k;
  return nullptr;
}

std::string format_csv(const SweepResult& s) {
  const bool measured = any_measured(s);
  std::ostringstream os;
  for (const SweepAxis& a : s.axes) os << csv_cell(a.key) << ",";
  os << "gating,profile,placement,devices,num_tokens,experts,top_k,layers,moe_layers,critical_batch,"
        "time_ideal_s,time_quantized_s,"
        "balanced_ideal_s,balanced_quantized_s,"
        "batching_efficiency,time_per_token_s,compute_bound_experts,imbalance,drop_rate,"
        "erosion_reference_s,erosion_imbalance_s,erosion_imbalance_tiles_s,erosion_quantization_s,erosion_padding_s,"
        "erosion_micro_batch_s,erosion_communication_s,erosion_communication_imbalance_s,"
        "dropped_work_s,knee_tokens,balanced_knee_tokens,erosion_idle_saving_s,erosion_tile_phase_s,imbalance_cost,"
        "idle_saving,batching_efficiency_exact";
  if (measured)
    os << ",measured_layer_s,measured_experts_s,measured_balanced_layer_s,measured_batching_efficiency,"
          "measured_layer_min_s,measured_layer_max_s,measured_balanced_layer_min_s,measured_balanced_layer_max_s,"
          "measured_noisy";
  os << "\n";
  for (const SweepRow& r : s.rows) {
    for (const std::string& v : r.values) os << csv_cell(v) << ",";
    os << r.gating << "," << csv_cell(r.hardware) << "," << r.placement << "," << r.devices << "," << r.num_tokens
       << "," << r.experts << "," << r.top_k << "," << r.layers << "," << r.moe_layers << "," << real(r.critical_batch) << "," << real(r.actual.ideal_s) << ","
       << real(r.actual.quantized_s) << "," << real(r.balanced.ideal_s) << ","
       << real(r.balanced.quantized_s) << "," << real(r.batching_efficiency)
       << "," << real(r.time_per_token_s) << "," << real(r.compute_bound_experts) << "," << real(r.imbalance) << ","
       << real(r.drop_rate) << "," << real(r.erosion.reference_s) << "," << real(r.erosion.imbalance_s) << ","
       << real(r.erosion.imbalance_tiles_s) << ","
       << real(r.erosion.quantization_s) << "," << real(r.erosion.padding_s) << "," << real(r.erosion.micro_batch_s)
       << "," << real(r.erosion.communication_s) << "," << real(r.erosion.communication_imbalance_s) << ","
       << real(r.erosion.dropped_work_s);
    const SweepKnee* knee = knee_of(s, static_cast<size_t>(&r - s.rows.data()));
    auto opt = [](const std::optional<int64_t>& t) { return t ? std::to_string(*t) : std::string(); };
    os << "," << (knee ? opt(knee->tokens) : "") << "," << (knee ? opt(knee->balanced_tokens) : "");
    os << "," << real(r.erosion.idle_saving_s) << "," << real(r.erosion.tile_phase_s) << ","
       << real(imbalance_cost_fraction(r.erosion)) << "," << real(idle_saving_fraction(r.erosion)) << ","
       << real(r.batching_efficiency_exact);
    if (measured) {
      if (r.measured)
        os << "," << real(r.measured_layer_s) << "," << real(r.measured_experts_s) << ","
           << real(r.measured_balanced_layer_s) << "," << real(measured_efficiency(r)) << ","
           << real(r.measured_layer_min_s) << "," << real(r.measured_layer_max_s) << ","
           << real(r.measured_balanced_layer_min_s) << "," << real(r.measured_balanced_layer_max_s) << ","
           << (r.measured_noise.noisy ? "true" : "false");
      else
        os << ",,,,,,,,,";
    }
    os << "\n";
  }
  return os.str();
}

std::string format_json(const SweepResult& s) {
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["moesim_version"] = MOESIM_VERSION;
  j["provenance"] = provenance_json();
  j["experiment"] = experiment_json(s.base, "");
  j["hardware"] = {{"name", s.hardware.name}, {"digest", hardware_digest(s.hardware)}};
  nlohmann::json axes = nlohmann::json::array();
  for (const SweepAxis& a : s.axes) axes.push_back({{"key", a.key}, {"keys", a.keys}, {"values", a.values}});
  j["axes"] = axes;
  j["note"] =
      "modeled times cover the model's MoE layers (moe_layers of model.layers), each costed as the simulated MoE "
      "layer; measured times are "
      "one executed layer at the execute: size";
  nlohmann::json rows = nlohmann::json::array();
  for (const SweepRow& r : s.rows) {
    nlohmann::json row;
    nlohmann::json values = nlohmann::json::object();
    for (size_t a = 0; a < s.axes.size(); ++a) values[s.axes[a].key] = r.values[a];
    row["values"] = values;
    row["gating"] = r.gating;
    row["hardware"] = r.hardware;
    row["hardware_digest"] = r.hardware_digest;
    row["placement"] = r.placement;
    row["devices"] = r.devices;
    row["num_tokens"] = r.num_tokens;
    row["experts"] = r.experts;
    row["top_k"] = r.top_k;
    row["layers"] = r.layers;
    row["moe_layers"] = r.moe_layers;
    row["critical_batch"] = r.critical_batch;
    row["actual"] = cost_json(r.actual);
    row["balanced"] = cost_json(r.balanced);
    row["erosion"] = erosion_json(r.erosion);
    row["batching_efficiency"] = r.batching_efficiency;
    row["roofline_efficiency"] = r.roofline_efficiency;
    row["batching_efficiency_exact"] = r.batching_efficiency_exact;
    row["balancedness"] = r.balancedness;
    row["time_per_token_s"] = r.time_per_token_s;
    row["compute_bound_experts"] = r.compute_bound_experts;
    row["imbalance"] = r.imbalance;
    row["drop_rate"] = r.drop_rate;
    if (!r.plan.expert.empty())
      row["plan"] = plan_json(r.plan, r.device_plan_load, r.predicted_balancedness, r.realised_balancedness);
    if (r.measured) {
      row["measured"] = {{"layer_s", r.measured_layer_s},
                         {"experts_s", r.measured_experts_s},
                         {"balanced_layer_s", r.measured_balanced_layer_s},
                         {"batching_efficiency", measured_efficiency(r)},
                         {"layer_min_s", r.measured_layer_min_s},
                         {"layer_max_s", r.measured_layer_max_s},
                         {"balanced_layer_min_s", r.measured_balanced_layer_min_s},
                         {"balanced_layer_max_s", r.measured_balanced_layer_max_s},
                         {"noisy", r.measured_noise.noisy},
                         {"noise_reason", r.measured_noise.reason}};
    }
    rows.push_back(row);
  }
  j["rows"] = rows;
  nlohmann::json knees = nlohmann::json::array();
  auto opt = [](const auto& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
  for (const SweepKnee& k : s.knees) {
    nlohmann::json values = nlohmann::json::object();
    for (size_t a = 0; a < s.axes.size(); ++a)
      if (!k.values[a].empty()) values[s.axes[a].key] = k.values[a];
    knees.push_back({{"values", values},
                     {"rows", k.rows},
                     {"knee_tokens", opt(k.tokens)},
                     {"balanced_knee_tokens", opt(k.balanced_tokens)},
                     {"imbalance_cost_past", opt(k.imbalance_cost_past)}});
  }
  j["knees"] = knees;
  j["knee_rule"] = "the smallest swept batch whose time per token falls by less than 1 - 1/sqrt(2) (29.3%) per doubling "
                   "to the next swept batch: elasticity ln(tpt0 / tpt1) / ln(n1 / n0) < 0.5, quantized column";
  return j.dump(2) + "\n";
}

}  // namespace

std::string format_sweep(const SweepResult& sweep, ReportFormat format, bool wide) {
  switch (format) {
    case ReportFormat::table: return format_table(sweep, wide);
    case ReportFormat::csv: return format_csv(sweep);
    case ReportFormat::json: return format_json(sweep);
    case ReportFormat::markdown: return format_markdown(sweep);
  }
  throw InputError("--format: expected table, json, csv or markdown");
}

}  // namespace moesim
