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

std::string esc(const std::string& s) { return text::html_escape(s); }

std::string num(double v, int precision = 3) { return text::fixed(v, precision); }

double as_number(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#8c564b", "#e377c2", "#7f7f7f", "#17becf"};

// A tick step of 1, 2 or 5 times a power of ten giving at most `ticks` ticks over `range` (> 0).
double nice_step(double range, int ticks) {
  if (!(range > 0) || !std::isfinite(range)) return 1.0;
  const double raw = range / std::max(1, ticks);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10.0 * p;
}

// A tick's text: as many decimals as the step needs.
std::string tick_text(double v, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  return num(std::fabs(v) < step * 1e-9 ? 0.0 : v, std::min(decimals, 6));
}

// A plot area [x0, x1] x [y0 (top), y1 (bottom)] in pixels with a value range on each axis, and the SVG
// of its axes: lines, ticks with their values, and a label for each axis.
struct Plot {
  double x0, x1, y0, y1;
  double xlo, xhi, ylo, yhi;
  double x(double v) const { return x0 + (x1 - x0) * (xhi > xlo ? (v - xlo) / (xhi - xlo) : 0.5); }
  double y(double v) const { return y1 - (y1 - y0) * (yhi > ylo ? (v - ylo) / (yhi - ylo) : 0.5); }
};

// The y axis of `p` (ticks at nice values of [ylo, yhi]) with its label written up the left side.
std::string y_axis(const Plot& p, const std::string& label) {
  std::ostringstream os;
  os << "<g class=\"axis y-axis\"><line x1=\"" << num(p.x0, 1) << "\" x2=\"" << num(p.x0, 1) << "\" y1=\"" << num(p.y0, 1)
     << "\" y2=\"" << num(p.y1, 1) << "\" stroke=\"#333\"/>";
  const double step = nice_step(p.yhi - p.ylo, 5);
  for (double v = std::ceil(p.ylo / step) * step; v <= p.yhi + step * 1e-9; v += step) {
    os << "<line x1=\"" << num(p.x0 - 4, 1) << "\" x2=\"" << num(p.x0, 1) << "\" y1=\"" << num(p.y(v), 1) << "\" y2=\""
       << num(p.y(v), 1) << "\" stroke=\"#333\"/><text x=\"" << num(p.x0 - 6, 1) << "\" y=\"" << num(p.y(v) + 4, 1)
       << "\" text-anchor=\"end\">" << tick_text(v, step) << "</text>";
  }
  const double mid = (p.y0 + p.y1) / 2;
  os << "<text class=\"axis-label\" x=\"12\" y=\"" << num(mid, 1) << "\" transform=\"rotate(-90 12 " << num(mid, 1)
     << ")\" text-anchor=\"middle\">" << esc(label) << "</text></g>";
  return os.str();
}

// The x axis of `p`: ticks at nice values (integers when `integer`), or the given (value, text) ticks, and
// its label under them.
std::string x_axis(const Plot& p, const std::string& label, bool integer,
                   const std::vector<std::pair<double, std::string>>& given = {}) {
  std::ostringstream os;
  os << "<g class=\"axis x-axis\"><line x1=\"" << num(p.x0, 1) << "\" x2=\"" << num(p.x1, 1) << "\" y1=\"" << num(p.y1, 1)
     << "\" y2=\"" << num(p.y1, 1) << "\" stroke=\"#333\"/>";
  std::vector<std::pair<double, std::string>> ticks = given;
  if (ticks.empty()) {
    double step = nice_step(p.xhi - p.xlo, std::max(2, static_cast<int>((p.x1 - p.x0) / 60)));
    if (integer) step = std::max(1.0, std::round(step));
    for (double v = std::ceil(p.xlo / step) * step; v <= p.xhi + step * 1e-9; v += step)
      ticks.push_back({v, tick_text(v, step)});
  }
  for (const auto& [v, t] : ticks) {
    os << "<line x1=\"" << num(p.x(v), 1) << "\" x2=\"" << num(p.x(v), 1) << "\" y1=\"" << num(p.y1, 1) << "\" y2=\""
       << num(p.y1 + 4, 1) << "\" stroke=\"#333\"/><text x=\"" << num(p.x(v), 1) << "\" y=\"" << num(p.y1 + 16, 1)
       << "\" text-anchor=\"middle\">" << esc(t) << "</text>";
  }
  os << "<text class=\"axis-label\" x=\"" << num((p.x0 + p.x1) / 2, 1) << "\" y=\"" << num(p.y1 + 32, 1)
     << "\" text-anchor=\"middle\">" << esc(label) << "</text></g>";
  return os.str();
}

std::string svg_open(const std::string& css_class, double w, double h) {
  std::ostringstream os;
  os << "<svg class=\"" << css_class << "\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " " << h
     << "\" role=\"img\">";
  return os.str();
}

// Vertical bars of one strategy's per-expert load, with the mean as a dashed line. `over` says what the
// load covers ("" for one batch). Any expert count: the bars narrow to a pixel, the x ticks thin out.
std::string load_bars(const std::string& label, const std::vector<double>& load, const std::string& over) {
  const double w = 680, h = 210;
  const double max_load = std::max(1.0, *std::max_element(load.begin(), load.end()));
  double mean = 0;
  for (double x : load) mean += x;
  mean /= std::max<size_t>(1, load.size());
  const double E = static_cast<double>(load.size());
  const Plot p{60, w - 16, 12, h - 44, -0.5, E - 0.5, 0, max_load * 1.05};
  const double bw = (p.x1 - p.x0) / std::max(1.0, E);
  std::ostringstream os;
  os << "<figure class=\"load\"><figcaption>" << esc(label) << ": assignments per expert" << esc(over) << " (mean "
     << num(mean, 1) << ", dashed)</figcaption>" << svg_open("load-bars", w, h);
  for (size_t e = 0; e < load.size(); ++e) {
    const double top = p.y(load[e]);
    os << "<rect class=\"bar\" x=\"" << num(p.x(double(e)) - bw / 2 + (bw > 3 ? 0.5 : 0), 1) << "\" y=\"" << num(top, 1)
       << "\" width=\"" << num(std::max(0.6, bw - (bw > 3 ? 1 : 0)), 2) << "\" height=\"" << num(p.y1 - top, 1)
       << "\"><title>expert " << e << ": " << num(load[e], 0) << "</title></rect>";
  }
  os << "<line class=\"mean\" x1=\"" << num(p.x0, 1) << "\" x2=\"" << num(p.x1, 1) << "\" y1=\"" << num(p.y(mean), 1)
     << "\" y2=\"" << num(p.y(mean), 1) << "\"><title>mean " << num(mean, 1) << "</title></line>"
     << y_axis(p, "assignments") << x_axis(p, "expert (" + std::to_string(load.size()) + ")", true) << "</svg></figure>\n";
  return os.str();
}

// Horizontal bars of one value per strategy, with a reference line at 1; `quantity` labels the value axis.
std::string value_bars(const std::string& css_class, const std::string& title, const std::string& quantity,
                       const std::vector<std::pair<std::string, double>>& values) {
  const double w = 680, row = 22, left = 230;
  const double h = values.size() * row + 60;
  double max_v = 1.0;
  for (const auto& [l, v] : values)
    if (std::isfinite(v)) max_v = std::max(max_v, v);
  const Plot p{left, w - 60, 8, h - 44, 0, max_v * 1.05, 0, 1};
  std::ostringstream os;
  os << "<figure><figcaption>" << esc(title) << "</figcaption>" << svg_open(css_class, w, h);
  for (size_t i = 0; i < values.size(); ++i) {
    const double y = p.y0 + i * row;
    const double v = std::isfinite(values[i].second) ? values[i].second : 0;
    os << "<text x=\"" << left - 6 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">" << esc(values[i].first)
       << "</text><rect class=\"bar\" x=\"" << left << "\" y=\"" << y + 3 << "\" width=\"" << num(p.x(v) - left, 1)
       << "\" height=\"" << row - 6 << "\"/><text x=\"" << num(p.x(v) + 4, 1) << "\" y=\"" << y + 15 << "\">"
       << num(values[i].second) << "</text>";
  }
  os << "<line class=\"mean\" x1=\"" << num(p.x(1), 1) << "\" x2=\"" << num(p.x(1), 1) << "\" y1=\"" << p.y0 << "\" y2=\""
     << p.y1 << "\"/>" << x_axis(p, quantity, false) << "</svg></figure>\n";
  return os.str();
}

// What the x axis of a series over a run's batches or records counts: "batch", or a step run's records with
// their steps when the report knows how many records a step has (the decoder: its executed layers).
struct SeriesAxis {
  std::string label = "batch";
  size_t per_step = 0;  // records a step has; 0: the entries are batches (or records of unknown steps)
};

// Polyline of the per-batch (or per-record) imbalance series of each strategy that has one.
std::string series_chart(const std::vector<std::pair<std::string, std::vector<double>>>& series, const SeriesAxis& axis) {
  // The legend sits right of the plot, as wide as its longest label (11 px sans: at most about 6.5 px a
  // character), so that every label shows whole.
  size_t longest = 0;
  for (const auto& [l, s] : series) longest = std::max(longest, l.size());
  const double legend = std::max(150.0, 6.5 * static_cast<double>(longest) + 12), w = 630 + legend;
  const double h = std::max(240.0, 14.0 * static_cast<double>(series.size()) + 60);
  size_t n = 0;
  double max_v = 1.0;
  for (const auto& [l, s] : series) {
    n = std::max(n, s.size());
    for (double v : s) max_v = std::max(max_v, v);
  }
  const Plot p{60, w - legend - 10, 12, h - 44, 1, std::max(2.0, double(n)), 0, max_v * 1.05};
  std::ostringstream os;
  os << "<figure><figcaption>imbalance (max/mean load) per " << esc(axis.label) << "</figcaption>"
     << svg_open("series", w, h);
  size_t c = 0;
  for (const auto& [label, s] : series) {
    os << "<polyline fill=\"none\" stroke=\"" << kColors[c % 9] << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < s.size(); ++i) os << num(p.x(double(i + 1)), 1) << "," << num(p.y(s[i]), 1) << " ";
    os << "\"><title>" << esc(label) << "</title></polyline><text x=\"" << w - legend + 6 << "\" y=\"" << 14 + 14 * c
       << "\" fill=\"" << kColors[c % 9] << "\">" << esc(label) << "</text>";
    ++c;
  }
  std::vector<std::pair<double, std::string>> ticks;
  std::string xlabel = axis.label;
  if (axis.per_step > 0) {
    // Ticks at the first record of every k-th step (k so that ticks stay 60 px apart), labelled by the step.
    const size_t steps = (n + axis.per_step - 1) / axis.per_step;
    size_t every = 1;
    while (steps / every > static_cast<size_t>((p.x1 - p.x0) / 60)) every = every < 5 ? every + 1 : every * 2;
    for (size_t st = 0; st < steps; st += every) ticks.push_back({double(st * axis.per_step + 1), std::to_string(st)});
    xlabel = "step (0: prefill), each of " + std::to_string(axis.per_step) + " layer records";
  }
  os << y_axis(p, "max / mean") << x_axis(p, xlabel, true, ticks) << "</svg></figure>\n";
  return os.str();
}

