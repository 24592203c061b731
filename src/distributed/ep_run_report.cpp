// The reports of an expert-parallel run (see ep_run.hpp): JSON (the single-process run schema, with
// every step, rank and phase time, the placement epochs, the cost model and the rebalancing gain under
// `expert_parallel`), the table (header, per-(step, rank) rows,
// per-step and per-rank summaries, the model at its real size) and the same rows as csv or markdown. Pure
// functions of the EpRunResult. Host only. Covered by the mpi-labelled CTest entries (tests/mpi/CMakeLists.txt).
#include "src/distributed/ep_run.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "src/report/report.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

double ms(double s) { return s * 1e3; }

nlohmann::json times_json(const EpPhaseTimes& t) {
  return {{"plan_s", t.plan_s},       {"idle_dispatch_s", t.idle_dispatch_s}, {"counts_s", t.counts_s},
          {"pack_s", t.pack_s},       {"dispatch_s", t.dispatch_s},           {"unpack_s", t.unpack_s},
          {"experts_s", t.experts_s}, {"idle_combine_s", t.idle_combine_s},   {"return_s", t.return_s},
          {"combine_s", t.combine_s}, {"idle_s", t.idle_s()},                 {"all_to_all_s", t.all_to_all_s()},
          {"layer_s", t.layer_s}};
}

nlohmann::json cost_json(const LayerCost& c) {
  return {{"layer_s", c.actual.quantized_s},     {"balanced_layer_s", c.balanced.quantized_s},
          {"device_time_s", c.device_time_s},    {"device_tokens", c.device_tokens},
          {"rank_imbalance", c.rank_imbalance},  {"all_to_all_s", c.all_to_all_s},
          {"all_to_all_bytes", c.all_to_all_bytes}, {"batching_efficiency", c.batching_efficiency}};
}

struct Gain {
  int steps = 0;
  double rank_imbalance = 0, static_rank_imbalance = 0, modeled_s = 0, static_modeled_s = 0, layer_s = 0,
         static_layer_s = 0;
  bool model_size = false;  // every counted step has the model's real size
  double model_size_s = 0, static_model_size_s = 0;
};
Gain rebalance_gain(const EpRunResult& r) {
  Gain g;
  for (const EpStep& s : r.steps) {
    if (!s.has_static) continue;
    ++g.steps;
    g.rank_imbalance += s.rank_imbalance;
    g.static_rank_imbalance += s.static_rank_imbalance;
    g.modeled_s += s.modeled.actual.quantized_s;
    g.static_modeled_s += s.static_modeled.actual.quantized_s;
    g.layer_s += s.layer_s;
    g.static_layer_s += s.static_layer_s;
    g.model_size = g.steps == 1 ? s.has_model_size : g.model_size && s.has_model_size;
    g.model_size_s += s.model_size.actual.quantized_s;
    g.static_model_size_s += s.static_model_size.actual.quantized_s;
  }
  if (g.steps > 0) {
    const double n = g.steps;
    for (double* v : {&g.rank_imbalance, &g.static_rank_imbalance, &g.modeled_s, &g.static_modeled_s, &g.layer_s,
                      &g.static_layer_s, &g.model_size_s, &g.static_model_size_s})
      *v /= n;
  }
  return g;
}

std::string slots_text(const ExpertPlacement& p, int rank) {
  std::ostringstream os;
  const std::vector<int32_t> slots = ep_rank_slots(p, rank);
  if (slots.empty()) return "(none)";
  for (size_t i = 0; i < slots.size(); ++i) os << (i ? " " : "") << p.expert[slots[i]];
  return os.str();
}

using text::fixed;

