// `moesim step [FILE] [--phase decode|prefill] [--requests-per-gpu R] [--kv-len L] [--tokens-per-gpu T] [--isl I]
// [--tp T] [--mtp-draft D --mtp-accept A] [--routing model|balanced|power_law:ALPHA] [--set KEY=VALUE]...
// [--vary KEY=VALUES]... [--format table|json|csv|markdown|html]`: one serving step of the experiment's model over its expert-parallel GPUs
// (placement.devices, each an attention data-parallel rank), as src/step/serving_step.hpp models it: the per-layer
// breakdown as the published profiles name it, step time, TPOT, tokens/s per GPU and per node, the attention's
// balance over the ranks, and the step's erosion by cause against balanced routing and balanced attention
// (docs/serving.md). Covered by tests/cli/step_cli_test.cpp.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/step_report.hpp"
#include "src/report/text_format.hpp"
#include "src/sweep/published_step.hpp"
#include "src/sweep/sweep.hpp"

namespace moesim::cli {
namespace {

using nlohmann::json;

json breakdown_json(const LayerBreakdown& b) {
  return {{"attention_ms", b.attention_s * 1e3}, {"dense_ms", b.dense_s * 1e3},     {"experts_ms", b.experts_s * 1e3},
          {"other_ms", b.other_s * 1e3},         {"dispatch_ms", b.dispatch_s * 1e3}, {"combine_ms", b.combine_s * 1e3},
          {"sync_ms", b.sync_s * 1e3},           {"compute_wait_ms", b.compute_wait_s * 1e3},
          {"layer_ms", b.layer_s * 1e3}};
}

json step_json(const StepRow& row, const ServingStep& s, const std::string& routing_note) {
  const StepErosion& x = s.erosion;
  return {{"phase", to_string(row.phase)},
          {"gpus", s.gpus},
          {"attention_dp", row.attention_dp},
          {"tp", row.tp},
          {"requests_per_gpu", row.requests_per_gpu},
          {"tokens_per_gpu", s.tokens_per_rank},
          {"kv_len", row.kv_len},
          {"lengths", row.lengths.spec},
          {"mtp_draft", row.mtp_draft},
          {"mtp_accept", row.mtp_accept},
          {"routing", row.routing},
          {"routing_note", routing_note},
          {"overlap", to_string(row.overlap)},
          {"a2a_kernel", to_string(row.a2a_kernel)},
          {"moe_layer", breakdown_json(s.moe_layer)},
          {"balanced_moe_layer", breakdown_json(s.balanced_layer)},
          {"dense_layer_ms", s.dense_layer_s * 1e3},
          {"head_ms", s.head_s * 1e3},
          {"mtp_ms", s.mtp_s * 1e3},
          {"step_ms", s.step_s * 1e3},
          {"balanced_step_ms", s.balanced_step_s * 1e3},
          {"tokens_per_request_step", s.tokens_per_request},
          {"tpot_ms", s.tpot_s * 1e3},
          {"output_tokens_per_s_per_gpu", s.output_tokens_per_s_per_gpu},
          {"input_tokens_per_s_per_gpu", s.input_tokens_per_s_per_gpu},
          {"tokens_per_s_per_node", s.tokens_per_s_per_node},
          {"attention_balance_ratio", s.attention.balance_ratio},
          {"attention_wait_ms", s.attention.wait_s * 1e3},
          {"balancedness", s.balancedness},
          {"erosion",
           {{"actual_ms", x.actual_s * 1e3},
            {"attention_imbalance_ms", x.attention_imbalance_s * 1e3},
            {"skew_compute_ms", x.skew_compute_s * 1e3},
            {"skew_communication_ms", x.skew_communication_s * 1e3},
            {"overlap_ms", x.overlap_s * 1e3},
            {"ideal_ms", x.ideal_s * 1e3}}}};
}

std::string ms(double s) { return text::fixed(s * 1e3, 3); }

const char* const kCsvHeader =
    "phase,gpus,requests_per_gpu,tokens_per_gpu,kv_len,lengths,mtp_draft,routing,layer_ms,balanced_layer_ms,step_ms,"
    "balanced_step_ms,tpot_ms,output_tokens_per_s_per_gpu,input_tokens_per_s_per_gpu,attention_balance_ratio,"
    "balancedness,attention_imbalance_ms,skew_compute_ms,skew_communication_ms,overlap_ms,ideal_ms\n";

std::string csv_row(const StepRow& row, const ServingStep& s) {
  std::ostringstream os;
  os << to_string(row.phase) << "," << s.gpus << "," << row.requests_per_gpu << "," << s.tokens_per_rank << ","
     << row.kv_len << "," << text::csv_cell(row.lengths.spec) << "," << row.mtp_draft << "," << text::csv_cell(row.routing)
     << "," << text::real(s.moe_layer.layer_s * 1e3) << "," << text::real(s.balanced_layer.layer_s * 1e3) << ","
     << text::real(s.step_s * 1e3) << "," << text::real(s.balanced_step_s * 1e3) << "," << text::real(s.tpot_s * 1e3)
     << "," << text::real(s.output_tokens_per_s_per_gpu) << "," << text::real(s.input_tokens_per_s_per_gpu) << ","
     << text::real(s.attention.balance_ratio) << "," << text::real(s.balancedness) << ","
     << text::real(s.erosion.attention_imbalance_s * 1e3) << "," << text::real(s.erosion.skew_compute_s * 1e3) << ","
     << text::real(s.erosion.skew_communication_s * 1e3) << "," << text::real(s.erosion.overlap_s * 1e3) << ","
     << text::real(s.erosion.ideal_s * 1e3) << "\n";
  return os.str();
}

std::string table_text(const Experiment& e, const StepRow& row, const ServingStep& s, const std::string& routing_note) {
  std::ostringstream os;
  os << "moesim step: " << e.model.name << " " << to_string(row.phase) << " on " << s.gpus << " x " << e.hardware.name
     << " (attention DP " << row.attention_dp << (row.tp > 1 ? " x TP " + std::to_string(row.tp) : std::string()) << ", EP "
     << row.ep << (row.redundant_experts > 0 ? " + " + std::to_string(row.redundant_experts) + " redundant" : std::string())
     << ", " << to_string(row.a2a_kernel) << " all-to-all, overlap " << to_string(row.overlap) << ")\n";
  const bool fixed = row.lengths.kind == LengthKind::fixed;
  if (row.phase == StepPhase::decode)
    os << "  " << row.requests_per_gpu << " requests a GPU attending "
       << (fixed ? std::to_string(row.kv_len) : row.lengths.spec + " (mean " + text::fixed(row.lengths.mean(0), 0) + ")")
       << " KV tokens each, " << s.tokens_per_rank << " tokens a GPU a step";
  else
    os << "  " << s.tokens_per_rank << " prompt tokens a GPU in prompts of "
       << (fixed ? std::to_string(row.isl) : row.lengths.spec) << " tokens";
  if (row.mtp_draft > 0)
    os << "; MTP " << row.mtp_draft << " draft token(s) at " << text::fixed(row.mtp_accept, 2) << " acceptance: "
       << text::fixed(s.tokens_per_request, 3) << " tokens a request a step";
  os << "\n  routing: " << routing_note << "\n\n";
  char line[200];
  std::snprintf(line, sizeof line, "%-30s %12s %12s\n", "one MoE layer (ms)", "actual", "balanced");
  os << line;
  const LayerBreakdown& a = s.moe_layer;
  const LayerBreakdown& b = s.balanced_layer;
  const std::pair<const char*, std::pair<double, double>> parts[] = {
      {"attention (core)", {a.attention_s, b.attention_s}}, {"dense GEMMs", {a.dense_s, b.dense_s}},
      {"experts (MoE GEMMs)", {a.experts_s, b.experts_s}},  {"other kernels", {a.other_s, b.other_s}},
      {"compute-stream wait", {a.compute_wait_s, b.compute_wait_s}}, {"layer", {a.layer_s, b.layer_s}},
      {"dispatch (kernel as seen)", {a.dispatch_s, b.dispatch_s}}, {"combine (kernel as seen)", {a.combine_s, b.combine_s}},
      {"waits for the slowest rank", {a.sync_s, b.sync_s}}};
  for (const auto& [name, v] : parts) {
    std::snprintf(line, sizeof line, "%-30s %12s %12s\n", name, ms(v.first).c_str(), ms(v.second).c_str());
    os << line;
  }
  const int moe = moe_layer_count(e.model);
  os << "\nstep: " << ms(s.step_s) << " ms (" << moe << " MoE layers";
  if (e.model.layers > moe)
    os << ", " << e.model.layers - moe << " dense layers of " << ms(s.dense_layer_s) << " ms";
  os << ", head " << ms(s.head_s) << " ms";
  if (s.mtp_s > 0) os << ", MTP " << ms(s.mtp_s) << " ms";
  os << ")\n";
  if (row.phase == StepPhase::decode)
    os << "TPOT " << ms(s.tpot_s) << " ms; " << text::fixed(s.output_tokens_per_s_per_gpu, 1) << " output tokens/s a GPU, "
       << text::fixed(s.tokens_per_s_per_node, 0) << " a node of " << row.devices_per_node << "\n";
  else
    os << text::fixed(s.input_tokens_per_s_per_gpu, 1) << " input tokens/s a GPU, " << text::fixed(s.tokens_per_s_per_node, 0)
       << " a node of " << row.devices_per_node << "\n";
  os << "attention over the ranks: balance ratio " << text::fixed(s.attention.balance_ratio, 3)
     << " (mean over max tokens), the slowest rank " << text::fixed(s.attention.wait_s * 1e6, 1)
     << " us over the mean; routed tokens per GPU: balancedness " << text::fixed(s.balancedness, 3) << " (mean over max)\n";
  const StepErosion& x = s.erosion;
  os << "\nwhere the step goes past its ideal (balanced routing and attention, each MoE layer max(compute, "
        "communication)), ms:\n";
  const std::pair<const char*, double> causes[] = {{"attention imbalance over ranks", x.attention_imbalance_s},
                                                   {"expert skew in compute", x.skew_compute_s},
                                                   {"expert skew in communication", x.skew_communication_s},
                                                   {"overlap bubbles and exposed communication", x.overlap_s},
                                                   {"ideal", x.ideal_s},
                                                   {"step", x.actual_s}};
  for (const auto& [name, v] : causes) {
    std::snprintf(line, sizeof line, "  %-44s %12s  %6s%%\n", name, ms(v).c_str(),
                  text::fixed(x.actual_s > 0 ? 100 * v / x.actual_s : 0.0, 1).c_str());
    os << line;
  }
  return os.str();
}

int64_t positive(const std::string& flag, int64_t v, int64_t max) {
  if (v < 1 || v > max)
    throw InputError(flag + ": expected an integer from 1 to " + std::to_string(max) + ", got " + std::to_string(v));
  return v;
}

// The step's options, as given.
struct StepOptions {
  std::string phase = "decode", routing = "model", lengths = "fixed";
  int64_t requests = 64, kv_len = 2048, tokens = 0, isl = 0;
  int tp = -1, draft = 0;  // tp -1: not given (placement.attention_tp)
  double accept = 0;
};

// The row the step model takes for experiment `e` on `hw` with the options.
StepRow row_for(const Experiment& e, const HardwareProfile& hw, const StepOptions& o) {
  StepRow row;
  if (o.phase == "decode") row.phase = StepPhase::decode;
  else if (o.phase == "prefill") row.phase = StepPhase::prefill;
  else throw InputError("--phase: expected decode or prefill, got '" + o.phase + "'");
  const bool ep = e.placement.kind == PlacementKind::expert_parallel;
  row.gpus = ep ? e.placement.devices : 1;
  row.ep = row.gpus;
  row.tp = o.tp == -1 ? (ep ? e.placement.attention_tp : 1) : static_cast<int>(positive("--tp", o.tp, 1024));
  if (row.gpus % row.tp != 0)
    throw InputError("--tp: expected a divisor of placement.devices (" + std::to_string(row.gpus) + "), got " +
                     std::to_string(row.tp));
  row.attention_dp = row.gpus / row.tp;
  row.devices_per_node = hw.devices_per_node > 0 ? hw.devices_per_node : row.gpus;
  if (o.draft < 0 || o.draft > 16)
    throw InputError("--mtp-draft: expected an integer from 0 to 16, got " + std::to_string(o.draft));
  if (!(o.accept >= 0 && o.accept <= 1)) throw InputError("--mtp-accept: expected a number from 0 to 1");
  if (o.draft > 0 && row.phase == StepPhase::prefill) throw InputError("--mtp-draft: expected with --phase decode only");
  row.mtp_draft = o.draft;
  row.mtp_accept = o.accept;
  row.kv_len = positive("--kv-len", o.kv_len, int64_t{1} << 22);
  if (row.phase == StepPhase::decode) {
    if (o.tokens > 0 || o.isl > 0) throw InputError("--tokens-per-gpu, --isl: expected with --phase prefill only");
    row.requests_per_gpu = positive("--requests-per-gpu", o.requests, int64_t{1} << 20);
  } else {
    if (o.tokens <= 0) throw InputError("--tokens-per-gpu: expected the prompt tokens a GPU runs with --phase prefill");
    row.tokens_per_gpu = positive("--tokens-per-gpu", o.tokens, int64_t{1} << 22);
    row.isl = o.isl > 0 ? positive("--isl", o.isl, int64_t{1} << 22) : std::min(row.kv_len, row.tokens_per_gpu);
  }
  row.lengths = parse_request_lengths(o.lengths, "--lengths");
  if (const std::string too_big = step_size_error(row); !too_big.empty())
    throw InputError(std::string(row.phase == StepPhase::decode ? "--requests-per-gpu" : "--tokens-per-gpu") +
                     ": expected " + too_big + " on placement.devices " + std::to_string(row.gpus) + ", got " +
                     std::to_string(row.phase == StepPhase::decode ? row.requests_per_gpu : row.tokens_per_gpu));
  row.overlap = e.placement.overlap;
  row.a2a_kernel = e.placement.a2a_kernel;
  row.dispatch_dtype = e.placement.dispatch_dtype;
  row.combine_dtype = e.placement.combine_dtype;
  row.redundant_experts = ep ? e.placement.replicas : 0;
  row.routing = o.routing;
  if (o.routing != "model" && o.routing != "balanced" && o.routing.rfind("power_law:", 0) != 0)
    throw InputError("--routing: expected model, balanced or power_law:ALPHA, got '" + o.routing + "'");
  return row;
}

std::string routing_note(const Experiment& e, const StepRow& row) {
  std::string note = row.routing != "model" ? row.routing
                     : e.workload.source == WorkloadSource::load_profile
                         ? "the recorded loads of " + e.workload.path + ", each layer a draw"
                     : e.workload.source == WorkloadSource::trace
                         ? "the recorded routing of " + e.workload.path + ", each batch (a router trace: each layer) a draw"
                         : "the experiment's router on its " + std::string(to_string(e.workload.source)) + " workload";
  if (row.routing == "model" && row.redundant_experts > 0) note += "; " + plan_source_note(e);
  return note;
}

std::string sweep_text(const std::vector<SweepAxis>& axes, const std::vector<SweepPoint>& points,
                       const std::vector<StepRow>& rows, const std::vector<ServingStep>& steps) {
  std::ostringstream os;
  os << "moesim step --vary: " << points.size() << " points, routed once\n";
  std::string head;
  for (const SweepAxis& a : axes) head += a.key + "  ";
  const bool decode = rows.front().phase == StepPhase::decode;
  char line[400];
  std::snprintf(line, sizeof line, "%-40s %10s %10s %10s %10s %12s %12s %8s %8s\n", head.c_str(), "layer_ms", "bal_layer",
                "step_ms", decode ? "tpot_ms" : "-", decode ? "out_tok_s" : "in_tok_s", "bal_tok_s", "skew_%", "attn_%");
  os << line;
  for (size_t i = 0; i < points.size(); ++i) {
    std::string vals;
    for (const std::string& v : points[i].values) vals += v + "  ";
    const ServingStep& s = steps[i];
    const double tok = decode ? s.output_tokens_per_s_per_gpu : s.input_tokens_per_s_per_gpu;
    const double bal = s.balanced_step_s > 0 ? tok * s.step_s / s.balanced_step_s : 0;
    const StepErosion& x = s.erosion;
    std::snprintf(line, sizeof line, "%-40s %10s %10s %10s %10s %12s %12s %8s %8s\n", vals.c_str(),
                  ms(s.moe_layer.layer_s).c_str(), ms(s.balanced_layer.layer_s).c_str(), ms(s.step_s).c_str(),
                  decode ? ms(s.tpot_s).c_str() : "-", text::fixed(tok, 1).c_str(), text::fixed(bal, 1).c_str(),
                  text::fixed(100 * (x.skew_compute_s + x.skew_communication_s) / s.step_s, 1).c_str(),
                  text::fixed(100 * x.attention_imbalance_s / s.step_s, 1).c_str());
    os << line;
  }
  os << "(bal_tok_s: balanced routing and attention; skew_%: expert skew in compute and communication, attn_%: attention "
        "imbalance over ranks, as shares of the step)\n";
  return os.str();
}

}  // namespace

int cmd_step(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  StepOptions o;
  std::vector<std::string> varies;
  po::options_description desc("moesim step [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files),
      "experiment YAML: its model, router, workload, hardware and placement: section (default: the built-in quickstart)")(
      "phase", po::value(&o.phase)->default_value("decode"), "decode | prefill")(
      "requests-per-gpu", po::value(&o.requests)->default_value(64), "decode: requests each GPU decodes")(
      "kv-len", po::value(&o.kv_len)->default_value(2048), "KV tokens each request attends (prefill: prompt + cached)")(
      "tokens-per-gpu", po::value(&o.tokens), "prefill: prompt tokens each GPU runs (required for prefill)")(
      "isl", po::value(&o.isl), "prefill: prompt length (default: --kv-len)")(
      "lengths", po::value(&o.lengths)->default_value("fixed"),
      "requests' KV lengths (decode) or prompt lengths (prefill): fixed (--kv-len, --isl), uniform:LO:HI, "
      "lognormal:MEDIAN:SIGMA or file:PATH (a CSV of one `tokens` column)")(
      "tp", po::value(&o.tp), "attention tensor parallel (attention DP = GPUs / tp; default placement.attention_tp)")(
      "mtp-draft", po::value(&o.draft)->default_value(0), "decode: draft tokens a request verifies each step")(
      "mtp-accept", po::value(&o.accept)->default_value(0.0), "the chance each draft token is accepted, in [0, 1]")(
      "routing", po::value(&o.routing)->default_value("model"),
      "model (the experiment's router and workload), balanced, or power_law:ALPHA")(
      "vary", po::value(&varies)->composing(),
      "KEY=v1,v2|1..256*2: a placement.* or hardware key over values (repeatable: the cartesian product), routed once "
      "and costed at every point");
  desc.add_options()("set", po::value(&opts.overrides)->composing(), "override a config key: KEY=VALUE (repeatable)")(
      "format", po::value(&opts.format)->default_value("table"), "table|json|csv|markdown|html")(
      "out", po::value(&opts.out), "write the report to this file (atomically) instead of stdout");
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  const bool html = opts.format == "html";
  const ReportFormat format = html ? ReportFormat::table : parse_report_format(opts.format);
  if (html && !varies.empty()) throw InputError("--format html: expected without --vary (one step's page)");

  if (!varies.empty()) {
    const std::vector<SweepAxis> axes = parse_varies(varies);
    for (const SweepAxis& a : axes)
      for (const std::string& k : a.keys) check_route_once_key(k, "step");
    const std::vector<SweepPoint> points = sweep_points(axes);
    std::vector<Experiment> exps;
    std::vector<HardwareProfile> hws;
    std::vector<StepRow> rows;
    int64_t most = 0;
    bool plan = false;
    for (const SweepPoint& p : points) {
      CommonOptions po = opts;
      po.overrides.insert(po.overrides.end(), p.settings.begin(), p.settings.end());
      exps.push_back(load_experiment_for(po));
      hws.push_back(load_hardware_profile(exps.back().hardware, exps.back().source_file));
      rows.push_back(row_for(exps.back(), hws.back(), o));
      most = std::max(most, step_tokens(rows.back()));
      plan = plan || rows.back().redundant_experts > 0;
    }
    // Route once, at the largest point's tokens: every point scales those loads to its own.
    const StepRouting routed = route_loads(rows.front(), exps.front(), most, plan);
    std::vector<ServingStep> steps;
    for (size_t i = 0; i < points.size(); ++i)
      steps.push_back(model_serving_step(step_input_for(rows[i], exps[i], hws[i], &routed)));
    std::string text;
    if (format == ReportFormat::json) {
      json j = json::array();
      for (size_t i = 0; i < points.size(); ++i) {
        json p = step_json(rows[i], steps[i], routing_note(exps[i], rows[i]));
        p["settings"] = points[i].settings;
        j.push_back(p);
      }
      text = json{{"points", j}}.dump(2) + "\n";
    } else if (format == ReportFormat::csv) {
      std::ostringstream os;
      os << "settings," << kCsvHeader;
      for (size_t i = 0; i < points.size(); ++i) {
        std::string settings;
        for (const std::string& x : points[i].settings) settings += (settings.empty() ? "" : " ") + x;
        os << text::csv_cell(settings) << "," << csv_row(rows[i], steps[i]);
      }
      text = os.str();
    } else {
      text = sweep_text(axes, points, rows, steps);
      if (format == ReportFormat::markdown) text = "```text\n" + text + "```\n";
    }
    emit(opts, text);
    return kExitOk;
  }

  const Experiment e = load_experiment_for(opts);
  const HardwareProfile hw = load_hardware_profile(e.hardware, e.source_file);
  const StepRow row = row_for(e, hw, o);
  const std::string note = routing_note(e, row);
  const ServingStepInput in = step_input_for(row, e, hw);
  const ServingStep s = model_serving_step(in);

  std::string text;
  if (html) {
    const std::string table = table_text(e, row, s, note);
    const std::vector<std::string> lines = header_lines(table);
    const int moe = moe_layer_count(e.model);
    emit(opts, format_step_html("moesim step: " + e.model.name, lines, s, moe, e.model.layers - moe));
    return kExitOk;
  }
  switch (format) {
    case ReportFormat::json: text = step_json(row, s, note).dump(2) + "\n"; break;
    case ReportFormat::csv: text = std::string(kCsvHeader) + csv_row(row, s); break;
    case ReportFormat::markdown: text = "```text\n" + table_text(e, row, s, note) + "```\n"; break;
    default: text = table_text(e, row, s, note);
  }
  emit(opts, text);
  return kExitOk;
}

}  // namespace moesim::cli
