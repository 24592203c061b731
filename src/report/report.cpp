// JSON, table, CSV and Markdown reports of a run (see report.hpp).
#include "src/report/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "src/common/error.hpp"
#include "src/report/text_format.hpp"
#include "src/cost/hardware_profile.hpp"

namespace moesim {
namespace {

using Getter = std::function<std::optional<double>(const BalanceMetrics&)>;

// Per-batch metrics, in the order reports list them.
const std::vector<std::pair<std::string, Getter>>& batch_metrics() {
  static const std::vector<std::pair<std::string, Getter>> table = {
      {"imbalance", [](const BalanceMetrics& m) { return std::optional<double>(m.imbalance); }},
      {"demand_imbalance", [](const BalanceMetrics& m) { return std::optional<double>(m.demand_imbalance); }},
      {"cv", [](const BalanceMetrics& m) { return std::optional<double>(m.cv); }},
      {"entropy_norm", [](const BalanceMetrics& m) { return std::optional<double>(m.entropy_norm); }},
      {"active_experts", [](const BalanceMetrics& m) { return std::optional<double>(m.active_experts); }},
      {"dead_experts", [](const BalanceMetrics& m) { return std::optional<double>(m.dead_experts); }},
      {"capacity", [](const BalanceMetrics& m) { return std::optional<double>(double(m.capacity)); }},
      {"dropped", [](const BalanceMetrics& m) { return std::optional<double>(double(m.dropped)); }},
      {"drop_rate", [](const BalanceMetrics& m) { return std::optional<double>(m.drop_rate); }},
      {"tokens_unrouted", [](const BalanceMetrics& m) { return std::optional<double>(double(m.tokens_unrouted)); }},
      {"padding_waste", [](const BalanceMetrics& m) { return std::optional<double>(double(m.padding_waste)); }},
      {"top20_share", [](const BalanceMetrics& m) { return std::optional<double>(m.top20_share); }},
      {"bottom20_share", [](const BalanceMetrics& m) { return std::optional<double>(m.bottom20_share); }},
      {"aux_loss", [](const BalanceMetrics& m) { return m.has_logits ? std::optional<double>(m.aux_loss) : std::nullopt; }},
      {"aux_loss_switch",
       [](const BalanceMetrics& m) { return m.has_logits ? std::optional<double>(m.aux_loss_switch) : std::nullopt; }},
      {"aux_loss_gshard",
       [](const BalanceMetrics& m) { return m.has_logits ? std::optional<double>(m.aux_loss_gshard) : std::nullopt; }},
      {"z_loss", [](const BalanceMetrics& m) { return m.has_logits ? std::optional<double>(m.z_loss) : std::nullopt; }},
  };
  return table;
}

std::string fmt(double v, int precision = 3) { return text::fixed(v, precision); }

std::string fmt_opt(const std::optional<double>& v, int precision = 3) { return v ? fmt(*v, precision) : "-"; }

struct Column {
  std::string header;  // with its unit
  std::function<std::string(size_t)> cell;
};

std::vector<Column> columns(const RunResult& run) {
  const std::vector<int> ranks = rank_variants(run);
  std::vector<Column> cols;
  const auto& vs = run.variants;
  auto metric = [&](const std::string& name, int precision) {
    // Step-structured runs (decoder, trace, profile) show the mean over every step and layer.
    return [&, name, precision](size_t i) {
      return fmt_opt(metric_value(run, vs[i], name, vs[i].records.empty() ? "value" : "mean"), precision);
    };
  };
  cols.push_back({"strategy", [&](size_t i) { return vs[i].variant.label; }});
  cols.push_back({"imbalance", metric("imbalance", 3)});
  cols.push_back({"cv", metric("cv", 3)});
  cols.push_back({"entropy_norm", metric("entropy_norm", 3)});
  cols.push_back({"drop_rate", metric("drop_rate", 4)});
  cols.push_back({"unrouted", metric("tokens_unrouted", 0)});
  cols.push_back({"pad_waste", metric("padding_waste", 0)});
  cols.push_back({"aux_loss", metric("aux_loss", 3)});
  const bool ep = run.experiment.placement.kind == PlacementKind::expert_parallel;
  cols.push_back({"model_us", [&](size_t i) { return fmt(find_placement(vs[i], "single")->cost.actual.quantized_s * 1e6, 1); }});
  cols.push_back({"batch_eff", [&](size_t i) { return fmt(find_placement(vs[i], "single")->cost.batching_efficiency, 3); }});
  if (ep) {
    const std::string d = std::to_string(run.experiment.placement.devices);
    cols.push_back({"ep" + d + "_us", [&](size_t i) { return fmt(find_placement(vs[i], "expert_parallel")->cost.actual.quantized_s * 1e6, 1); }});
    cols.push_back({"ep" + d + "_eff", [&](size_t i) { return fmt(find_placement(vs[i], "expert_parallel")->cost.batching_efficiency, 3); }});
    cols.push_back({"rank_imb", [&](size_t i) { return fmt(find_placement(vs[i], "expert_parallel")->cost.rank_imbalance, 3); }});
  }
  cols.push_back({"measured_ms", [&](size_t i) { return vs[i].executed ? fmt(vs[i].measured.layer_s * 1e3, 2) : "-"; }});
  cols.push_back({"meas_eff", [&](size_t i) {
                    return vs[i].executed && vs[i].measured.layer_s > 0
                               ? fmt(vs[i].measured_balanced_layer_s / vs[i].measured.layer_s, 2)
                               : "-";
                  }});
  cols.push_back({"rank", [ranks](size_t i) { return std::to_string(ranks[i]); }});
  return cols;
}

}  // namespace

nlohmann::json metrics_to_json(const BalanceMetrics& m) {
  nlohmann::json j;
  for (const auto& [name, get] : batch_metrics()) {
    const auto v = get(m);
    j[name] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  }
  j["load"] = m.load;
  j["demand"] = m.demand;
  j["utilization"] = m.utilization;
  return j;
}

nlohmann::json cost_json(const CostBreakdown& c) {
  return {{"ideal_s", c.ideal_s}, {"quantized_s", c.quantized_s}, {"calibrated_s", c.calibrated_s}};
}

namespace {

nlohmann::json placement_json(const ModeledPlacement& p) {
  nlohmann::json j = {{"devices", p.devices},
                      {"time_s", p.cost.actual.quantized_s},
                      {"balanced_time_s", p.cost.balanced.quantized_s},
                      {"batching_efficiency", p.cost.batching_efficiency},
                      {"actual", cost_json(p.cost.actual)},
                      {"balanced", cost_json(p.cost.balanced)},
                      {"compute_bound_experts", p.cost.compute_bound_experts}};
  if (p.placement == "expert_parallel") {
    j["device_time_s"] = p.cost.device_time_s;
    j["device_tokens"] = p.cost.device_tokens;
    j["rank_imbalance"] = p.cost.rank_imbalance;
    j["balancedness"] = p.cost.balancedness;
    j["all_to_all_s"] = p.cost.all_to_all_s;
  }
  return j;
}

}  // namespace

namespace {

// ---- step-structured runs (decoder, trace, load profile) -----------------------------------------
nlohmann::json decoder_times_json(const DecoderTimes& t) {
  return {{"attention_s", t.attention_s}, {"router_s", t.router_s},   {"dispatch_s", t.dispatch_s},
          {"experts_s", t.experts_s},     {"combine_s", t.combine_s}, {"layer_s", t.layer_s}};
}

// Aggregates (mean, p50, p95, max) of every batch metric over the given entries of per_batch.
nlohmann::json aggregates_json(const VariantResult& v, const std::vector<size_t>& which) {
  nlohmann::json agg = nlohmann::json::object();
  for (const auto& [name, get] : batch_metrics()) {
    std::vector<double> s;
    for (size_t i : which)
      if (auto x = get(v.per_batch[i])) s.push_back(*x);
    if (s.empty()) continue;
    const Aggregate a = aggregate(s);
    agg[name] = {{"mean", a.mean}, {"p50", a.p50}, {"p95", a.p95}, {"max", a.max}};
  }
  return agg;
}

std::vector<size_t> phase_indices(const VariantResult& v, const std::string& phase) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < v.records.size(); ++i)
    if (v.records[i].phase == phase) idx.push_back(i);
  return idx;
}