// Columns of the per-(step, rank) rows shared by table, csv and markdown.
std::vector<std::string> row_header() {
  return {"step", "rank", "epoch", "tokens", "sent_remote", "recv_rows", "recv_remote", "model_recv_rows",
          "route_ms", "experts_ms", "model_experts_ms", "a2a_dispatch_ms", "a2a_combine_ms", "idle_ms", "layer_ms"};
}
std::vector<std::vector<std::string>> step_rank_rows(const EpRunResult& r) {
  std::vector<std::vector<std::string>> out;
  for (const EpStep& s : r.steps) {
    for (int d = 0; d < r.num_ranks; ++d) {
      const EpRankStats& st = s.ranks[d];
      const EpPhaseTimes& t = st.times;
      out.push_back({std::to_string(s.step), std::to_string(d), std::to_string(s.epoch),
                     std::to_string(st.local_tokens), std::to_string(st.rows_sent_remote),
                     std::to_string(st.rows_received), std::to_string(st.rows_received_remote),
                     std::to_string(s.modeled.device_tokens.at(d)), fixed(ms(s.route_s[d]), 3),
                     fixed(ms(t.experts_s), 3), fixed(ms(s.modeled.device_time_s.at(d)), 3),
                     fixed(ms(t.counts_s + t.dispatch_s), 3), fixed(ms(t.return_s), 3), fixed(ms(t.idle_s()), 3),
                     fixed(ms(t.layer_s), 3)});
    }
  }
  return out;
}

std::string aligned(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::ostringstream os;
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) os << (c ? "  " : "") << std::setw(static_cast<int>(width[c])) << row[c];
    os << "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  return os.str();
}

// The per-(step, rank) rows as csv or a markdown table.
std::string delimited_rows(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                           ReportFormat format) {
  std::ostringstream os;
  if (format == ReportFormat::csv) {
    for (size_t c = 0; c < header.size(); ++c) os << (c ? "," : "") << header[c];
    os << "\n";
    for (const auto& row : rows) {
      for (size_t c = 0; c < row.size(); ++c) os << (c ? "," : "") << row[c];
      os << "\n";
    }
    return os.str();
  }
  os << "|";
  for (const std::string& h : header) os << " " << h << " |";
  os << "\n|";
  for (size_t c = 0; c < header.size(); ++c) os << "---:|";
  os << "\n";
  for (const auto& row : rows) {
    os << "|";
    for (const std::string& v : row) os << " " << v << " |";
    os << "\n";
  }
  return os.str();
}

// The table's opening lines: the run, the executed size, the placement epochs, the cost model and notes.
std::string table_preamble(const EpRunResult& r) {
  const Experiment& e = r.experiment;
  const HardwareProfile& hw = r.hardware;
  std::ostringstream os;
  os << "moesim run: expert parallel over " << r.num_ranks << " MPI ranks\n";
  os << "experiment " << e.name << ": " << to_string(e.router.gating) << ", " << e.model.experts << " experts, top-"
     << e.model.top_k << ", " << r.num_tokens << " tokens per step, " << r.steps.size() << " steps; "
     << (r.routing_local ? "each rank routes its own tokens"
                         : "the router needs the whole batch: ranks gather the logits and route it all")
     << "\n";
  os << "executed: hidden " << e.execute.hidden << ", ffn " << e.execute.ffn << ", fp32; times are medians of "
     << std::max(1, e.execute.repeats) << " repeats per step, in ms\n";
  os << "placement: " << r.placement_rule << "\n";
  for (size_t i = 0; i < r.placements.size(); ++i) {
    os << "  epoch " << i << " (from step " << r.epoch_first_step[i] << "):";
    for (int d = 0; d < r.num_ranks; ++d) os << (d ? " |" : "") << " rank " << d << ": " << slots_text(r.placements[i], d);
    os << "\n";
  }
  os << "cost model: " << hw.name << (hw.calibrated ? " (calibrated)" : "") << ", link "
     << fixed(hw.link_bandwidth_bytes_per_s / 1e9, 2) << " GB/s, latency " << fixed(hw.link_latency_s * 1e6, 1)
     << " us, at the executed size";
  if (!hw.calibrated) {
    os << "\n  note: " << hw.name << " is not this machine; for a like-for-like model run `moesim calibrate --out "
       << "cpu.yaml`, then `mpirun -np " << r.num_ranks << " moesim calibrate-link --base cpu.yaml --out cpu-link.yaml`"
       << " and add --set hardware=cpu-link.yaml";
  }
  if (r.ranks_per_host > r.host_cores) {
    os << "\n  note: " << r.ranks_per_host << " ranks share " << r.host_cores
       << " cores here: the times include time slicing (run at most one rank per core to measure the layer)";
  }
  return os.str();
}