// The expert bias of one strategy's layer after each of its updates, over the updates in order (batches, or
// steps of a step-structured run), on a signed axis through 0. Up to 12 experts: a line and a legend entry
// each; more: every expert a thin grey line, and the 3 highest and 3 lowest final biases drawn and named.
std::string bias_chart(const std::string& label, int layer, const std::vector<std::vector<double>>& updates) {
  const double w = 780, h = 240, legend = 150;
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
  const Plot p{68, w - legend - 10, 12, h - 44, 1, std::max(2.0, double(n)), lo, hi};
  std::ostringstream os;
  os << "<figure><figcaption>" << esc(label) << ": expert bias of layer " << layer << " after each update</figcaption>"
     << svg_open("bias", w, h);
  os << "<line x1=\"" << num(p.x0, 1) << "\" x2=\"" << num(p.x1, 1) << "\" y1=\"" << num(p.y(0.0), 1) << "\" y2=\""
     << num(p.y(0.0), 1) << "\" stroke=\"#999\"/>";
  // The experts named in the legend: all of them up to 12, else the extremes of the last update.
  std::vector<size_t> named;
  if (experts <= 12) {
    for (size_t e = 0; e < experts; ++e) named.push_back(e);
  } else {
    std::vector<size_t> order(experts);
    for (size_t e = 0; e < experts; ++e) order[e] = e;
    const std::vector<double>& last = updates.back();
    auto final_bias = [&](size_t e) { return e < last.size() ? last[e] : 0.0; };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return final_bias(a) > final_bias(b); });
    for (size_t i = 0; i < 3; ++i) named.push_back(order[i]);
    for (size_t i = 0; i < 3; ++i) named.push_back(order[experts - 3 + i]);
  }
  auto line = [&](size_t e, const std::string& color, double width) {
    os << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"" << width << "\" points=\"";
    for (size_t i = 0; i < n; ++i)
      if (e < updates[i].size()) os << num(p.x(double(i + 1)), 1) << "," << num(p.y(updates[i][e]), 1) << " ";
    os << "\"><title>expert " << e << "</title></polyline>";
  };
  if (experts > 12)
    for (size_t e = 0; e < experts; ++e) line(e, "#ccc", 0.7);
  for (size_t j = 0; j < named.size(); ++j) {
    line(named[j], kColors[j % 9], 1.5);
    os << "<text x=\"" << w - legend + 6 << "\" y=\"" << 14 + 14 * j << "\" fill=\"" << kColors[j % 9] << "\">expert "
       << named[j] << "</text>";
  }
  if (experts > 12) {
    os << "<text x=\"" << w - legend + 6 << "\" y=\"" << 14 + 14 * named.size() << "\" fill=\"#999\">"
       << experts - named.size() << " others (grey)</text><text x=\"" << w - legend + 6 << "\" y=\""
       << 28 + 14 * named.size() << "\" fill=\"#999\">named: 3 highest,</text><text x=\"" << w - legend + 6
       << "\" y=\"" << 42 + 14 * named.size() << "\" fill=\"#999\">3 lowest at the end</text>";
  }
  os << y_axis(p, "bias") << x_axis(p, "update (" + std::to_string(n) + ")", true) << "</svg></figure>\n";
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
      if (updates.size() >= 2) {
        os << bias_chart(s["strategy"].get<std::string>(), layer, updates);
      } else if (updates.size() == 1 && !updates.front().empty()) {
        // One update draws no line: its values in words instead of an empty chart.
        const auto [lo, hi] = std::minmax_element(updates.front().begin(), updates.front().end());
        os << "<p class=\"bias-note\">" << esc(s["strategy"].get<std::string>()) << ", layer " << layer
           << ": one bias update (one batch), its bias spans [" << num(*lo, 4) << ", " << num(*hi, 4)
           << "]; a chart needs two updates or more (workload.batches)</p>\n";
      }
    }
  }
  const std::string charts = os.str();
  return charts.empty() ? "" : "<h2>Expert bias (aux_free_bias)</h2>\n" + charts;
}