// Loads summed over every step of each layer, with their balance: comparable with per-layer counts
// recorded from real models over many tokens (docs/workloads.md, calibration).
std::vector<std::pair<int, BalanceMetrics>> per_layer_totals(const RunResult& run, const VariantResult& v) {
  std::map<int, std::vector<int64_t>> load;
  std::map<int, int64_t> tokens;
  for (size_t i = 0; i < v.records.size(); ++i) {
    const std::vector<int64_t>& l = v.per_batch[i].load;
    std::vector<int64_t>& acc = load[v.records[i].layer];
    acc.resize(l.size(), 0);
    for (size_t e = 0; e < l.size(); ++e) acc[e] += l[e];
    tokens[v.records[i].layer] += v.records[i].num_tokens;
  }
  std::vector<std::pair<int, BalanceMetrics>> out;
  for (const auto& [layer, l] : load) out.emplace_back(layer, metrics_from_loads(l, tokens[layer], run.experiment.model.top_k));
  return out;
}

nlohmann::json per_layer_json(const RunResult& run, const VariantResult& v) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [layer, m] : per_layer_totals(run, v)) {
    out.push_back({{"layer", layer}, {"load", m.load}, {"imbalance", m.imbalance}, {"cv", m.cv}, {"entropy_norm", m.entropy_norm}});
  }
  return out;
}