// Per step: expert and rank imbalance, measured and modelled, the slowest rank, idle and layer times.
std::string per_step_table(const EpRunResult& r) {
  std::ostringstream os;
  std::vector<std::vector<std::string>> summary;
  for (const EpStep& s : r.steps) {
    double idle_max = 0;
    int slowest = 0;
    for (int d = 0; d < r.num_ranks; ++d) {
      idle_max = std::max(idle_max, s.ranks[d].times.idle_s());
      if (s.ranks[d].times.experts_s > s.ranks[slowest].times.experts_s) slowest = d;
    }
    summary.push_back({std::to_string(s.step), fixed(s.metrics.imbalance, 3), fixed(s.rank_imbalance, 3),
                       fixed(s.modeled.rank_imbalance, 3), fixed(s.expert_time_imbalance, 3), std::to_string(slowest),
                       fixed(ms(idle_max), 3), fixed(ms(s.layer_s), 3), fixed(ms(s.modeled.actual.quantized_s), 3),
                       fixed(ms(s.modeled.all_to_all_s), 3)});
  }
  os << "per step (rank_imbalance: max / mean rows received; model_*: the cost model for the same placement)\n"
     << aligned({"step", "expert_imbalance", "rank_imbalance", "model_rank_imbalance", "expert_time_imbalance",
                 "slowest_rank", "max_idle_ms", "layer_ms", "model_layer_ms", "model_a2a_ms"},
                summary)
     << "\n";
  return os.str();
}

// Per rank, means over the steps: rows received, expert, all-to-all and idle times against the model.
std::string per_rank_table(const EpRunResult& r) {
  std::ostringstream os;
  std::vector<std::vector<std::string>> per_rank;
  for (int d = 0; d < r.num_ranks; ++d) {
    double recv = 0, experts = 0, idle = 0, a2a = 0, layer = 0, model = 0;
    for (const EpStep& s : r.steps) {
      recv += static_cast<double>(s.ranks[d].rows_received);
      experts += s.ranks[d].times.experts_s;
      idle += s.ranks[d].times.idle_s();
      a2a += s.ranks[d].times.all_to_all_s();
      layer += s.ranks[d].times.layer_s;
      model += s.modeled.device_time_s.at(d);
    }
    const double n = static_cast<double>(std::max<size_t>(1, r.steps.size()));
    per_rank.push_back({std::to_string(d), fixed(recv / n, 1), fixed(ms(experts / n), 3), fixed(ms(model / n), 3),
                        fixed(ms(a2a / n), 3), fixed(ms(idle / n), 3),
                        fixed(layer > 0 ? 100.0 * idle / layer : 0.0, 1)});
  }
  os << "per rank, mean over steps (idle: waiting in barriers for the slowest rank)\n"
     << aligned({"rank", "recv_rows", "experts_ms", "model_experts_ms", "a2a_ms", "idle_ms", "idle_pct"}, per_rank);
  return os.str();
}

