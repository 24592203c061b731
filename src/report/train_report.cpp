// Reports of `moesim train` (see train_report.hpp).
#include "src/report/train_report.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "src/report/provenance.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using nlohmann::json;

std::string layout_text(const TrainLayout& l) {
  const TrainConfig& c = l.cfg;
  std::ostringstream os;
  os << "TP" << c.tp << " PP" << c.pp << " VPP" << c.vpp << " EP" << c.ep << " ETP" << c.etp << " CP" << c.cp
     << ", DP" << l.dp << " (EDP" << l.edp << "); " << l.micro_batches << " micro-batches of " << c.micro_batch
     << " x " << c.seq_len << " tokens";
  return os.str();
}

std::string capacity_text(const TrainVariant& v) {
  if (v.capacity_factor <= 0) return "dropless";
  return text::real(v.capacity_factor) + (v.layout == Layout::capacity ? " padded" : "");
}

// The step's parts over the whole step: the slowest stage's micro-batch m times, then the schedule's and the
// step's own parts. Their exposed times add up to step_s.
struct StepPart {
  std::string name, stream;
  double busy_s = 0, exposed_s = 0;
};

std::vector<StepPart> step_parts(const TrainStep& st) {
  std::vector<StepPart> out;
  const double m = static_cast<double>(st.layout.micro_batches);
  for (int i = 0; i < kTrainParts; ++i) {
    const TrainPart p = static_cast<TrainPart>(i);
    out.push_back({to_string(p), is_communication(p) ? "communication" : "compute", m * st.stage_parts.busy[i],
                   m * st.stage_parts.exposed[i]});
  }
  out.push_back({"bubble", "pipeline", st.bubble_s, st.bubble_s});
  out.push_back({"waits", "pipeline", st.waits_s, st.waits_s});
  out.push_back({"dp_comm", "communication", st.dp_busy_s, st.dp_exposed_s});
  out.push_back({"optimizer", "compute", st.optimizer_s, st.optimizer_s});
  return out;
}

json erosion_json(const TrainErosion& x) {
  json j = json::object();
  j["reference_s"] = x.reference_s;
  j["actual_s"] = x.actual_s;
  j["parts"] = json::object({{"expert_compute_s", x.expert_compute_s},
                             {"all_to_all_s", x.all_to_all_s},
                             {"waits_s", x.waits_s},
                             {"padding_s", x.padding_s},
                             {"drops_s", x.drops_s}});
  return j;
}

json variant_json(const TrainVariant& v) {
  const TrainStep& st = v.step;
  json parts = json::object();
  double compute = 0, comm = 0, exposed_comm = 0;
  for (const StepPart& p : step_parts(st)) {
    parts[p.name] = json::object({{"stream", p.stream}, {"busy_s", p.busy_s}, {"exposed_s", p.exposed_s}});
    if (p.stream == "compute") compute += p.busy_s;
    if (p.stream == "communication") {
      comm += p.busy_s;
      exposed_comm += p.exposed_s;
    }
  }
  // Assigned key by key: a braced list of pairs becomes an array, not an object, wherever one of its values is
  // itself a two-element list.
  json j = json::object();
  j["label"] = v.label;
  j["routing"] = to_string(v.routing);
  j["routing_source"] = st.routing;
  j["capacity_factor"] = v.capacity_factor;
  j["layout"] = to_string(v.layout);
  j["step_s"] = st.step_s;
  j["tokens_per_s_per_gpu"] = st.tokens_per_s_per_gpu;
  j["model_flops_per_token"] = st.model_flops_per_token;
  j["tflops_per_gpu"] = st.tflops_per_gpu;
  j["mfu"] = st.mfu;
  json pipeline = json::object();
  pipeline["stage_s"] = st.stage_s;
  pipeline["slowest_stage"] = st.slowest_stage;
  pipeline["stages_s"] = st.stages_s;
  pipeline["pipeline_s"] = st.pipeline_s;
  pipeline["bubble_s"] = st.bubble_s;
  pipeline["waits_s"] = st.waits_s;
  pipeline["simulated_groups"] = st.simulated_groups;
  pipeline["simulated_micro_batches"] = st.simulated_micro_batches;
  j["pipeline"] = pipeline;
  j["data_parallel"] = json::object({{"busy_s", st.dp_busy_s}, {"exposed_s", st.dp_exposed_s}});
  j["optimizer_s"] = st.optimizer_s;
  j["parts"] = parts;
  j["streams"] = json::object(
      {{"compute_busy_s", compute}, {"communication_busy_s", comm}, {"communication_exposed_s", exposed_comm}});
  j["routing_stats"] = json::object({{"rank_overload", st.rank_overload},
                                     {"drop_rate", st.drop_rate},
                                     {"padding_share", st.padding_share},
                                     {"a2a_forward_s", st.a2a_forward_s},
                                     {"experts_forward_s", st.experts_forward_s}});
  j["reference"] = st.reference;
  j["erosion"] = erosion_json(st.erosion);
  return j;
}