void add_steps_json(const RunResult& run, const VariantResult& v, nlohmann::json& r) {
  nlohmann::json records = nlohmann::json::array();
  for (size_t i = 0; i < v.records.size(); ++i) {
    const StepRecord& s = v.records[i];
    nlohmann::json rec = {{"phase", s.phase},
                          {"step", s.step},
                          {"layer", s.layer},
                          {"num_tokens", s.num_tokens},
                          {"metrics", metrics_to_json(v.per_batch[i])}};
    if (run.has_decoder) {
      rec["context_tokens"] = s.context_tokens;
      rec["kv_cache_bytes"] = s.kv_cache_bytes;
      rec["kv_cache_bytes_executed"] = s.kv_cache_bytes_executed;
    }
    if (s.has_measured) rec["measured"] = decoder_times_json(s.measured);
    nlohmann::json modeled;
    for (const ModeledPlacement& p : s.modeled) modeled[p.placement] = placement_json(p);
    nlohmann::json m = {{"moe", modeled}, {"batching_efficiency", s.batching_efficiency}, {"layer_s", s.modeled_layer_s}};
    if (s.has_attention) m["attention"] = cost_json(s.modeled_attention);
    rec["modeled"] = m;
    records.push_back(rec);
  }
  r["records"] = records;
  nlohmann::json phases = nlohmann::json::object();
  for (const PhaseSummary& p : v.phases) {
    nlohmann::json ph = {{"steps", p.steps},
                         {"tokens", p.tokens},
                         {"tokens_unrouted", p.tokens_unrouted},
                         {"modeled_s", p.modeled_s},
                         {"modeled_attention_s", p.modeled_attention_s},
                         {"modeled_moe_s", p.modeled_moe_s},
                         {"modeled_tokens_per_s", p.modeled_tokens_per_s},
                         {"aggregates", aggregates_json(v, phase_indices(v, p.phase))}};
    if (run.has_decoder) ph["kv_cache_bytes"] = p.kv_cache_bytes;
    if (run.has_decoder && v.executed) {
      ph["measured_s"] = p.measured_s;
      ph["measured_tokens_per_s"] = p.measured_tokens_per_s;
    }
    phases[p.phase] = ph;
  }
  r["phases"] = phases;
  r["per_layer"] = per_layer_json(run, v);
}

nlohmann::json workload_details_json(const RunResult& run) {
  const Experiment& e = run.experiment;
  nlohmann::json w = nlohmann::json::object();
  if (run.has_decoder) {
    const DecoderShape& s = run.decoder_shape;
    w["sequences"] = e.workload.batch;
    w["prompt_len"] = run.prompt_len;
    w["topic"] = run.topic;
    w["decode_steps"] = e.workload.decode_steps;
    w["topics"] = e.workload.topics;
    w["executed_decoder"] = {{"layers", s.layers},     {"hidden", s.hidden},     {"ffn", s.ffn},
                             {"heads", s.heads},       {"kv_heads", s.kv_heads}, {"head_dim", s.head_dim},
                             {"vocab", s.vocab},       {"kv_cache_allocated_bytes", run.kv_cache_allocated_bytes}};
    w["model_attention"] = {{"layers", e.model.layers}, {"heads", e.model.heads}, {"kv_heads", e.model.kv_heads},
                            {"head_dim", e.model.head_dim}};
  }
  if (!run.workload_path.empty()) w["path"] = run.workload_path;
  if (e.workload.source == WorkloadSource::trace) w["replayed"] = run.trace_replayed;
  if (!run.profile_key.empty()) w["profile_key"] = run.profile_key;
  return w;
}

