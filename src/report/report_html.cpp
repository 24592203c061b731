// Self-contained HTML report with inline SVG charts (see report_html.hpp).
#include "src/report/report_html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "src/common/error.hpp"
#include "src/report/check.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

// Records of a step run's strategy row: "num_records" (reports since `--records` became opt-in), else the
// length of its "records" list (older reports); 0 for batch runs.
size_t record_count(const nlohmann::json& s) {
  if (s.contains("num_records") && s["num_records"].is_number_unsigned()) return s["num_records"].get<size_t>();
  return s.contains("records") && s["records"].is_array() ? s["records"].size() : 0;
}

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, int precision = 3) { return text::fixed(v, precision); }

double as_number(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

// Vertical bars of one strategy's per-expert load, with the mean as a dashed line. `over` says what the
// load covers ("" for one batch).
std::string load_bars(const std::string& label, const std::vector<double>& load, const std::string& over) {
  const double w = 640, h = 160, pad = 30;
  const double max_load = std::max(1.0, *std::max_element(load.begin(), load.end()));
  double mean = 0;
  for (double x : load) mean += x;
  mean /= std::max<size_t>(1, load.size());
  const double bw = (w - 2 * pad) / std::max<size_t>(1, load.size());
  std::ostringstream os;
  os << "<figure class=\"load\"><figcaption>" << esc(label) << ": assignments per expert" << esc(over) << "</figcaption>"
     << "<svg class=\"load-bars\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " " << h
     << "\" role=\"img\">";
  for (size_t e = 0; e < load.size(); ++e) {
    const double bh = (h - 2 * pad) * load[e] / max_load;
    os << "<rect class=\"bar\" x=\"" << num(pad + e * bw + 1, 1) << "\" y=\"" << num(h - pad - bh, 1) << "\" width=\""
       << num(std::max(1.0, bw - 2), 1) << "\" height=\"" << num(bh, 1) << "\"><title>expert " << e << ": "
       << num(load[e], 0) << "</title></rect>";
  }
  const double my = h - pad - (h - 2 * pad) * mean / max_load;
  os << "<line class=\"mean\" x1=\"" << pad << "\" x2=\"" << w - pad << "\" y1=\"" << num(my, 1) << "\" y2=\""
     << num(my, 1) << "\"/><text x=\"" << w - pad << "\" y=\"" << num(my - 4, 1)
     << "\" text-anchor=\"end\">mean " << num(mean, 1) << "</text>"
     << "<text x=\"" << pad << "\" y=\"" << h - 8 << "\">expert 0.." << load.size() - 1 << "; max " << num(max_load, 0)
     << "</text></svg></figure>\n";
  return os.str();
}

// Horizontal bars of one value per strategy, with a reference line at 1.
std::string value_bars(const std::string& css_class, const std::string& title,
                       const std::vector<std::pair<std::string, double>>& values) {
  const double w = 640, row = 22, left = 220, pad = 10;
  const double h = values.size() * row + 2 * pad + 16;
  double max_v = 1.0;
  for (const auto& [l, v] : values)
    if (std::isfinite(v)) max_v = std::max(max_v, v);
  const double scale = (w - left - 60) / max_v;
  std::ostringstream os;
  os << "<figure><figcaption>" << esc(title) << "</figcaption><svg class=\"" << css_class << "\" width=\"" << w
     << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " " << h << "\" role=\"img\">";
  for (size_t i = 0; i < values.size(); ++i) {
    const double y = pad + i * row;
    const double v = std::isfinite(values[i].second) ? values[i].second : 0;
    os << "<text x=\"" << left - 6 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">" << esc(values[i].first)
       << "</text><rect class=\"bar\" x=\"" << left << "\" y=\"" << y + 3 << "\" width=\"" << num(v * scale, 1)
       << "\" height=\"" << row - 6 << "\"/><text x=\"" << num(left + v * scale + 4, 1) << "\" y=\"" << y + 15
       << "\">" << num(values[i].second) << "</text>";
  }
  const double x1 = left + scale;
  os << "<line class=\"mean\" x1=\"" << num(x1, 1) << "\" x2=\"" << num(x1, 1) << "\" y1=\"" << pad << "\" y2=\""
     << h - pad - 16 << "\"/><text x=\"" << num(x1, 1) << "\" y=\"" << h - 6 << "\" text-anchor=\"middle\">1</text>"
     << "</svg></figure>\n";
  return os.str();
}

// Polyline of the per-batch imbalance series of each strategy that has one.
std::string series_chart(const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  const double w = 780, h = 220, pad = 36, legend = 150;  // the legend sits right of the plot
  size_t n = 0;
  double max_v = 1.0;
  for (const auto& [l, s] : series) {
    n = std::max(n, s.size());
    for (double v : s) max_v = std::max(max_v, v);
  }
  std::ostringstream os;
  os << "<figure><figcaption>imbalance (max/mean load) per batch</figcaption><svg class=\"series\" width=\"" << w
     << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " " << h << "\" role=\"img\">";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"};
  size_t c = 0;
  for (const auto& [label, s] : series) {
    os << "<polyline fill=\"none\" stroke=\"" << colors[c % 9] << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < s.size(); ++i) {
      const double x = pad + (w - legend - 2 * pad) * (n > 1 ? double(i) / (n - 1) : 0.5);
      const double y = h - pad - (h - 2 * pad) * (s[i] / max_v);
      os << num(x, 1) << "," << num(y, 1) << " ";
    }
    os << "\"><title>" << esc(label) << "</title></polyline><text x=\"" << w - legend + 6 << "\" y=\"" << 14 + 14 * c
       << "\" fill=\"" << colors[c % 9] << "\">" << esc(label) << "</text>";
    ++c;
  }
  os << "<text x=\"" << pad << "\" y=\"" << h - 10 << "\">batch 1.." << n << "; top " << num(max_v, 2)
     << "</text></svg></figure>\n";
  return os.str();
}