// The one-variant table: the headline, the parts, the erosion.
std::string single_table(const TrainReport& r, bool markdown) {
  const TrainVariant& v = r.variants.front();
  const TrainStep& st = v.step;
  std::ostringstream os;
  const Experiment& e = *r.experiment;
  const TrainConfig& c = st.layout.cfg;
  os << text::wrap("moesim train: " + e.model.name + " on " + std::to_string(c.gpus) + " x " + r.hardware->name + " (" +
                   layout_text(st.layout) + "), " + to_string(c.precision) + ", recompute " + to_string(c.recompute) +
                   ", dispatcher " + to_string(c.dispatcher) + (c.ep_overlap ? " (ep_overlap)" : ""))
     << "\n";
  os << text::wrap("routing: " + st.routing + "; " + std::to_string(c.routed_micro_batches) +
                   " micro-batches routed, each MoE layer of each micro-batch draws one")
     << "\n";
  os << text::wrap("step " + text::fixed(st.step_s, 3) + " s | " + text::fixed(st.tokens_per_s_per_gpu, 0) +
                   " tokens/s/GPU | " + text::fixed(st.tflops_per_gpu, 1) + " model TFLOP/s/GPU | MFU " +
                   text::fixed(100 * st.mfu, 1) + "% (Megatron-LM's FLOP count, " +
                   text::real(st.model_flops_per_token / 1e9) + " GFLOP a token; the bf16 dense peak)")
     << "\n\n";
  const std::vector<StepPart> parts = step_parts(st);
  if (markdown) {
    os << "| part | stream | busy_s | exposed_s | share |\n| :--- | :--- | ---: | ---: | ---: |\n";
  } else {
    os << "part            stream          busy_s   exposed_s   share\n";
  }
  for (const StepPart& p : parts) {
    if (p.busy_s == 0 && p.exposed_s == 0) continue;
    const std::string share = text::fixed(st.step_s > 0 ? 100 * p.exposed_s / st.step_s : 0, 1) + "%";
    if (markdown) {
      os << "| " << p.name << " | " << p.stream << " | " << text::fixed(p.busy_s, 3) << " | "
         << text::fixed(p.exposed_s, 3) << " | " << share << " |\n";
    } else {
      char line[160];
      std::snprintf(line, sizeof line, "%-15s %-13s %9.3f %11.3f %7s\n", p.name.c_str(), p.stream.c_str(), p.busy_s,
                    p.exposed_s, share.c_str());
      os << line;
    }
  }
  if (!markdown) {
    char line[160];
    std::snprintf(line, sizeof line, "%-15s %-13s %9s %11.3f %7s\n", "step", "", "", st.step_s, "100.0%");
    os << line;
  }
  const TrainErosion& x = st.erosion;
  const double d = x.actual_s - x.reference_s;
  os << "\n"
     << text::wrap("erosion against forced balance (" + st.reference + "): reference " + text::fixed(x.reference_s, 3) +
                   " s, " + (d >= 0 ? "+" : "") + text::fixed(d, 3) + " s (" +
                   text::fixed(x.reference_s > 0 ? 100 * d / x.reference_s : 0, 1) + "%)")
     << "\n";
  for (const auto& [name, value] : std::vector<std::pair<const char*, double>>{{"expert_compute", x.expert_compute_s},
                                                                               {"all_to_all", x.all_to_all_s},
                                                                               {"waits", x.waits_s},
                                                                               {"padding", x.padding_s},
                                                                               {"drops", x.drops_s}}) {
    char line[96];
    std::snprintf(line, sizeof line, "  %-15s %+10.3f s\n", name, value);
    os << line;
  }
  os << text::wrap("rank overload " + text::fixed(st.rank_overload, 3) + " (max / mean assignments per EP rank), drop "
                   "rate " + text::fixed(st.drop_rate, 4) + ", padding " + text::fixed(st.padding_share, 4) +
                   " of the kept rows; one MoE layer forward: all-to-all " + text::fixed(st.a2a_forward_s * 1e3, 3) +
                   " ms, experts " + text::fixed(st.experts_forward_s * 1e3, 3) + " ms")
     << "\n";
  return os.str();
}