std::string phase_title(const RunResult& run) {
  const Experiment& e = run.experiment;
  std::ostringstream t;
  t << e.name << ": ";
  if (run.has_decoder) {
    const DecoderShape& s = run.decoder_shape;
    const auto [lo, hi] = std::minmax_element(run.prompt_len.begin(), run.prompt_len.end());
    t << "decoder, " << e.workload.batch << " sequences, prompts " << *lo;
    if (*hi != *lo) t << ".." << *hi;
    t << " tokens, " << e.workload.decode_steps << " decode steps, E=" << e.model.experts << ", k=" << e.model.top_k
      << ", topics " << e.workload.topics << ", skew " << e.workload.skew << "; executed " << s.layers << " of "
      << e.model.layers << " layers at hidden " << s.hidden << ", ffn " << s.ffn << ", " << s.heads << " heads / "
      << s.kv_heads << " kv heads x " << s.head_dim;
  } else if (e.workload.source == WorkloadSource::trace) {
    t << "trace " << run.workload_path << " (" << (run.trace_replayed ? "recorded decisions replayed" : "re-routed from its logits")
      << "), E=" << e.model.experts << ", k=" << e.model.top_k;
  } else {
    t << "load profile " << run.profile_key << " of " << run.workload_path << ", E=" << e.model.experts
      << ", k=" << e.model.top_k << ", cost modeled for batches of " << run.num_tokens << " tokens";
  }
  t << "; modeled on " << run.hardware.name << " (" << to_string(e.model.dtype) << ", hidden " << e.model.hidden
    << ", ffn " << e.model.ffn << ", critical batch " << fmt(critical_batch(run.hardware, e.model.dtype), 0) << ")";
  return t.str();
}

// One row per (strategy, phase): the prefill/decode split of a step-structured run.
std::vector<std::vector<std::string>> phase_rows(const RunResult& run) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"strategy", "phase", "steps", "tokens", "imb_p50", "imb_p95", "imb_max", "unrouted", "attn_us",
                  "moe_us", "batch_eff", "model_tok/s", "meas_tok/s", "kv_cache_MiB"});
  for (const VariantResult& v : run.variants) {
    for (const PhaseSummary& p : v.phases) {
      const std::vector<size_t> idx = phase_indices(v, p.phase);
      std::vector<double> imb, eff;
      for (size_t i : idx) {
        imb.push_back(v.per_batch[i].imbalance);
        eff.push_back(v.records[i].batching_efficiency);
      }
      const Aggregate a = aggregate(imb);
      const double per_layer = p.steps > 0 ? 1e6 / (p.steps * static_cast<double>(run.experiment.model.layers)) : 0;
      rows.push_back({v.variant.label, p.phase, std::to_string(p.steps), std::to_string(p.tokens), fmt(a.p50, 3),
                      fmt(a.p95, 3), fmt(a.max, 3), std::to_string(p.tokens_unrouted),
                      run.has_decoder ? fmt(p.modeled_attention_s * per_layer, 1) : "-", fmt(p.modeled_moe_s * per_layer, 1),
                      fmt(aggregate(eff).mean, 3), fmt(p.modeled_tokens_per_s, 0),
                      run.has_decoder && v.executed ? fmt(p.measured_tokens_per_s, 0) : "-",
                      run.has_decoder ? fmt(p.kv_cache_bytes / (1024.0 * 1024.0), 1) : "-"});
    }
  }
  return rows;
}