// The model at its real size, the rebalancing gain over the static placement, the verify verdict.
std::string table_closing(const EpRunResult& r) {
  const Experiment& e = r.experiment;
  const HardwareProfile& hw = r.hardware;
  std::ostringstream os;
  const LayerCost& m = r.modeled_model_size;
  os << "\nat the model's size (hidden " << e.model.hidden << ", ffn " << e.model.ffn << ", " << to_string(e.model.dtype)
     << ") on " << hw.name << ", last step: ";
  if (r.has_model_size) {
    os << "layer " << fixed(ms(m.actual.quantized_s), 3) << " ms, all-to-all " << fixed(ms(m.all_to_all_s), 3)
       << " ms, rank_imbalance " << fixed(m.rank_imbalance, 3) << "\n";
  } else {
    os << "not modeled (" << hw.name << " has no " << to_string(e.model.dtype) << " peak)\n";
  }
  const Gain g = rebalance_gain(r);
  if (g.steps > 0) {
    os << "rebalancing gain over the static placement (epoch 0), mean of " << g.steps << " steps: rank_imbalance "
       << fixed(g.static_rank_imbalance, 3) << " -> " << fixed(g.rank_imbalance, 3);
    if (g.model_size) {
      os << "; modeled layer at the model's size (hidden " << e.model.hidden << ", ffn " << e.model.ffn << ", "
         << to_string(e.model.dtype) << ") " << fixed(1e6 * g.static_model_size_s, 3) << " -> "
         << fixed(1e6 * g.model_size_s, 3) << " us ("
         << fixed(g.model_size_s > 0 ? g.static_model_size_s / g.model_size_s : 1.0, 3) << "x)";
    }
    os << "; modeled layer at the executed size (hidden " << e.execute.hidden << ", ffn " << e.execute.ffn << ", "
       << to_string(e.execute.dtype) << ") "
       << fixed(ms(g.static_modeled_s), 3) << " -> " << fixed(ms(g.modeled_s), 3) << " ms ("
       << fixed(g.modeled_s > 0 ? g.static_modeled_s / g.modeled_s : 1.0, 3) << "x); measured layer "
       << fixed(ms(g.static_layer_s), 3) << " -> " << fixed(ms(g.layer_s), 3) << " ms ("
       << fixed(g.layer_s > 0 ? g.static_layer_s / g.layer_s : 1.0, 3) << "x)\n";
  } else if (e.placement.rebalance_every > 0) {
    os << "rebalancing: no step after the first re-plan (workload.batches <= placement.rebalance_every)\n";
  }
  if (!r.verify_message.empty()) os << "verify: " << r.verify_message << "\n";
  return os.str();
}

}  // namespace

namespace {

// The run as a single-process result sees it: one strategy (the experiment's own router), one routed
// batch per step, modeled at the model's real size expert-parallel over the job's ranks.
RunResult as_run_result(const EpRunResult& r) {
  RunResult run;
  run.experiment = r.experiment;
  run.hardware = r.hardware;
  run.num_tokens = r.num_tokens;
  VariantResult v;
  v.variant = own_variant(r.experiment).front();
  for (const EpStep& s : r.steps) {
    v.per_batch.push_back(s.metrics);
    // The headline's per-expert sums over the steps, as a single-process batch run keeps them.
    StepRecord rec;
    rec.num_tokens = r.num_tokens;
    add_to_totals(v.totals, rec, s.metrics);
  }
  // Without a peak for model.dtype the profile cannot cost the real size; the last step at the executed
  // size stands in (expert_parallel.modeled_model_size is then absent).
  const LayerCost cost = r.has_model_size || r.steps.empty() ? r.modeled_model_size : r.steps.back().modeled;
  v.modeled.push_back({"expert_parallel", r.num_ranks, cost, r.placement_rule});
  v.verify_message = r.verify_message;
  run.variants.push_back(std::move(v));
  return run;
}

}  // namespace