// The expert bias of one strategy's layer after each of its updates: one polyline per expert, over the
// updates in order (batches, or steps of a step-structured run), on a signed axis through 0.
std::string bias_chart(const std::string& label, int layer, const std::vector<std::vector<double>>& updates) {
  const double w = 780, h = 220, pad = 36, legend = 150;
  const size_t n = updates.size();
  size_t experts = 0;
  double lo = 0.0, hi = 0.0;
  for (const auto& b : updates) {
    experts = std::max(experts, b.size());
    for (double v : b) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (hi - lo <= 0) hi = lo + 1e-3;
  auto y_of = [&](double v) { return h - pad - (h - 2 * pad) * ((v - lo) / (hi - lo)); };
  std::ostringstream os;
  os << "<figure><figcaption>" << esc(label) << ": expert bias of layer " << layer
     << " after each update</figcaption><svg class=\"bias\" width=\"" << w << "\" height=\"" << h
     << "\" viewBox=\"0 0 " << w << " " << h << "\" role=\"img\">";
  os << "<line x1=\"" << pad << "\" x2=\"" << w - legend - pad << "\" y1=\"" << num(y_of(0.0), 1) << "\" y2=\""
     << num(y_of(0.0), 1) << "\" stroke=\"#999\"/>";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"};
  for (size_t e = 0; e < experts; ++e) {
    os << "<polyline fill=\"none\" stroke=\"" << colors[e % 9] << "\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < n; ++i) {
      if (e >= updates[i].size()) continue;
      const double x = pad + (w - legend - 2 * pad) * (n > 1 ? double(i) / (n - 1) : 0.5);
      os << num(x, 1) << "," << num(y_of(updates[i][e]), 1) << " ";
    }
    os << "\"><title>expert " << e << "</title></polyline>";
    if (e < 12) {
      os << "<text x=\"" << w - legend + 6 << "\" y=\"" << 14 + 14 * e << "\" fill=\"" << colors[e % 9] << "\">expert "
         << e << "</text>";
    }
  }
  os << "<text x=\"" << pad << "\" y=\"" << h - 10 << "\">update 1.." << n << "; bias " << num(lo, 4) << " to "
     << num(hi, 4) << "</text></svg></figure>\n";
  return os.str();
}

// One bias chart per strategy and layer, from its expert_bias_updates (aux_free_bias); "" when none.
std::string bias_charts(const nlohmann::json& run) {
  std::ostringstream os;
  for (const auto& s : run["strategies"]) {
    if (!s.contains("expert_bias_updates") || !s["expert_bias_updates"].is_array()) continue;
    std::vector<int> layers;
    for (const auto& u : s["expert_bias_updates"]) {
      const int layer = u.value("layer", 0);
      if (std::find(layers.begin(), layers.end(), layer) == layers.end()) layers.push_back(layer);
    }
    std::sort(layers.begin(), layers.end());
    for (int layer : layers) {
      std::vector<std::vector<double>> updates;
      for (const auto& u : s["expert_bias_updates"]) {
        if (u.value("layer", 0) == layer && u.contains("bias") && u["bias"].is_array())
          updates.push_back(u["bias"].get<std::vector<double>>());
      }
      if (!updates.empty()) os << bias_chart(s["strategy"].get<std::string>(), layer, updates);
    }
  }
  const std::string charts = os.str();
  return charts.empty() ? "" : "<h2>Expert bias (aux_free_bias)</h2>\n" + charts;
}