std::string phase_section(const RunResult& run, ReportFormat format) {
  const std::vector<std::vector<std::string>> rows = phase_rows(run);
  std::ostringstream os;
  if (format == ReportFormat::markdown) {
    os << "\n|";
    for (const std::string& h : rows[0]) os << " " << h << " |";
    os << "\n|";
    for (size_t c = 0; c < rows[0].size(); ++c) os << (c < 2 ? " :--- |" : " ---: |");
    os << "\n";
    for (size_t r = 1; r < rows.size(); ++r) {
      os << "|";
      for (const std::string& cell : rows[r]) os << " " << cell << " |";
      os << "\n";
    }
  } else {
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& row : rows)
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    os << "\nper phase:\n";
    for (const auto& row : rows) {
      for (size_t c = 0; c < row.size(); ++c) {
        const std::string pad(width[c] - row[c].size(), ' ');
        os << (c ? "  " : "") << (c < 2 ? row[c] + pad : pad + row[c]);
      }
      os << "\n";
    }
  }
  const bool decoder = run.has_decoder;
  os << "\n"
     << (run.experiment.workload.source == WorkloadSource::load_profile ? "recorded loads per layer"
                                                                        : "loads summed over the run, per layer")
     << " (max/mean, cv, entropy_norm):\n";
  for (const VariantResult& v : run.variants) {
    os << (format == ReportFormat::markdown ? "- " : "  ") << v.variant.label << ":";
    for (const auto& [layer, m] : per_layer_totals(run, v))
      os << "  L" << layer << " " << fmt(m.imbalance, 3) << " / " << fmt(m.cv, 3) << " / " << fmt(m.entropy_norm, 3);
    os << "\n";
  }
  const char* unit = decoder ? "per step and layer"
                     : run.experiment.workload.source == WorkloadSource::load_profile ? "per recorded layer"
                                                                                     : "per recorded step and layer";
  os << "\nimb_*: max/mean " << unit << "; unrouted: tokens with no expert, summed; batch_eff: mean over the "
        "records, of the expert-parallel placement when the experiment uses one; "
     << (decoder ? "attn_us, moe_us: modeled per layer and step at the model's real size; " : "moe_us: modeled per layer; ")
     << "model_tok/s: tokens / modeled time of all " << run.experiment.model.layers << " layers"
     << (decoder ? " (attention data-parallel over the placement's devices); meas_tok/s: executed decoder (" +
                       std::to_string(run.decoder_shape.layers) + " layers, CPU); kv_cache_MiB: whole model's KV cache "
                       "at the phase's end (model dtype)"
                 : "")
     << "\n";
  return os.str();
}

}  // namespace

ReportFormat parse_report_format(const std::string& s) {
  if (s == "table") return ReportFormat::table;
  if (s == "json") return ReportFormat::json;
  if (s == "csv") return ReportFormat::csv;
  if (s == "markdown" || s == "md") return ReportFormat::markdown;
  throw InputError("--format: expected table, json, csv or markdown, got '" + s + "'");
}

const std::vector<std::string>& scalar_metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, get] : batch_metrics()) n.push_back(name);
    for (const char* extra : {"rank_imbalance", "batching_efficiency", "modeled_time_s", "critical_batch",
                              "measured_layer_s", "measured_batching_efficiency"})
      n.push_back(extra);
    return n;
  }();
  return names;
}

std::optional<double> metric_value(const RunResult& run, const VariantResult& v, const std::string& metric,
                                   const std::string& agg) {
  for (const auto& [name, get] : batch_metrics()) {
    if (name != metric) continue;
    if (agg == "value") return get(v.last());
    std::vector<double> series;
    for (const BalanceMetrics& m : v.per_batch)
      if (auto x = get(m)) series.push_back(*x);
    if (series.empty()) return std::nullopt;
    const Aggregate a = aggregate(series);
    if (agg == "mean") return a.mean;
    if (agg == "p50") return a.p50;
    if (agg == "p95") return a.p95;
    if (agg == "max") return a.max;
    return std::nullopt;
  }
  // Run-level metrics have one value; every aggregate of one value is that value.
  const ModeledPlacement& p = primary_placement(v);
  if (metric == "batching_efficiency") return p.cost.batching_efficiency;
  if (metric == "modeled_time_s") return p.cost.actual.quantized_s;
  if (metric == "rank_imbalance")
    return p.placement == "expert_parallel" ? std::optional<double>(p.cost.rank_imbalance) : std::nullopt;
  if (metric == "critical_batch") return critical_batch(run.hardware, run.experiment.model.dtype);
  if (metric == "measured_layer_s") return v.executed ? std::optional<double>(v.measured.layer_s) : std::nullopt;
  if (metric == "measured_batching_efficiency")
    return v.executed && v.measured.layer_s > 0
               ? std::optional<double>(v.measured_balanced_layer_s / v.measured.layer_s)
               : std::nullopt;
  return std::nullopt;
}