struct Column {
  const char* name;
  std::string (*cell)(const TrainVariant&, const TrainVariant& base);
  int priority = 0;  // the table within kTerminalWidth keeps priority 0, then the smaller numbers (--wide: all)
};

const std::vector<Column>& columns() {
  using V = const TrainVariant&;
  static const std::vector<Column> cols = {
      {"variant", [](V v, V) { return v.label; }, 0},
      {"routing", [](V v, V) { return to_string(v.routing); }, 3},
      {"capacity", [](V v, V) { return capacity_text(v); }, 0},
      {"step_s", [](V v, V) { return text::fixed(v.step.step_s, 3); }, 0},
      {"vs_forced", [](V v, V b) { return text::fixed(b.step.step_s > 0 ? v.step.step_s / b.step.step_s : 0, 3); }, 0},
      {"tokens_s_gpu", [](V v, V) { return text::fixed(v.step.tokens_per_s_per_gpu, 0); }, 2},
      {"tflops_gpu", [](V v, V) { return text::fixed(v.step.tflops_per_gpu, 1); }, 0},
      {"mfu", [](V v, V) { return text::fixed(v.step.mfu, 3); }, 3},
      {"rank_overload", [](V v, V) { return text::fixed(v.step.rank_overload, 3); }, 1},
      {"drop_rate", [](V v, V) { return text::fixed(v.step.drop_rate, 4); }, 2},
      {"expert_s", [](V v, V) { return text::fixed(v.step.erosion.expert_compute_s, 3); }, 1},
      {"a2a_s", [](V v, V) { return text::fixed(v.step.erosion.all_to_all_s, 3); }, 2},
      {"waits_s", [](V v, V) { return text::fixed(v.step.erosion.waits_s, 3); }, 3},
      {"padding_s", [](V v, V) { return text::fixed(v.step.erosion.padding_s, 3); }, 1},
      {"drops_s", [](V v, V) { return text::fixed(v.step.erosion.drops_s, 3); }, 1},
  };
  return cols;
}

std::string compare_table(const TrainReport& r, bool markdown, bool wide) {
  const TrainVariant& base = r.variants.front();
  const TrainStep& st = base.step;
  const TrainConfig& c = st.layout.cfg;
  std::ostringstream os;
  os << text::wrap("moesim train --compare: " + r.experiment->model.name + " on " + std::to_string(c.gpus) + " x " +
                   r.hardware->name + " (" + layout_text(st.layout) + "), " + to_string(c.precision) + ", dispatcher " +
                   to_string(c.dispatcher))
     << "\n";
  os << text::wrap("vs_forced: step time over the forced-balance row's; expert_s .. drops_s: the erosion's parts "
                   "against forced balance (dropless), seconds a step")
     << "\n\n";
  std::vector<std::vector<std::string>> cells;
  for (const TrainVariant& v : r.variants) {
    std::vector<std::string> row;
    for (const Column& col : columns()) row.push_back(col.cell(v, base));
    cells.push_back(row);
  }
  const size_t n = columns().size();
  if (markdown) {
    os << "|";
    for (const Column& col : columns()) os << " " << col.name << " |";
    os << "\n|";
    for (size_t i = 0; i < n; ++i) os << (i < 3 ? " :--- |" : " ---: |");
    os << "\n";
    for (const auto& row : cells) {
      os << "|";
      for (const std::string& cell : row) os << " " << cell << " |";
      os << "\n";
    }
    return os.str();
  }
  std::vector<size_t> width(n);
  std::vector<int> priority(n);
  for (size_t i = 0; i < n; ++i) {
    width[i] = std::string(columns()[i].name).size();
    for (const auto& row : cells) width[i] = std::max(width[i], row[i].size());
    priority[i] = columns()[i].priority;
  }
  const std::vector<size_t> shown = text::fit_columns(width, priority, wide ? 0 : text::kTerminalWidth);
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t k = 0; k < shown.size(); ++k) {
      const size_t i = shown[k];
      const std::string& cell = row[i];
      const std::string pad(width[i] - cell.size(), ' ');
      out += (k ? "  " : "") + (i < 3 ? cell + pad : pad + cell);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::vector<std::string> head;
  for (const Column& col : columns()) head.push_back(col.name);
  os << line(head);
  for (const auto& row : cells) os << line(row);
  std::string left;
  for (size_t i = 0; i < n; ++i)
    if (std::find(shown.begin(), shown.end(), i) == shown.end()) left += (left.empty() ? "" : ", ") + head[i];
  if (!left.empty()) os << "(--wide adds " << left << ")\n";
  return os.str();
}