// One strategy's expert-parallel plan: a column per device, its slots stacked by the planner's load and
// coloured by logical expert (the golden-angle hue of its id), the device's planned load beneath.
std::string plan_chart(const std::string& label, const nlohmann::json& plan) {
  const auto expert = plan["expert"].get<std::vector<int>>();
  const auto device = plan["device"].get<std::vector<int>>();
  const auto slot_load = plan["slot_load"].get<std::vector<double>>();
  const auto device_load = plan["device_load"].get<std::vector<double>>();
  if (expert.size() != device.size() || expert.size() != slot_load.size() || device_load.empty()) return "";
  const double w = 640, h = 200, pad = 30;
  const double top = std::max(1e-9, *std::max_element(device_load.begin(), device_load.end()));
  const double cw = (w - 2 * pad) / device_load.size();
  std::vector<double> filled(device_load.size(), 0.0);
  std::ostringstream os;
  os << "<figure class=\"plan\"><figcaption>" << esc(label) << ": slots per device, coloured by expert (predicted "
     << "balancedness " << num(plan.value("predicted_balancedness", 1.0)) << ", realised "
     << num(plan.value("realised_balancedness", 1.0)) << ", colocated replicas " << plan.value("colocated_replicas", 0)
     << ")</figcaption><svg class=\"plan-slots\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w
     << " " << h << "\" role=\"img\">";
  for (size_t i = 0; i < expert.size(); ++i) {
    const int d = device[i];
    if (d < 0 || static_cast<size_t>(d) >= device_load.size()) continue;
    const double sh = (h - 2 * pad) * slot_load[i] / top;
    const double y = h - pad - filled[d] - sh;
    filled[d] += sh;
    os << "<rect class=\"slot\" x=\"" << num(pad + d * cw + 2, 1) << "\" y=\"" << num(y, 1) << "\" width=\""
       << num(std::max(1.0, cw - 4), 1) << "\" height=\"" << num(sh, 1) << "\" fill=\"hsl("
       << num(std::fmod(expert[i] * 137.508, 360.0), 1) << ",55%,55%)\" stroke=\"#fff\"><title>slot " << i
       << ": expert " << expert[i] << ", device " << d << ", load " << num(slot_load[i], 1) << "</title></rect>";
  }
  for (size_t d = 0; d < device_load.size(); ++d) {
    os << "<text x=\"" << num(pad + (d + 0.5) * cw, 1) << "\" y=\"" << h - 10 << "\" text-anchor=\"middle\">d" << d
       << " " << num(device_load[d], 0) << "</text>";
  }
  os << "</svg></figure>\n";
  return os.str();
}

// "Where the modeled time goes": each strategy's erosion on its primary placement (expert_parallel when
// modeled, else single), in microseconds; "" when the result carries no erosion (an older schema).
std::string erosion_table(const nlohmann::json& run) {
  std::ostringstream rows;
  std::string placement;
  for (const auto& s : run["strategies"]) {
    if (!s.contains("modeled") || !s["modeled"].is_object()) continue;
    const auto& modeled = s["modeled"];
    const char* name = modeled.contains("expert_parallel") ? "expert_parallel" : "single";
    if (!modeled.contains(name) || !modeled[name].contains("erosion")) continue;
    placement = name;
    const auto& x = modeled[name]["erosion"];
    const auto& parts = x["parts"];
    auto us = [](const nlohmann::json& v) { return v.is_number() ? num(v.get<double>() * 1e6, 1) : std::string("-"); };
    rows << "<tr><td>" << esc(s["strategy"].get<std::string>()) << "</td><td>" << us(x["reference_s"]) << "</td><td>"
         << us(parts["imbalance_s"]) << "</td><td>" << us(parts.value("imbalance_tiles_s", nlohmann::json(0.0)))
         << "</td><td>" << us(parts["quantization_s"]) << "</td><td>" << us(parts["padding_s"])
         << "</td><td>" << us(parts["communication_s"]) << "</td><td>" << us(x["actual_s"]) << "</td><td>"
         << us(x["dropped_work_s"]) << "</td></tr>\n";
  }
  if (placement.empty()) return "";
  return "<h2>Where the modeled time goes (" + placement +
         ", us)</h2>\n<table id=\"erosion\"><thead><tr><th>strategy</th><th>reference</th><th>+ imbalance</th>"
         "<th>+ imbalance in tiles</th><th>+ tiles, waves, launches</th><th>+ padding</th><th>+ all-to-all</th><th>= modeled</th>"
         "<th>dropped work (not done)</th></tr></thead><tbody>\n" +
         rows.str() + "</tbody></table>\n";
}

}  // namespace