std::vector<int> rank_variants(const RunResult& run) {
  const auto& vs = run.variants;
  std::vector<size_t> idx(vs.size());
  std::iota(idx.begin(), idx.end(), 0);
  // Dropped assignments are not free: a strategy that drops a fraction d of the work is charged its
  // modeled time / (1 - d), the time per delivered assignment scaled to the whole batch.
  auto served_time = [&](size_t i) {
    const double kept = 1.0 - vs[i].last().drop_rate;
    const double t = primary_placement(vs[i]).cost.actual.quantized_s;
    return kept > 0 ? t / kept : std::numeric_limits<double>::infinity();
  };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const double ta = served_time(a), tb = served_time(b);
    if (ta != tb) return ta < tb;
    return vs[a].last().imbalance < vs[b].last().imbalance;
  });
  std::vector<int> rank(vs.size());
  for (size_t r = 0; r < idx.size(); ++r) rank[idx[r]] = static_cast<int>(r) + 1;
  return rank;
}

nlohmann::json run_to_json(const RunResult& run) {
  const Experiment& e = run.experiment;
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["moesim_version"] = MOESIM_VERSION;
  j["experiment"] = {{"name", e.name}, {"source", e.source_file}};
  j["model"] = {{"hidden", e.model.hidden}, {"ffn", e.model.ffn},       {"experts", e.model.experts},
                {"top_k", e.model.top_k},   {"shared_experts", e.model.shared_experts},
                {"dtype", to_string(e.model.dtype)}};
  j["workload"] = {{"source", to_string(e.workload.source)}, {"num_tokens", run.num_tokens},
                   {"batches", e.workload.batches}, {"seed", e.workload.seed}, {"skew", e.workload.skew}};
  nlohmann::json cb;
  for (Dtype d : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8}) {
    const double b = critical_batch(run.hardware, d);
    if (b > 0 && std::isfinite(b)) cb[to_string(d)] = b;
  }
  j["hardware"] = {{"name", run.hardware.name}, {"critical_batch", cb},
                   {"critical_batch_model_dtype", critical_batch(run.hardware, e.model.dtype)}};
  j["execute"] = {{"hidden", e.execute.hidden}, {"ffn", e.execute.ffn}, {"repeats", e.execute.repeats},
                  {"backend", run.backend == ExecBackend::cuda ? "cuda" : "cpu"}};
  if (run.backend == ExecBackend::cuda) j["execute"]["device"] = run.device;
  // The first strategy's executed output (a run's only one); every strategy row carries its own.
  if (!run.variants.empty() && run.variants.front().executed)
    j["execute"]["output_digest"] = run.variants.front().output_digest;
  const nlohmann::json details = workload_details_json(run);
  for (auto it = details.begin(); it != details.end(); ++it) j["workload"][it.key()] = it.value();
  const std::vector<int> ranks = rank_variants(run);
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < run.variants.size(); ++i) {
    const VariantResult& v = run.variants[i];
    nlohmann::json r;
    r["strategy"] = v.variant.label;
    r["gating"] = to_string(v.variant.router.gating);
    r["rank"] = ranks[i];
    r["metrics"] = metrics_to_json(v.last());
    // Run-level scalars sit beside the batch metrics so that baselines and tools find every metric
    // of the vocabulary under "metrics".
    for (const std::string& name : scalar_metric_names()) {
      if (r["metrics"].contains(name)) continue;
      const std::optional<double> value = metric_value(run, v, name, "value");
      if (value) r["metrics"][name] = *value;
    }
    if (v.per_batch.size() > 1) {
      nlohmann::json agg, series;
      for (const auto& [name, get] : batch_metrics()) {
        std::vector<double> s;
        for (const BalanceMetrics& m : v.per_batch)
          if (auto x = get(m)) s.push_back(*x);
        if (s.empty()) continue;
        const Aggregate a = aggregate(s);
        agg[name] = {{"mean", a.mean}, {"p50", a.p50}, {"p95", a.p95}, {"max", a.max}};
        if (name == "imbalance") series["imbalance"] = s;
      }
      r["aggregates"] = agg;
      r["series"] = series;
    }
    if (!v.final_bias.empty()) r["expert_bias"] = v.final_bias;
    nlohmann::json modeled;
    for (const ModeledPlacement& p : v.modeled) modeled[p.placement] = placement_json(p);
    r["modeled"] = modeled;
    if (v.executed) {
      r["measured"] = {{"router_s", v.measured.router_s},   {"dispatch_s", v.measured.dispatch_s},
                       {"experts_s", v.measured.experts_s}, {"combine_s", v.measured.combine_s},
                       {"layer_s", v.measured.layer_s},     {"balanced_layer_s", v.measured_balanced_layer_s},
                       {"output_digest", v.output_digest}};
    }
    if (!v.final_hidden_digest.empty()) r["final_hidden_digest"] = v.final_hidden_digest;
    if (!v.verify_message.empty()) r["verify"] = v.verify_message;
    if (!v.records.empty()) add_steps_json(run, v, r);
    rows.push_back(r);
  }
  j["strategies"] = rows;
  return j;
}