std::string csv(const TrainReport& r) {
  std::ostringstream os;
  const TrainVariant& base = r.variants.front();
  std::vector<std::string> head;
  for (const Column& col : columns()) head.push_back(col.name);
  for (int i = 0; i < kTrainParts; ++i) head.push_back(std::string(to_string(static_cast<TrainPart>(i))) + "_exposed_s");
  for (const char* k : {"bubble_s", "pipeline_waits_s", "dp_exposed_s", "optimizer_s", "reference_s"}) head.push_back(k);
  for (size_t i = 0; i < head.size(); ++i) os << (i ? "," : "") << head[i];
  os << "\n";
  for (const TrainVariant& v : r.variants) {
    std::vector<std::string> row;
    for (const Column& col : columns()) row.push_back(text::csv_cell(col.cell(v, base)));
    const double m = static_cast<double>(v.step.layout.micro_batches);
    for (int i = 0; i < kTrainParts; ++i) row.push_back(text::real(m * v.step.stage_parts.exposed[i]));
    for (double x : {v.step.bubble_s, v.step.waits_s, v.step.dp_exposed_s, v.step.optimizer_s,
                     v.step.erosion.reference_s})
      row.push_back(text::real(x));
    for (size_t i = 0; i < row.size(); ++i) os << (i ? "," : "") << row[i];
    os << "\n";
  }
  return os.str();
}

std::string esc(const std::string& s) { return text::html_escape(s); }

// Horizontal bars of (label, value) pairs, the longest the full width; negative values drawn leftwards from the
// axis. Inline SVG.
std::string bars(const std::string& title, const std::vector<std::pair<std::string, double>>& items,
                 const std::string& unit) {
  double most = 0, least = 0;
  for (const auto& [l, v] : items) {
    most = std::max(most, v);
    least = std::min(least, v);
  }
  const double span = most - least > 0 ? most - least : 1;
  const double label_w = 150, plot_w = 420, row_h = 20;
  const double h = row_h * static_cast<double>(items.size()) + 30;
  const double zero = label_w + plot_w * (-least / span);
  std::ostringstream os;
  os << "<h3>" << esc(title) << "</h3>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << label_w + plot_w + 110
     << "\" height=\"" << h << "\" role=\"img\">\n";
  double y = 10;
  for (const auto& [label, v] : items) {
    const double x0 = v >= 0 ? zero : zero + plot_w * v / span;
    const double w = plot_w * std::fabs(v) / span;
    os << "<text x=\"" << label_w - 6 << "\" y=\"" << y + 13 << "\" text-anchor=\"end\" font-size=\"12\">" << esc(label)
       << "</text><rect x=\"" << x0 << "\" y=\"" << y + 2 << "\" width=\"" << w << "\" height=\"" << row_h - 4
       << "\" fill=\"" << (v >= 0 ? "#4878a8" : "#c06040") << "\"/><text x=\"" << std::max(x0 + w, zero) + 4
       << "\" y=\"" << y + 13 << "\" font-size=\"11\">" << text::fixed(v, 3) << " " << esc(unit) << "</text>\n";
    y += row_h;
  }
  os << "<line x1=\"" << zero << "\" y1=\"6\" x2=\"" << zero << "\" y2=\"" << y + 4 << "\" stroke=\"#333\"/>\n</svg>\n";
  return os.str();
}

}  // namespace