// One strategy's expert-parallel plan: a column per device, its slots stacked by the planner's load and
// coloured by logical expert (the golden-angle hue of its id), on a planned-load axis. Device labels thin out
// to one every 40 px (every device's load is in its tooltip), so 32 or 64 devices never overprint.
std::string plan_chart(const std::string& label, const nlohmann::json& plan) {
  const auto expert = plan["expert"].get<std::vector<int>>();
  const auto device = plan["device"].get<std::vector<int>>();
  const auto slot_load = plan["slot_load"].get<std::vector<double>>();
  const auto device_load = plan["device_load"].get<std::vector<double>>();
  if (expert.size() != device.size() || expert.size() != slot_load.size() || device_load.empty()) return "";
  const double w = 680, h = 230;
  const double top = std::max(1e-9, *std::max_element(device_load.begin(), device_load.end()));
  const double D = static_cast<double>(device_load.size());
  const Plot p{60, w - 16, 12, h - 44, -0.5, D - 0.5, 0, top * 1.05};
  const double cw = (p.x1 - p.x0) / D;
  std::vector<double> filled(device_load.size(), 0.0);
  std::ostringstream os;
  os << "<figure class=\"plan\"><figcaption>" << esc(label) << ": slots per device, coloured by expert (predicted "
     << "balancedness " << num(plan.value("predicted_balancedness", 1.0)) << ", realised "
     << num(plan.value("realised_balancedness", 1.0)) << ", colocated replicas " << plan.value("colocated_replicas", 0)
     << ")</figcaption>" << svg_open("plan-slots", w, h);
  for (size_t i = 0; i < expert.size(); ++i) {
    const int d = device[i];
    if (d < 0 || static_cast<size_t>(d) >= device_load.size()) continue;
    const double y_bottom = p.y(filled[d]);
    filled[d] += slot_load[i];
    const double y_top = p.y(filled[d]);
    os << "<rect class=\"slot\" x=\"" << num(p.x(d) - cw / 2 + std::min(2.0, cw * 0.1), 1) << "\" y=\"" << num(y_top, 1)
       << "\" width=\"" << num(std::max(1.0, cw - 2 * std::min(2.0, cw * 0.1)), 1) << "\" height=\""
       << num(y_bottom - y_top, 1) << "\" fill=\"hsl(" << num(std::fmod(expert[i] * 137.508, 360.0), 1)
       << ",55%,55%)\" stroke=\"#fff\" stroke-width=\"" << (cw > 8 ? 1 : 0.3) << "\"><title>slot " << i << ": expert "
       << expert[i] << ", device " << d << ", load " << num(slot_load[i], 1) << "</title></rect>";
  }
  const size_t every = std::max<size_t>(1, static_cast<size_t>(std::ceil(40.0 / cw)));
  std::vector<std::pair<double, std::string>> ticks;
  for (size_t d = 0; d < device_load.size(); d += every) ticks.push_back({double(d), "d" + std::to_string(d)});
  // The planned load per device above its column, where there is room for it; else in each column's tooltip.
  for (size_t d = 0; d < device_load.size(); ++d) {
    os << "<rect class=\"device\" x=\"" << num(p.x(d) - cw / 2, 1) << "\" y=\"" << num(p.y0, 1) << "\" width=\""
       << num(cw, 1) << "\" height=\"" << num(p.y1 - p.y0, 1) << "\" fill=\"none\" pointer-events=\"all\"><title>device "
       << d << ": planned load " << num(device_load[d], 0) << "</title></rect>";
    if (every == 1 && cw >= 36)
      os << "<text x=\"" << num(p.x(d), 1) << "\" y=\"" << num(p.y(filled[d]) - 3, 1) << "\" text-anchor=\"middle\">"
         << num(device_load[d], 0) << "</text>";
  }
  os << y_axis(p, "planned load") << x_axis(p, "device (" + std::to_string(device_load.size()) + ")", true, ticks)
     << "</svg></figure>\n";
  return os.str();
}