std::string format_run(const RunResult& run, ReportFormat format) {
  if (format == ReportFormat::json) return run_to_json(run).dump(2) + "\n";
  const std::vector<Column> cols = columns(run);
  const size_t n = run.variants.size();
  std::vector<std::vector<std::string>> cells(n);
  for (size_t i = 0; i < n; ++i)
    for (const Column& c : cols) cells[i].push_back(c.cell(i));
  std::ostringstream os;
  if (format == ReportFormat::csv) {
    for (size_t c = 0; c < cols.size(); ++c) os << (c ? "," : "") << cols[c].header;
    os << "\n";
    for (const auto& row : cells) {
      for (size_t c = 0; c < row.size(); ++c) os << (c ? "," : "") << text::csv_cell(row[c]);
      os << "\n";
    }
    return os.str();
  }
  const Experiment& e = run.experiment;
  std::ostringstream title;
  title << e.name << ": " << run.num_tokens << " tokens x " << e.workload.batches << " batch(es), E=" << e.model.experts
        << ", k=" << e.model.top_k << ", modeled on " << run.hardware.name << " (" << to_string(e.model.dtype)
        << ", hidden " << e.model.hidden << ", ffn " << e.model.ffn << ", critical batch "
        << fmt(critical_batch(run.hardware, e.model.dtype), 0) << "), executed at hidden " << e.execute.hidden
        << ", ffn " << e.execute.ffn << " on " << (run.backend == ExecBackend::cuda ? run.device : "the CPU");
  const bool stepped = !run.variants.empty() && !run.variants.front().records.empty();
  if (stepped) {
    title.str("");
    title << phase_title(run);
  }
  if (format == ReportFormat::markdown) {
    os << "**" << title.str() << "**\n\n|";
    for (const Column& c : cols) os << " " << c.header << " |";
    os << "\n|";
    for (size_t c = 0; c < cols.size(); ++c) os << (c == 0 ? " :--- |" : " ---: |");
    os << "\n";
    for (const auto& row : cells) {
      os << "|";
      for (const auto& cell : row) os << " " << cell << " |";
      os << "\n";
    }
    if (stepped) os << phase_section(run, format);
    return os.str();
  }
  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) {
    width[c] = cols[c].header.size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  os << title.str() << "\n";
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      os << (c ? "  " : "") << (c == 0 ? row[c] + pad : pad + row[c]);
    }
    os << "\n";
  };
  std::vector<std::string> header;
  for (const Column& c : cols) header.push_back(c.header);
  line(header);
  for (const auto& row : cells) line(row);
  os << "model_us: modeled MoE layer time (roofline with tile quantization and launch overhead); batch_eff: "
        "balanced / actual modeled time (>1: idle experts load no weights in the memory-bound regime); "
        "measured_ms: executed layer, median of "
     << e.execute.repeats << "; meas_eff: measured balanced / actual; rank: by modeled time / (1 - drop_rate)\n";
  if (stepped) {
    os << "step-structured run: imbalance .. aux_loss are means over every step and layer; model_us and batch_eff "
          "the mean "
       << (run.has_decoder ? "decode-step MoE layer" : "MoE layer")
       << (run.has_decoder ? "; measured_ms: the last step's last MoE layer re-timed on its hidden states" : "")
       << "\n";
    os << phase_section(run, format);
  }
  return os.str();
}

}  // namespace moesim