json train_json(const TrainReport& r) {
  json j;
  j["schema_version"] = kReportSchemaVersion;
  j["moesim_version"] = MOESIM_VERSION;
  j["command"] = "train";
  j["provenance"] = provenance_json();
  j["experiment"] = experiment_json(*r.experiment, r.file_read);
  j["hardware"] = {{"name", r.hardware->name}, {"digest", hardware_digest(*r.hardware)}};
  const TrainLayout& l = r.variants.front().step.layout;
  const TrainConfig& c = l.cfg;
  j["layout"] = {{"gpus", c.gpus},
                 {"tp", c.tp},
                 {"pp", c.pp},
                 {"vpp", c.vpp},
                 {"ep", c.ep},
                 {"etp", c.etp},
                 {"cp", c.cp},
                 {"dp", l.dp},
                 {"edp", l.edp},
                 {"micro_batches", l.micro_batches},
                 {"micro_batch", c.micro_batch},
                 {"seq_len", c.seq_len},
                 {"global_batch", c.global_batch},
                 {"precision", to_string(c.precision)},
                 {"recompute", to_string(c.recompute)},
                 {"dispatcher", to_string(c.dispatcher)},
                 {"ep_overlap", c.ep_overlap},
                 {"routed_micro_batches", c.routed_micro_batches}};
  j["compare"] = r.compare;
  j["variants"] = json::array();
  for (const TrainVariant& v : r.variants) j["variants"].push_back(variant_json(v));
  return j;
}

std::string format_train(const TrainReport& r, ReportFormat format) {
  switch (format) {
    case ReportFormat::json: return train_json(r).dump(2) + "\n";
    case ReportFormat::csv: return csv(r);
    case ReportFormat::markdown: return r.compare ? compare_table(r, true, true) : single_table(r, true);
    case ReportFormat::table: return r.compare ? compare_table(r, false, r.wide) : single_table(r, false);
  }
  return "";
}

std::string format_train_html(const TrainReport& r) {
  std::ostringstream os;
  const TrainStep& st0 = r.variants.front().step;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>moesim train: "
     << esc(r.experiment->model.name) << "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:60em}"
     << "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
     << "th:first-child,td:first-child{text-align:left}</style></head><body>\n";
  os << "<h1>moesim train: " << esc(r.experiment->model.name) << " on " << st0.layout.cfg.gpus << " x "
     << esc(r.hardware->name) << "</h1>\n<p>" << esc(layout_text(st0.layout)) << "; "
     << esc(to_string(st0.layout.cfg.precision)) << ", dispatcher " << esc(to_string(st0.layout.cfg.dispatcher))
     << ". TFLOP/s count Megatron-LM's model FLOPs (num_floating_point_operations); MFU is against the bf16 dense "
        "peak.</p>\n";
  os << "<table><tr><th>variant</th><th>capacity</th><th>step s</th><th>tokens/s/GPU</th><th>TFLOP/s/GPU</th>"
        "<th>MFU</th><th>rank overload</th><th>drop rate</th><th>vs forced balance (s)</th></tr>\n";
  for (const TrainVariant& v : r.variants) {
    const TrainStep& st = v.step;
    os << "<tr><td>" << esc(v.label) << "</td><td>" << esc(capacity_text(v)) << "</td><td>" << text::fixed(st.step_s, 3)
       << "</td><td>" << text::fixed(st.tokens_per_s_per_gpu, 0) << "</td><td>" << text::fixed(st.tflops_per_gpu, 1)
       << "</td><td>" << text::fixed(st.mfu, 3) << "</td><td>" << text::fixed(st.rank_overload, 3) << "</td><td>"
       << text::fixed(st.drop_rate, 4) << "</td><td>" << text::fixed(st.erosion.actual_s - st.erosion.reference_s, 3)
       << "</td></tr>\n";
  }
  os << "</table>\n";
  for (const TrainVariant& v : r.variants) {
    std::vector<std::pair<std::string, double>> parts;
    for (const StepPart& p : step_parts(v.step))
      if (p.exposed_s != 0) parts.push_back({p.name, p.exposed_s});
    os << bars(v.label + ": the step's exposed parts (they add up to " + text::fixed(v.step.step_s, 3) + " s)", parts, "s");
    const TrainErosion& x = v.step.erosion;
    os << bars(v.label + ": erosion against forced balance, by cause (reference " + text::fixed(x.reference_s, 3) + " s)",
               {{"expert_compute", x.expert_compute_s},
                {"all_to_all", x.all_to_all_s},
                {"waits", x.waits_s},
                {"padding", x.padding_s},
                {"drops", x.drops_s}},
               "s");
  }
  os << "</body></html>\n";
  return os.str();
}

}  // namespace moesim