nlohmann::json ep_run_to_json(const EpRunResult& r) {
  const Experiment& e = r.experiment;
  // The single-process schema (report.hpp run_to_json), with the per-rank blocks under expert_parallel.
  nlohmann::json j = run_to_json(as_run_result(r));
  j["mode"] = "expert_parallel_mpi";
  nlohmann::json ep;
  ep["ranks"] = r.num_ranks;
  ep["ranks_per_host"] = r.ranks_per_host;
  ep["host_cores"] = r.host_cores;
  ep["num_tokens"] = r.num_tokens;
  ep["routing"] = r.routing_local ? "local" : "replicated";
  ep["link"] = {{"calibrated", r.hardware.calibrated},
                {"link_bandwidth_bytes_per_s", r.hardware.link_bandwidth_bytes_per_s},
                {"link_latency_s", r.hardware.link_latency_s}};
  nlohmann::json epochs = nlohmann::json::array();
  for (size_t i = 0; i < r.placements.size(); ++i) {
    const ExpertPlacement& p = r.placements[i];
    epochs.push_back({{"first_step", r.epoch_first_step[i]},
                      {"expert", p.expert},
                      {"device", p.device},
                      {"node", p.node},
                      {"replicas", p.replicas},
                      {"device_load", device_plan_load(p)},
                      {"predicted_balancedness", balancedness_of(device_plan_load(p))},
                      {"colocated_replicas", colocated_replicas(p)}});
  }
  ep["placement"] = {{"rule", r.placement_rule},
                     {"policy", to_string(e.placement.policy)},
                     {"replicas", e.placement.replicas},
                     {"rebalance_every", e.placement.rebalance_every},
                     {"epochs", epochs}};
  nlohmann::json steps = nlohmann::json::array();
  for (const EpStep& s : r.steps) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int d = 0; d < r.num_ranks; ++d) {
      const EpRankStats& st = s.ranks[d];
      ranks.push_back({{"rank", d},
                       {"local_tokens", st.local_tokens},
                       {"assignments_sent", st.assignments_sent},
                       {"rows_sent_remote", st.rows_sent_remote},
                       {"rows_received", st.rows_received},
                       {"rows_received_remote", st.rows_received_remote},
                       {"rows_computed", st.rows_computed},
                       {"local_slots", st.local_slots},
                       {"route_s", s.route_s[d]},
                       {"times", times_json(st.times)}});
    }
    nlohmann::json js = {{"step", s.step},
                         {"epoch", s.epoch},
                         {"rebalanced", s.rebalanced},
                         {"load", s.metrics.load},
                         {"imbalance", s.metrics.imbalance},
                         {"drop_rate", s.metrics.drop_rate},
                         {"rank_imbalance", s.rank_imbalance},
                         {"expert_time_imbalance", s.expert_time_imbalance},
                         {"layer_s", s.layer_s},
                         {"ranks", ranks},
                         {"modeled", cost_json(s.modeled)}};
    js["predicted_balancedness"] = s.modeled.predicted_balancedness;
    js["realised_balancedness"] = s.modeled.balancedness;
    if (s.has_static) {
      js["static"] = {{"rank_imbalance", s.static_rank_imbalance}, {"layer_s", s.static_layer_s},
                      {"modeled", cost_json(s.static_modeled)}};
      if (s.has_model_size) {
        js["model_size"] = cost_json(s.model_size);
        js["static"]["model_size"] = cost_json(s.static_model_size);
      }
    }
    steps.push_back(js);
  }
  ep["steps"] = steps;
  if (r.has_model_size) ep["modeled_model_size"] = cost_json(r.modeled_model_size);
  const Gain g = rebalance_gain(r);
  if (g.steps > 0) {
    ep["rebalance_gain"] = {{"steps", g.steps},
                            {"rank_imbalance", g.rank_imbalance},
                            {"static_rank_imbalance", g.static_rank_imbalance},
                            {"modeled_layer_s", g.modeled_s},
                            {"static_modeled_layer_s", g.static_modeled_s},
                            {"layer_s", g.layer_s},
                            {"static_layer_s", g.static_layer_s}};
    if (g.model_size) {
      ep["rebalance_gain"]["model_size_layer_s"] = g.model_size_s;
      ep["rebalance_gain"]["static_model_size_layer_s"] = g.static_model_size_s;
    }
  }
  if (!r.verify_message.empty()) ep["verify"] = {{"ok", r.verify_ok}, {"message", r.verify_message}};
  j["expert_parallel"] = ep;
  return j;
}

std::string format_ep_run(const EpRunResult& r, ReportFormat format) {
  if (format == ReportFormat::json) return ep_run_to_json(r).dump(2) + "\n";
  const std::vector<std::string> header = row_header();
  const std::vector<std::vector<std::string>> rows = step_rank_rows(r);
  if (format == ReportFormat::csv || format == ReportFormat::markdown) return delimited_rows(header, rows, format);
  return table_preamble(r) + "\n\n" + aligned(header, rows) + "\n" + per_step_table(r) + per_rank_table(r) +
         table_closing(r);
}

}  // namespace moesim