// "Where the time goes" as a chart: per strategy one horizontal bar of its modeled MoE layer (primary
// placement) cut into the erosion's parts in order (reference, imbalance, imbalance in tiles, tiles, padding,
// micro-batches, all-to-all, all-to-all imbalance: they sum to the modeled time); a negative part (skew left idle experts whose weights balanced
// routing reads) is drawn back over the bar, hatched.
std::string time_chart(const nlohmann::json& run) {
  struct Row {
    std::string label;
    std::vector<double> parts;  // us
    double total = 0;
  };
  static const char* const kParts[] = {"reference",     "skew saves (idle experts)", "imbalance", "imbalance in tiles",
                                       "this batch's tile phase", "tiles, waves, launches", "padding", "micro-batches",
                                       "all-to-all",    "all-to-all imbalance"};
  static const char* const kFill[] = {"#9ecae1", "#2ca02c", "#d62728", "#ff9896", "#c5b0d5",
                                      "#7f7f7f", "#bcbd22", "#17becf", "#9467bd", "#e377c2"};
  constexpr size_t kNumParts = sizeof kParts / sizeof kParts[0];
  std::vector<Row> rows;
  std::string placement;
  for (const auto& s : run["strategies"]) {
    if (!s.contains("modeled") || !s["modeled"].is_object()) continue;
    const auto& modeled = s["modeled"];
    const char* name = modeled.contains("expert_parallel") ? "expert_parallel" : "single";
    if (!modeled.contains(name) || !modeled[name].contains("erosion")) continue;
    placement = name;
    const auto& x = modeled[name]["erosion"];
    const auto& parts = x["parts"];
    auto us = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() * 1e6 : 0.0; };
    Row r{s["strategy"].get<std::string>(),
          {us(x["reference_s"]), us(parts.value("idle_saving_s", nlohmann::json(0.0))), us(parts["imbalance_s"]),
           us(parts.value("imbalance_tiles_s", nlohmann::json(0.0))), us(parts.value("tile_phase_s", nlohmann::json(0.0))),
           us(parts["quantization_s"]), us(parts["padding_s"]), us(parts.value("micro_batch_s", nlohmann::json(0.0))),
           us(parts["communication_s"]), us(parts.value("communication_imbalance_s", nlohmann::json(0.0)))},
          us(x["actual_s"])};
    rows.push_back(r);
  }
  if (rows.empty()) return "";
  double hi = 1e-9;
  for (const Row& r : rows) {
    double at = 0;
    for (double v : r.parts) {
      at += v;
      hi = std::max(hi, at);
    }
    hi = std::max(hi, r.total);
  }
  const double row = 24, left = 230, w = 780;
  // The legend in rows within the figure's width: each entry after the last one's text (11 px sans: at most
  // about 6.5 px a character), a new row where the next would pass the right edge.
  std::vector<std::pair<double, double>> at_xy;
  double lx = 8, ly = 4;
  for (size_t k = 0; k < kNumParts; ++k) {
    const double entry = 16 + 6.5 * std::string(kParts[k]).size();
    if (lx > 8 && lx + entry > w - 8) {
      lx = 8;
      ly += 18;
    }
    at_xy.push_back({lx, ly});
    lx += entry + 14;
  }
  const double legend_h = ly + 18;
  const double h = rows.size() * row + 56 + legend_h;
  const Plot p{left, w - 70, 8 + legend_h, h - 44, 0, hi * 1.05, 0, 1};
  std::ostringstream os;
  os << "<figure><figcaption>where each strategy's modeled MoE layer goes (" << placement
     << "): the parts sum to the modeled time</figcaption>" << svg_open("time-split", w, h)
     << "<defs><pattern id=\"neg\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\"><path d=\"M0,4 L4,0\" "
        "stroke=\"#333\" stroke-width=\"1\"/></pattern></defs>";
  for (size_t k = 0; k < kNumParts; ++k) {
    const auto [x, y] = at_xy[k];
    os << "<g class=\"legend-entry\"><rect x=\"" << num(x, 1) << "\" y=\"" << num(y, 1)
       << "\" width=\"12\" height=\"12\" fill=\"" << kFill[k] << "\"/><text x=\"" << num(x + 16, 1) << "\" y=\""
       << num(y + 10, 1) << "\">" << kParts[k] << "</text></g>";
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const double y = p.y0 + i * row;
    os << "<text x=\"" << left - 6 << "\" y=\"" << y + 16 << "\" text-anchor=\"end\">" << esc(rows[i].label) << "</text>";
    double at = 0;
    for (size_t k = 0; k < rows[i].parts.size(); ++k) {
      const double v = rows[i].parts[k];
      if (v == 0) continue;
      const double a = std::min(at, at + v), b = std::max(at, at + v);
      os << "<rect class=\"part\" x=\"" << num(p.x(a), 1) << "\" y=\"" << y + 3 << "\" width=\""
         << num(std::max(0.5, p.x(b) - p.x(a)), 1) << "\" height=\"" << row - 6 << "\" fill=\""
         << (v < 0 ? "url(#neg)" : kFill[k]) << "\"><title>" << kParts[k] << ": " << num(v, 1) << " us</title></rect>";
      at += v;
    }
    os << "<text x=\"" << num(p.x(rows[i].total) + 4, 1) << "\" y=\"" << y + 16 << "\">" << num(rows[i].total, 1)
       << "</text>";
  }
  os << x_axis(p, "modeled time of one MoE layer (us)", false) << "</svg></figure>\n";
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
         << us(parts.value("idle_saving_s", nlohmann::json(0.0))) << "</td><td>" << us(parts["imbalance_s"])
         << "</td><td>" << us(parts.value("imbalance_tiles_s", nlohmann::json(0.0))) << "</td><td>"
         << us(parts.value("tile_phase_s", nlohmann::json(0.0))) << "</td><td>" << us(parts["quantization_s"]) << "</td><td>" << us(parts["padding_s"])
         << "</td><td>" << us(parts.value("micro_batch_s", nlohmann::json(0.0))) << "</td><td>"
         << us(parts["communication_s"]) << "</td><td>"
         << us(parts.value("communication_imbalance_s", nlohmann::json(0.0))) << "</td><td>" << us(x["actual_s"])
         << "</td><td>"
         << us(x["dropped_work_s"]) << "</td></tr>\n";
  }
  if (placement.empty()) return "";
  return "<h2>Where the modeled time goes (" + placement +
         ", us)</h2>\n<table id=\"erosion\"><thead><tr><th>strategy</th><th>reference</th><th>+ skew saves (idle experts)</th><th>+ imbalance</th>"
         "<th>+ imbalance in tiles</th><th>+ this batch's tile phase</th><th>+ tiles, waves, launches</th><th>+ padding</th><th>+ micro-batches</th><th>+ all-to-all</th>"
         "<th>+ all-to-all imbalance</th><th>= modeled</th>"
         "<th>dropped work (not done)</th></tr></thead><tbody>\n" +
         rows.str() + "</tbody></table>\n";
}