std::string render_html_report(const nlohmann::json& run, const std::string& source_name) {
  run_result_labels(run, source_name);  // validates the run JSON's shape
  const auto& exp = run.value("experiment", nlohmann::json::object());
  const std::string name = exp.value("name", std::string("moesim run"));
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>moesim: " << esc(name)
     << "</title>\n<style>body{font:14px sans-serif;margin:2em;max-width:1000px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"
        ".bar{fill:#4c78a8}.mean{stroke:#d62728;stroke-dasharray:4 3}svg text{font:11px sans-serif}"
        "figure{margin:1em 0}</style></head><body>\n";
  os << "<h1>moesim: " << esc(name) << "</h1>\n<p id=\"summary\">";
  if (run.contains("model")) {
    const auto& m = run["model"];
    os << "E=" << m.value("experts", 0) << ", k=" << m.value("top_k", 0) << ", hidden " << m.value("hidden", 0)
       << ", ffn " << m.value("ffn", 0) << ", " << esc(m.value("dtype", std::string()));
  }
  if (run.contains("hardware")) os << "; hardware " << esc(run["hardware"].value("name", std::string()));
  if (run.contains("workload")) os << "; " << run["workload"].value("num_tokens", 0) << " tokens per batch";
  bool stepped = false;
  for (const auto& s : run["strategies"]) stepped = stepped || record_count(s) > 1;
  if (stepped)
    os << "; step-structured run: rates and ratios are means over the records weighted by the tokens each routed, "
          "counts are sums, the modeled time the mean MoE layer of the decode records (all records without "
          "a decode phase)";
  os << "</p>\n<h2>Balance and cost per strategy</h2>\n<table id=\"metrics\"><thead><tr><th>strategy</th>"
        "<th>imbalance</th><th>cv</th><th>entropy_norm</th><th>drop_rate</th><th>aux_loss</th>"
        "<th>modeled time (us)</th><th>batching_efficiency</th><th>rank</th></tr></thead><tbody>\n";
  std::vector<std::pair<std::string, double>> efficiency, imbalance;
  std::vector<std::pair<std::string, std::vector<double>>> series;
  for (const auto& s : run["strategies"]) {
    const std::string label = s["strategy"].get<std::string>();
    const auto& m = s["metrics"];
    os << "<tr><td>" << esc(label) << "</td><td>" << num(as_number(m, "imbalance")) << "</td><td>"
       << num(as_number(m, "cv")) << "</td><td>" << num(as_number(m, "entropy_norm")) << "</td><td>"
       << num(as_number(m, "drop_rate"), 4) << "</td><td>" << num(as_number(m, "aux_loss")) << "</td><td>"
       << num(as_number(m, "modeled_time_s") * 1e6, 1) << "</td><td>" << num(as_number(m, "batching_efficiency"))
       << "</td><td>" << s.value("rank", 0) << "</td></tr>\n";
    efficiency.push_back({label, as_number(m, "batching_efficiency")});
    imbalance.push_back({label, as_number(m, "imbalance")});
    if (s.contains("series") && s["series"].contains("imbalance"))
      series.push_back({label, s["series"]["imbalance"].get<std::vector<double>>()});
  }
  os << "</tbody></table>\n<h2>Batching efficiency</h2>\n"
     << value_bars("efficiency",
                   "the balanced counterfactual's time over the routing's: what imbalance costs, drops held out "
                   "(above 1: skew left experts idle whose weights balanced routing reads)",
                   efficiency)
     << erosion_table(run)
     << "<h2>Imbalance</h2>\n" << value_bars("imbalance", "max load / mean load (1 is perfect)", imbalance);
  if (!series.empty()) os << series_chart(series);
  os << bias_charts(run);
  os << "<h2>Per-expert load</h2>\n";
  for (const auto& s : run["strategies"]) {
    if (!s["metrics"].contains("load") || !s["metrics"]["load"].is_array() || s["metrics"]["load"].empty()) continue;
    const size_t records = record_count(s);
    const std::string over = records > 1 ? ", summed over the " + std::to_string(records) + " records" : "";
    os << load_bars(s["strategy"].get<std::string>(), s["metrics"]["load"].get<std::vector<double>>(), over);
  }
  bool plan_header = false;
  for (const auto& s : run["strategies"]) {
    if (!s.contains("modeled") || !s["modeled"].is_object() || !s["modeled"].contains("expert_parallel")) continue;
    const auto& ep = s["modeled"]["expert_parallel"];
    if (!ep.contains("plan") || !ep["plan"].contains("slot_load")) continue;
    if (!plan_header) os << "<h2>Expert-parallel placement</h2>\n";
    plan_header = true;
    os << plan_chart(s["strategy"].get<std::string>(), ep["plan"]);
  }
  os << "<p><small>moesim " << esc(run.value("moesim_version", std::string())) << ", from " << esc(source_name)
     << "</small></p>\n</body></html>\n";
  return os.str();
}

}  // namespace moesim
