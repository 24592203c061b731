// One serving step as an HTML page (see step_report.hpp).
#include "src/report/step_report.hpp"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using text::html_escape;

struct Segment {
  const char* name;
  const char* colour;
};
constexpr Segment kLayerParts[] = {{"attention", "#4878a8"}, {"dense GEMMs", "#78a848"}, {"experts", "#d8a038"},
                                   {"other kernels", "#a0a0a0"}, {"compute-stream wait", "#c06040"}};

// Stacked horizontal bars, one a row of (label, parts), on one scale: the longest row the full width, each part's
// milliseconds written under the bars in a legend.
std::string stacked(const std::string& title, const std::vector<std::pair<std::string, std::vector<double>>>& rows,
                    const std::vector<Segment>& segments) {
  double most = 0;
  for (const auto& [label, parts] : rows) {
    double sum = 0;
    for (double v : parts) sum += std::max(0.0, v);
    most = std::max(most, sum);
  }
  if (most <= 0) most = 1;
  const double label_w = 110, plot_w = 520, row_h = 26;
  std::ostringstream os;
  os << "<h3>" << html_escape(title) << "</h3>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
     << label_w + plot_w + 90 << "\" height=\"" << row_h * static_cast<double>(rows.size()) + 10 << "\" role=\"img\">\n";
  double y = 4;
  for (const auto& [label, parts] : rows) {
    os << "<text x=\"" << label_w - 6 << "\" y=\"" << y + 16 << "\" text-anchor=\"end\" font-size=\"12\">"
       << html_escape(label) << "</text>\n";
    double x = label_w, sum = 0;
    for (size_t i = 0; i < parts.size() && i < segments.size(); ++i) {
      const double w = plot_w * std::max(0.0, parts[i]) / most;
      os << "<rect x=\"" << x << "\" y=\"" << y + 3 << "\" width=\"" << w << "\" height=\"" << row_h - 6 << "\" fill=\""
         << segments[i].colour << "\"><title>" << html_escape(segments[i].name) << ": " << text::fixed(parts[i], 3)
         << " ms</title></rect>\n";
      x += w;
      sum += parts[i];
    }
    os << "<text x=\"" << x + 4 << "\" y=\"" << y + 16 << "\" font-size=\"11\">" << text::fixed(sum, 3) << " ms</text>\n";
    y += row_h;
  }
  os << "</svg>\n<p>";
  for (size_t i = 0; i < segments.size(); ++i) {
    os << "<span style=\"color:" << segments[i].colour << "\">&#9632;</span> " << html_escape(segments[i].name);
    for (const auto& [label, parts] : rows)
      if (i < parts.size()) os << " " << html_escape(label) << " " << text::fixed(parts[i], 3);
    os << (i + 1 < segments.size() ? "; " : "");
  }
  os << " (ms)</p>\n";
  return os.str();
}

std::vector<double> layer_parts(const LayerBreakdown& b) {
  return {b.attention_s * 1e3, b.dense_s * 1e3, b.experts_s * 1e3, b.other_s * 1e3, b.compute_wait_s * 1e3};
}

}  // namespace

std::string format_step_html(const std::string& title, const std::vector<std::string>& lines, const ServingStep& s,
                             int moe_layers, int dense_layers) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(title)
     << "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:60em}</style></head><body>\n<h1>"
     << html_escape(title) << "</h1>\n";
  for (const std::string& l : lines) os << "<p>" << html_escape(l) << "</p>\n";
  const std::vector<Segment> layer(std::begin(kLayerParts), std::end(kLayerParts));
  os << stacked("One MoE layer: where its time goes, actual beside balanced routing and attention",
                {{"actual", layer_parts(s.moe_layer)}, {"balanced", layer_parts(s.balanced_layer)}}, layer);
  const std::vector<Segment> step = {{"MoE layers", "#d8a038"}, {"dense layers", "#78a848"}, {"LM head", "#4878a8"},
                                     {"MTP module", "#a070c0"}};
  const double fixed = (s.head_s + s.mtp_s) * 1e3;
  os << stacked("The step: " + std::to_string(moe_layers) + " MoE layers, " + std::to_string(dense_layers) +
                    " dense layers, the head and the MTP module",
                {{"actual", {moe_layers * s.moe_layer.layer_s * 1e3, dense_layers * s.dense_layer_s * 1e3, s.head_s * 1e3,
                             s.mtp_s * 1e3}},
                 {"balanced", {moe_layers * s.balanced_layer.layer_s * 1e3,
                               (s.balanced_step_s * 1e3 - moe_layers * s.balanced_layer.layer_s * 1e3 - fixed),
                               s.head_s * 1e3, s.mtp_s * 1e3}}},
                step);
  const StepErosion& x = s.erosion;
  const std::vector<Segment> erosion = {{"ideal", "#78a848"},
                                        {"overlap bubbles and exposed communication", "#a0a0a0"},
                                        {"expert skew in communication", "#c06040"},
                                        {"expert skew in compute", "#d8a038"},
                                        {"attention imbalance over ranks", "#a070c0"}};
  os << stacked("The step's erosion by cause: each part what the step loses to it with the ones before removed",
                {{"step", {x.ideal_s * 1e3, x.overlap_s * 1e3, x.skew_communication_s * 1e3, x.skew_compute_s * 1e3,
                           x.attention_imbalance_s * 1e3}}},
                erosion);
  os << "</body></html>\n";
  return os.str();
}

}  // namespace moesim