// The prefill/decode split of a step run (strategies[].phases): per strategy and phase its steps, tokens, the
// imbalance over its records, the modeled MoE layer and step, and the modeled throughput; "" for batch runs.
std::string phase_table(const nlohmann::json& run) {
  std::ostringstream rows;
  for (const auto& s : run["strategies"]) {
    if (!s.contains("phases") || !s["phases"].is_object()) continue;
    for (auto it = s["phases"].begin(); it != s["phases"].end(); ++it) {
      const auto& p = it.value();
      if (!p.is_object()) continue;
      const double steps = as_number(p, "steps"), moe_layers = as_number(p, "moe_layers");
      const auto& agg = p.value("aggregates", nlohmann::json::object());
      auto imb = [&](const char* which) {
        return agg.contains("imbalance") && agg["imbalance"].is_object() ? as_number(agg["imbalance"], which) : NAN;
      };
      const double moe_us = steps > 0 && moe_layers > 0 ? as_number(p, "modeled_moe_s") / (steps * moe_layers) * 1e6 : NAN;
      const double step_ms = steps > 0 ? as_number(p, "modeled_s") / steps * 1e3 : NAN;
      const double kv = as_number(p, "kv_cache_bytes");
      rows << "<tr><td>" << esc(s["strategy"].get<std::string>()) << "</td><td>" << esc(it.key()) << "</td><td>"
           << num(steps, 0) << "</td><td>" << num(as_number(p, "tokens"), 0) << "</td><td>" << num(imb("p50"))
           << "</td><td>" << num(imb("p95")) << "</td><td>" << num(as_number(p, "tokens_unrouted"), 0) << "</td><td>"
           << num(moe_us, 1) << "</td><td>" << num(step_ms, 3) << "</td><td>" << num(as_number(p, "modeled_tokens_per_s"), 0)
           << "</td><td>" << (std::isfinite(kv) ? num(kv / (1024.0 * 1024.0), 1) : std::string("-")) << "</td></tr>\n";
    }
  }
  const std::string body = rows.str();
  if (body.empty()) return "";
  return "<h2>Per phase</h2>\n<table id=\"phases\"><thead><tr><th>strategy</th><th>phase</th><th>steps</th><th>tokens</th>"
         "<th>imbalance p50</th><th>imbalance p95</th><th>unrouted</th><th>MoE layer (us, per step)</th>"
         "<th>modeled step (ms)</th><th>modeled tokens/s</th><th>KV cache (MiB)</th></tr></thead><tbody>\n" +
         body + "</tbody></table>\n";
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
        ".axis-label{font-weight:bold}figure{margin:1em 0}</style></head><body>\n";
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
  const int batches = run.contains("workload") ? run["workload"].value("batches", 1) : 1;
  if (stepped)
    os << "; step-structured run: rates and ratios are means over the records weighted by the tokens each routed, "
          "counts are sums, the modeled time the mean MoE layer of the decode records (all records without "
          "a decode phase)";
  else if (batches > 1)
    os << "; " << batches << " batches: rates and ratios are means over them, counts sums, the modeled time the "
       << "mean of their MoE layers";
  // What the series' x axis counts: batches, or a step run's records (the decoder's: its executed layers a step).
  SeriesAxis axis;
  if (stepped) {
    axis.label = "record";
    const auto& w = run.value("workload", nlohmann::json::object());
    if (w.contains("executed_decoder") && w["executed_decoder"].is_object())
      axis.per_step = static_cast<size_t>(std::max(1, w["executed_decoder"].value("layers", 1)));
  }
  os << "</p>\n<h2>Balance and cost per strategy</h2>\n<table id=\"metrics\"><thead><tr><th>strategy</th>"
        "<th>imbalance</th><th>max_vio</th><th>cv</th><th>entropy_norm</th><th>drop_rate</th><th>aux_loss</th>"
        "<th>modeled time (us)</th><th>batching_efficiency</th><th>rank</th></tr></thead><tbody>\n";
  std::vector<std::pair<std::string, double>> efficiency, imbalance;
  std::vector<std::pair<std::string, std::vector<double>>> series;
  for (const auto& s : run["strategies"]) {
    const std::string label = s["strategy"].get<std::string>();
    const auto& m = s["metrics"];
    os << "<tr><td>" << esc(label) << "</td><td>" << num(as_number(m, "imbalance")) << "</td><td>"
       << num(as_number(m, "max_vio")) << "</td><td>" << num(as_number(m, "cv")) << "</td><td>" << num(as_number(m, "entropy_norm")) << "</td><td>"
       << num(as_number(m, "drop_rate"), 4) << "</td><td>" << num(as_number(m, "aux_loss")) << "</td><td>"
       << num(as_number(m, "modeled_time_s") * 1e6, 1) << "</td><td>" << num(as_number(m, "batching_efficiency"))
       << "</td><td>" << s.value("rank", 0) << "</td></tr>\n";
    efficiency.push_back({label, as_number(m, "batching_efficiency")});
    imbalance.push_back({label, as_number(m, "imbalance")});
    // A series of one point draws no line: a chart needs two batches or records.
    if (s.contains("series") && s["series"].contains("imbalance") && s["series"]["imbalance"].size() >= 2)
      series.push_back({label, s["series"]["imbalance"].get<std::vector<double>>()});
  }
  os << "</tbody></table>\n";
  os << phase_table(run);
  const std::string split = time_chart(run);
  const std::string table = erosion_table(run);
  if (!split.empty()) os << table.substr(0, table.find("<table")) << split << table.substr(table.find("<table"));
  os << "<h2>Batching efficiency</h2>\n"
     << value_bars("efficiency",
                   "the balanced counterfactual's time over the routing's: what imbalance costs, drops held out "
                   "(above 1: skew left experts idle whose weights balanced routing reads)",
                   "batching efficiency (1: imbalance costs nothing)", efficiency)
     << "<h2>Imbalance</h2>\n"
     << value_bars("imbalance", "max load / mean load (1 is perfect)", "imbalance: max / mean load", imbalance);
  if (!series.empty()) os << series_chart(series, axis);
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
