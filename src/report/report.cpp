// JSON reports of a run and the scalar metric vocabulary that check and the tables read (see report.hpp);
// the table, CSV and Markdown formats are in report_table.cpp. Host only.
#include "src/report/report.hpp"
#include "src/report/report_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "src/common/digest.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/report/provenance.hpp"
#include "src/report/text_format.hpp"
#include "src/cost/hardware_profile.hpp"

namespace moesim {
namespace {

using Getter = std::function<std::optional<double>(const BalanceMetrics&)>;

// How the headline aggregate of a step-structured run (report.hpp, metric_value) combines a batch
// metric over the records: counts add up, rates and ratios are averaged with each record's tokens as
// its weight.
enum class Combine { weighted_mean, sum };

struct BatchMetric {
  std::string name;
  Combine combine;
  Getter get;
};

// Per-batch metrics, in the order reports list them.
const std::vector<BatchMetric>& batch_metrics() {
  constexpr Combine mean = Combine::weighted_mean;
  constexpr Combine sum = Combine::sum;
  static const std::vector<BatchMetric> table = {
      {"imbalance", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.imbalance); }},
      {"max_vio", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.max_vio); }},
      {"demand_imbalance", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.demand_imbalance); }},
      {"cv", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.cv); }},
      {"entropy_norm", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.entropy_norm); }},
      {"active_experts", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.active_experts); }},
      {"dead_experts", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.dead_experts); }},
      {"capacity", mean, [](const BalanceMetrics& m) { return std::optional<double>(double(m.capacity)); }},
      {"dropped", sum, [](const BalanceMetrics& m) { return std::optional<double>(double(m.dropped)); }},
      {"drop_rate", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.drop_rate); }},
      {"tokens_unrouted", sum, [](const BalanceMetrics& m) { return std::optional<double>(double(m.tokens_unrouted)); }},
      {"padding_waste", sum, [](const BalanceMetrics& m) { return std::optional<double>(double(m.padding_waste)); }},
      {"top20_share", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.top20_share); }},
      {"bottom20_share", mean, [](const BalanceMetrics& m) { return std::optional<double>(m.bottom20_share); }},
      {"aux_loss", mean,
       [](const BalanceMetrics& m) { return m.has_logits ? std::optional<double>(m.aux_loss) : std::nullopt; }},
      {"aux_loss_switch", mean,
       [](const BalanceMetrics& m) { return m.has_logits ? std::optional<double>(m.aux_loss_switch) : std::nullopt; }},
      {"aux_loss_gshard", mean,
       [](const BalanceMetrics& m) { return m.has_logits ? std::optional<double>(m.aux_loss_gshard) : std::nullopt; }},
      {"z_loss", mean, [](const BalanceMetrics& m) { return m.has_logits ? std::optional<double>(m.z_loss) : std::nullopt; }},
  };
  return table;
}

// A run of more than one batch or record (a batch run's consecutive batches, a step run's records): its
// headline is an aggregate over them, not one batch.
bool headline_aggregates(const VariantResult& v) { return v.per_batch.size() > 1; }

std::vector<double> record_weights(const VariantResult& v, const std::vector<size_t>& which) {
  return headline_weights(v, which);
}

// The headline aggregate of one batch metric (report.hpp, metric_value "value"). Batch runs and step
// runs of one record: the last batch, unchanged. Step runs: over the records where the metric applies,
// the sum (counts) or the token-weighted mean (rates, ratios); empty where it applies to none.
std::optional<double> headline_value(const VariantResult& v, const BatchMetric& bm) {
  if (!headline_aggregates(v)) return bm.get(v.last());
  std::vector<size_t> which;
  std::vector<double> x;
  for (size_t i = 0; i < v.per_batch.size(); ++i) {
    if (const std::optional<double> value = bm.get(v.per_batch[i])) {
      which.push_back(i);
      x.push_back(*value);
    }
  }
  if (which.empty()) return std::nullopt;
  if (bm.combine == Combine::sum) return std::accumulate(x.begin(), x.end(), 0.0);
  const std::vector<double> w = record_weights(v, which);
  double num = 0, den = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    num += w[j] * x[j];
    den += w[j];
  }
  return num / den;
}

}  // namespace

nlohmann::json metrics_to_json(const BalanceMetrics& m) {
  nlohmann::json j;
  for (const BatchMetric& bm : batch_metrics()) {
    const auto v = bm.get(m);
    j[bm.name] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  }
  j["load"] = m.load;
  j["demand"] = m.demand;
  j["utilization"] = m.utilization;
  return j;
}

namespace {

// The headline metrics as JSON (metric_value "value" of every batch metric): a batch run's last batch
// as metrics_to_json writes it; over a step run's records, load and demand summed per expert and
// utilization the token-weighted mean per expert (the utilization of the summed loads when the records
// share top_k and each record's weight is the tokens it routed).
nlohmann::json headline_json(const VariantResult& v) {
  if (!headline_aggregates(v)) return metrics_to_json(v.last());
  nlohmann::json j;
  for (const BatchMetric& bm : batch_metrics()) {
    const auto x = headline_value(v, bm);
    j[bm.name] = x ? nlohmann::json(*x) : nlohmann::json(nullptr);
  }
  // Summed as the records were made (ExpertTotals), in record order: the same bits as a sum over them.
  const ExpertTotals& t = v.totals;
  const bool weighted = t.tokens > 0;
  const double total_w = weighted ? t.tokens : static_cast<double>(t.records);
  nlohmann::json load = t.load, demand = t.demand, utilization = nlohmann::json::array();
  for (size_t e = 0; e < t.load.size(); ++e)
    utilization.push_back((weighted ? t.utilization_by_tokens[e] : t.utilization_sum[e]) / total_w);
  j["load"] = load;
  j["demand"] = demand;
  j["utilization"] = utilization;
  return j;
}

}  // namespace

nlohmann::json cost_json(const CostBreakdown& c) {
  return {{"ideal_s", c.ideal_s}, {"quantized_s", c.quantized_s}};
}

namespace {

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

nlohmann::json erosion_json(const Erosion& x) {
  return {{"reference_s", x.reference_s},
          {"actual_s", x.actual_s},
          {"loads_s", x.loads_s},
          {"parts",
           {{"idle_saving_s", x.idle_saving_s},
            {"imbalance_s", x.imbalance_s},
            {"imbalance_tiles_s", x.imbalance_tiles_s},
            {"tile_phase_s", x.tile_phase_s},
            {"quantization_s", x.quantization_s},
            {"padding_s", x.padding_s},
            {"micro_batch_s", x.micro_batch_s},
            {"communication_s", x.communication_s},
            {"communication_imbalance_s", x.communication_imbalance_s}}},
          {"imbalance_cost_s", imbalance_cost_s(x)},
          {"imbalance_total_s", imbalance_total_s(x)},
          {"dropped_work_s", x.dropped_work_s},
          {"assignments_delivered", x.delivered},
          {"assignments_undelivered", x.undelivered},
          {"assignments_served", x.served},
          {"time_per_served_assignment_s", finite_or_null(x.time_per_served_s())}};
}

nlohmann::json all_to_all_json(const A2aCost& a, double exposed_s, double as_run_s) {
  const auto phase = [](const A2aPhase& p) {
    return nlohmann::json{{"time_s", p.time_s},       {"transfer_s", p.transfer_s},
                          {"busiest_device", p.busiest_device}, {"bytes_sent", p.bytes_sent},
                          {"bytes_received", p.bytes_received}, {"scale_up_s", p.scale_up_s},
                          {"scale_out_s", p.scale_out_s}};
  };
  return {{"kernel", to_string(a.kernel)},
          {"nodes", a.nodes},
          {"devices_per_node", a.devices_per_node},
          {"dispatch_s", a.dispatch.time_s},
          {"combine_s", a.combine.time_s},
          {"dispatch", phase(a.dispatch)},
          {"combine", phase(a.combine)},
          {"bytes", a.bytes},
          {"as_run_s", as_run_s},
          {"exposed_s", exposed_s}};
}

// The placement a cost ran on (report.hpp).
nlohmann::json plan_json(const ExpertPlacement& p, const std::vector<double>& device_load, double predicted,
                         double realised) {
  return {{"expert", p.expert},
          {"device", p.device},
          {"node", p.node},
          {"replicas", p.replicas},
          {"slot_load", p.plan_load},
          {"nodes", p.num_nodes},
          {"device_load", device_load},
          {"predicted_balancedness", predicted},
          {"realised_balancedness", realised},
          {"colocated_replicas", colocated_replicas(p)}};
}

namespace {

nlohmann::json rebalance_json(const RebalanceRun& r) {
  nlohmann::json epochs = nlohmann::json::array(), steps = nlohmann::json::array();
  for (const PlanEpoch& ep : r.epochs) {
    const std::vector<double> dl = device_plan_load(ep.placement);
    epochs.push_back({{"first_step", ep.first_step},
                      {"plan_load", ep.plan_load},
                      {"expert", ep.placement.expert},
                      {"device", ep.placement.device},
                      {"node", ep.placement.node},
                      {"replicas", ep.placement.replicas},
                      {"device_load", dl},
                      {"predicted_balancedness", balancedness_of(dl)},
                      {"colocated_replicas", colocated_replicas(ep.placement)}});
  }
  for (const RebalanceStep& st : r.steps) {
    steps.push_back({{"step", st.step},
                     {"epoch", st.epoch},
                     {"rebalanced", st.rebalanced},
                     {"predicted_balancedness", st.predicted_balancedness},
                     {"realised_balancedness", st.realised_balancedness},
                     {"rank_imbalance", st.rank_imbalance},
                     {"static_rank_imbalance", st.static_rank_imbalance},
                     {"layer_s", st.layer_s},
                     {"static_layer_s", st.static_layer_s}});
  }
  nlohmann::json j = {{"epochs", epochs}, {"steps", steps}};
  if (r.gain_steps > 0) {
    j["gain"] = {{"steps", r.gain_steps},
                 {"rank_imbalance", r.rank_imbalance},
                 {"static_rank_imbalance", r.static_rank_imbalance},
                 {"layer_s", r.layer_s},
                 {"static_layer_s", r.static_layer_s}};
  }
  return j;
}

nlohmann::json placement_json(const ModeledPlacement& p) {
  nlohmann::json j = {{"devices", p.devices},
                      {"time_s", p.cost.actual.quantized_s},
                      {"balanced_time_s", p.cost.balanced.quantized_s},
                      {"batching_efficiency", p.cost.batching_efficiency},
                      {"batching_efficiency_exact", p.cost.batching_efficiency_exact},
                      {"imbalance_cost", imbalance_cost_fraction(p.cost.erosion)},
                      {"idle_saving", idle_saving_fraction(p.cost.erosion)},
                      {"roofline_efficiency", p.cost.roofline_efficiency},
                      {"actual", cost_json(p.cost.actual)},
                      {"balanced", cost_json(p.cost.balanced)},
                      {"erosion", erosion_json(p.cost.erosion)},
                      {"erosion_exact", erosion_json(p.cost.erosion_exact)},
                      {"compute_bound_experts", p.cost.compute_bound_experts}};
  if (p.cost.tensor_parallel_reduce_s > 0) j["tensor_parallel_reduce_s"] = p.cost.tensor_parallel_reduce_s;
  if (p.placement == "expert_parallel") {
    j["plan_source"] = p.plan;
    j["device_time_s"] = p.cost.device_time_s;
    j["device_tokens"] = p.cost.device_tokens;
    j["rank_imbalance"] = p.cost.rank_imbalance;
    j["balancedness"] = p.cost.balancedness;
    j["all_to_all_s"] = p.cost.all_to_all_s;
    j["all_to_all"] = all_to_all_json(p.cost.a2a, p.cost.exposed_communication_s, p.cost.all_to_all_s);
    if (!p.cost.placement.expert.empty())
      j["plan"] = plan_json(p.cost.placement, p.cost.device_plan_load, p.cost.predicted_balancedness,
                            p.cost.balancedness);
  }
  return j;
}

}  // namespace

nlohmann::json modeled_json(const std::vector<ModeledPlacement>& placements) {
  nlohmann::json modeled;
  for (const ModeledPlacement& p : placements) modeled[p.placement] = placement_json(p);
  return modeled;
}

namespace report_detail {

std::vector<size_t> phase_indices(const VariantResult& v, const std::string& phase) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < v.records.size(); ++i)
    if (v.records[i].phase == phase) idx.push_back(i);
  return idx;
}

// Loads summed over every step of each layer, with their balance: comparable with per-layer counts
// recorded from real models over many tokens (docs/workloads.md, calibration).
std::vector<std::pair<int, BalanceMetrics>> per_layer_totals(const RunResult& run, const VariantResult& v) {
  std::vector<std::pair<int, BalanceMetrics>> out;
  for (const auto& [layer, l] : v.totals.layers)
    out.emplace_back(layer, metrics_from_loads(l.load, l.tokens, run.experiment.model.top_k));
  return out;
}

}  // namespace report_detail

using namespace report_detail;

namespace {

// ---- step-structured runs (decoder, trace, load profile) -----------------------------------------
nlohmann::json decoder_times_json(const DecoderTimes& t) {
  return {{"attention_s", t.attention_s}, {"router_s", t.router_s},   {"dispatch_s", t.dispatch_s},
          {"experts_s", t.experts_s},     {"combine_s", t.combine_s}, {"layer_s", t.layer_s}};
}

// Aggregates (mean, p50, p95, max) of every batch metric over the given entries of per_batch.
nlohmann::json aggregates_json(const VariantResult& v, const std::vector<size_t>& which) {
  nlohmann::json agg = nlohmann::json::object();
  for (const BatchMetric& bm : batch_metrics()) {
    std::vector<double> s;
    for (size_t i : which)
      if (auto x = bm.get(v.per_batch[i])) s.push_back(*x);
    if (s.empty()) continue;
    const Aggregate a = aggregate(s);
    agg[bm.name] = {{"mean", a.mean}, {"p50", a.p50}, {"p95", a.p95}, {"max", a.max}};
  }
  return agg;
}



void add_records_json(const VariantResult& v, nlohmann::json& r);
void add_phases_json(const RunResult& run, const VariantResult& v, nlohmann::json& r);

nlohmann::json per_layer_json(const RunResult& run, const VariantResult& v) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [layer, m] : per_layer_totals(run, v)) {
    out.push_back({{"layer", layer}, {"load", m.load}, {"imbalance", m.imbalance}, {"cv", m.cv}, {"entropy_norm", m.entropy_norm}});
  }
  return out;
}

void add_steps_json(const RunResult& run, const VariantResult& v, nlohmann::json& r) {
  r["num_records"] = v.records.size();
  // Every record with its full cost only when asked (`--records`): a trace of a token per step and layer
  // has as many records as lines, and their JSON was 20 times the trace's size (docs/json-schema.md).
  if (run.records_listed) add_records_json(v, r);
  add_phases_json(run, v, r);
}

void add_records_json(const VariantResult& v, nlohmann::json& r) {
  nlohmann::json records = nlohmann::json::array();
  for (size_t i = 0; i < v.records.size(); ++i)
    records.push_back(record_to_json(v.records[i], v.per_batch[i], i < v.decoder.size() ? &v.decoder[i] : nullptr));
  r["records"] = std::move(records);
}

void add_phases_json(const RunResult& run, const VariantResult& v, nlohmann::json& r) {
  nlohmann::json phases = nlohmann::json::object();
  for (const PhaseSummary& p : v.phases) {
    nlohmann::json ph = {{"steps", p.steps},
                         {"tokens", p.tokens},
                         {"tokens_unrouted", p.tokens_unrouted},
                         {"modeled_s", p.modeled_s},
                         {"modeled_attention_s", p.modeled_attention_s},
                         {"modeled_attention_wait_s", p.modeled_attention_wait_s},
                         {"attention_balance_ratio", p.attention_balance_ratio},
                         {"modeled_moe_s", p.modeled_moe_s},
                         {"moe_layers", moe_layer_count(run.experiment.model)},
                         {"erosion", erosion_json(p.erosion)},
                         {"modeled_tokens_per_s", p.modeled_tokens_per_s},
                         {"aggregates", aggregates_json(v, phase_indices(v, p.phase))}};
    if (run.has_decoder) ph["kv_cache_bytes"] = p.kv_cache_bytes;
    if (run.experiment.placement.kind == PlacementKind::expert_parallel) {
      ph["modeled_dispatch_s"] = p.modeled_dispatch_s;
      ph["modeled_combine_s"] = p.modeled_combine_s;
      ph["modeled_exposed_communication_s"] = p.modeled_exposed_s;
      ph["modeled_step_s"] = p.steps > 0 ? p.modeled_s / p.steps : 0.0;
    }
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
  if (!run.workload_digest.empty()) w["file_digest"] = run.workload_digest;
  if (e.workload.source == WorkloadSource::trace) w["replayed"] = run.trace_replayed;
  if (!run.profile_key.empty()) w["profile_key"] = run.profile_key;
  if (!run.profile_format.empty()) {
    w["profile_format"] = run.profile_format;
    w["profile_format_from"] = run.profile_format_forced ? "workload.format" : "content";
  }
  if (e.workload.source == WorkloadSource::load_distribution) {
    w["distribution"] = to_string(e.workload.distribution);
    if (e.workload.distribution == LoadDistribution::power_law) w["power_law_alpha"] = e.workload.power_law_alpha;
    w["draws"] = e.workload.batches;
  }
  if (!e.workload.expert_map.empty() && e.workload.source == WorkloadSource::load_profile)
    w["expert_map_slots"] = e.workload.expert_map.size();
  return w;
}

}  // namespace

nlohmann::json record_to_json(const StepRecord& s, const BalanceMetrics& m, const DecoderStepFigures* d) {
  nlohmann::json rec = {{"phase", s.phase},
                        {"step", s.step},
                        {"layer", s.layer},
                        {"num_tokens", s.num_tokens},
                        {"metrics", metrics_to_json(m)}};
  if (d) {
    rec["context_tokens"] = d->context_tokens;
    rec["kv_cache_bytes"] = d->kv_cache_bytes;
    rec["kv_cache_bytes_executed"] = d->kv_cache_bytes_executed;
    if (d->has_measured) rec["measured"] = decoder_times_json(d->measured);
  }
  nlohmann::json modeled;
  for (const ModeledPlacement& p : s.modeled) modeled[p.placement] = placement_json(p);
  nlohmann::json mj = {{"moe", modeled}, {"batching_efficiency", s.batching_efficiency}, {"layer_s", s.modeled_layer_s}};
  if (d) {
    mj["attention"] = cost_json(d->modeled_attention);
    mj["attention_balance_ratio"] = d->attention_balance_ratio;
    mj["attention_wait_s"] = d->attention_wait_s;
  }
  rec["modeled"] = mj;
  return rec;
}

nlohmann::json experiment_json(const Experiment& e, const std::string& file_read) {
  nlohmann::json config = experiment_to_json(e);
  // As `moesim config` prints it: the file that was read, absolute, so the tree runs from any folder.
  if (!file_read.empty())
    config["workload"]["path"] = std::filesystem::absolute(file_read).lexically_normal().string();
  return {{"name", e.name}, {"source", e.source_file}, {"config", config}};
}

nlohmann::json input_files_json(const Experiment& e, const std::string& file_read) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool has_file = !e.source_file.empty() && e.source_file.front() != '<';
  const fs::path base = has_file ? fs::absolute(fs::path(e.source_file).parent_path(), ec) : fs::current_path(ec);
  nlohmann::json out = nlohmann::json::array();
  auto add = [&](const char* key, const std::string& path) {
    const fs::path abs = fs::absolute(path, ec).lexically_normal();
    out.push_back({{"key", key}, {"path", abs.lexically_relative(base.lexically_normal()).generic_string()},
                   {"digest", file_digest(path)}});
  };
  if (!e.model.hf_config.empty()) add("model.hf_config", e.model.hf_config);
  if (!file_read.empty()) add("workload.path", file_read);
  if (const std::string lengths = prompt_len_file(e.workload); !lengths.empty()) add("workload.prompt_len", lengths);
  const std::string hw = hardware_profile_file(e.hardware, e.source_file);
  if (!hw.empty()) add("hardware", hw);
  return out;
}

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
    for (const BatchMetric& bm : batch_metrics()) n.push_back(bm.name);
    for (const char* extra : {"rank_imbalance", "batching_efficiency", "modeled_time_s", "critical_batch",
                              "measured_layer_s", "measured_batching_efficiency"})
      n.push_back(extra);
    return n;
  }();
  return names;
}

std::optional<double> metric_value(const RunResult& run, const VariantResult& v, const std::string& metric,
                                   const std::string& agg) {
  for (const BatchMetric& bm : batch_metrics()) {
    if (bm.name != metric) continue;
    if (agg == "value") return headline_value(v, bm);
    if (agg == "last") return bm.get(v.last());
    std::vector<double> series;
    for (const BalanceMetrics& m : v.per_batch)
      if (auto x = bm.get(m)) series.push_back(*x);
    if (series.empty()) return std::nullopt;
    const Aggregate a = aggregate(series);
    if (agg == "mean") return a.mean;
    if (agg == "p50") return a.p50;
    if (agg == "p95") return a.p95;
    if (agg == "max") return a.max;
    return std::nullopt;
  }
  // Run-level metrics have one value, and every aggregate of one value is that value; "last" of a step
  // run is the last record's own modeled cost.
  const ModeledPlacement* last_record = agg != "last"           ? nullptr
                                        : !v.records.empty()      ? primary_of(v.records.back().modeled)
                                        : !v.last_modeled.empty() ? primary_of(v.last_modeled)
                                                                  : nullptr;
  const ModeledPlacement& p = last_record ? *last_record : primary_placement(v);
  if (metric == "batching_efficiency") return p.cost.batching_efficiency;
  if (metric == "modeled_time_s") return p.cost.actual.quantized_s;
  if (metric == "rank_imbalance")
    return p.placement == "expert_parallel" ? std::optional<double>(p.cost.rank_imbalance) : std::nullopt;
  if (metric == "critical_batch") return critical_batch(run.hardware, expert_format(run.experiment.model));
  if (metric == "measured_layer_s") return v.executed ? std::optional<double>(v.measured.layer_s) : std::nullopt;
  if (metric == "measured_batching_efficiency")
    return v.executed && v.measured.layer_s > 0
               ? std::optional<double>(v.measured_balanced_layer_s / v.measured.layer_s)
               : std::nullopt;
  return std::nullopt;
}

std::vector<int> rank_variants(const RunResult& run) {
  const auto& vs = run.variants;
  const size_t n = vs.size();
  // Dropped assignments and unrouted tokens are not free: each strategy is charged its modeled time per
  // assignment it served of the N k it owed (a mean over a step run's records, as the time is).
  std::vector<double> served(n), imbalance(n);
  for (size_t i = 0; i < n; ++i) {
    served[i] = primary_placement(vs[i]).cost.erosion.time_per_served_s();
    imbalance[i] = metric_value(run, vs[i], "imbalance", "value").value_or(1.0);
  }
  // Equal within a relative 1e-12: a mean over records or a sum in another order moves the last bits
  // of equal numbers, and no display tells such numbers apart. Infinite (everything dropped) only
  // equals infinite.
  auto same = [](double a, double b) {
    return a == b ||
           (std::isfinite(a) && std::isfinite(b) && std::fabs(a - b) <= 1e-12 * std::max(std::fabs(a), std::fabs(b)));
  };
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return served[a] < served[b]; });
  // Tie classes of served time, each anchored on its fastest member (so that the classes do not chain).
  std::vector<size_t> time_class(n, 0);
  for (size_t r = 1, anchor = idx.empty() ? 0 : idx[0]; r < idx.size(); ++r) {
    const bool tied = same(served[anchor], served[idx[r]]);
    if (!tied) anchor = idx[r];
    time_class[idx[r]] = time_class[idx[r - 1]] + (tied ? 0 : 1);
  }
  // Within a class, lower imbalance first; equal time and equal imbalance share a rank (1, 1, 3).
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (time_class[a] != time_class[b]) return time_class[a] < time_class[b];
    return imbalance[a] < imbalance[b];
  });
  std::vector<int> rank(n);
  for (size_t r = 0, first = 0; r < idx.size(); ++r) {
    const bool tied = r > 0 && time_class[idx[r]] == time_class[idx[first]] && same(imbalance[idx[first]], imbalance[idx[r]]);
    if (!tied) first = r;
    rank[idx[r]] = static_cast<int>(first) + 1;
  }
  return rank;
}

nlohmann::json run_to_json(const RunResult& run) {
  const Experiment& e = run.experiment;
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["moesim_version"] = MOESIM_VERSION;
  j["provenance"] = provenance_json();
  j["experiment"] = experiment_json(e, run.workload_path);
  j["inputs"] = input_files_json(e, run.workload_path);
  j["model"] = {{"hidden", e.model.hidden}, {"ffn", e.model.ffn},       {"experts", e.model.experts},
                {"top_k", e.model.top_k},   {"shared_experts", e.model.shared_experts},
                {"layers", e.model.layers}, {"moe_layers", moe_layer_count(e.model)},
                {"dtype", to_string(e.model.dtype)}, {"weight_dtype", to_string(e.model.weight_dtype)},
                {"gated_experts", e.model.gated_experts}};
  j["workload"] = {{"source", to_string(e.workload.source)}, {"num_tokens", run.num_tokens},
                   {"batches", e.workload.batches}, {"seed", e.workload.seed}, {"skew", e.workload.skew}};
  nlohmann::json cb;
  for (Dtype d : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8}) {
    const double b = critical_batch(run.hardware, d);
    if (b > 0 && std::isfinite(b)) cb[to_string(d)] = b;
  }
  j["hardware"] = {{"name", run.hardware.name}, {"digest", hardware_digest(run.hardware)}, {"critical_batch", cb},
                   {"critical_batch_model_dtype", critical_batch(run.hardware, expert_format(e.model))}};
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
    // The headline values (metric_value "value"), with the run-level scalars beside the batch metrics
    // so that baselines and tools find every metric of the vocabulary under "metrics". A step run also
    // keeps its last record's own values (aggregate "last").
    auto scalars = [&](nlohmann::json metrics, const std::string& agg) {
      for (const std::string& name : scalar_metric_names()) {
        if (metrics.contains(name)) continue;
        const std::optional<double> value = metric_value(run, v, name, agg);
        if (value) metrics[name] = *value;
      }
      return metrics;
    };
    r["metrics"] = scalars(headline_json(v), "value");
    if (!v.records.empty() || v.per_batch.size() > 1)
      r["last_record_metrics"] = scalars(metrics_to_json(v.last()), "last");
    if (v.per_batch.size() > 1) {
      nlohmann::json agg, series;
      for (const BatchMetric& bm : batch_metrics()) {
        std::vector<double> s;
        for (const BalanceMetrics& m : v.per_batch)
          if (auto x = bm.get(m)) s.push_back(*x);
        if (s.empty()) continue;
        const Aggregate a = aggregate(s);
        agg[bm.name] = {{"mean", a.mean}, {"p50", a.p50}, {"p95", a.p95}, {"max", a.max}};
        if (bm.name == "imbalance") series["imbalance"] = s;
      }
      r["aggregates"] = agg;
      r["series"] = series;
    }
    if (!v.final_bias.empty()) r["expert_bias"] = v.final_bias;
    if (!v.bias_updates.empty()) {
      // Every update, per layer, in routing order: batch indexes per_batch (and records), so that the
      // bias can be followed to convergence (docs/json-schema.md).
      nlohmann::json updates = nlohmann::json::array();
      for (const BiasUpdate& u : v.bias_updates)
        updates.push_back({{"batch", u.batch}, {"step", u.step}, {"layer", u.layer}, {"bias", u.bias}});
      r["expert_bias_updates"] = updates;
    }
    r["modeled"] = modeled_json(v.modeled);
    if (v.has_rebalance) r["rebalance"] = rebalance_json(v.rebalance);
    if (v.executed) {
      // Medians under the original keys; *_min_s / *_max_s the fastest and slowest repeat; noisy and
      // noise_reason the noise flag (docs/design.md, "Measured spread and noise").
      const MeasuredTimes& m = v.measured;
      r["measured"] = {{"router_s", m.router_s},
                       {"dispatch_s", m.dispatch_s},
                       {"experts_s", m.experts_s},
                       {"combine_s", m.combine_s},
                       {"layer_s", m.layer_s},
                       {"balanced_layer_s", v.measured_balanced_layer_s},
                       {"router_min_s", m.router_min_s},
                       {"dispatch_min_s", m.dispatch_min_s},
                       {"experts_min_s", m.experts_min_s},
                       {"combine_min_s", m.combine_min_s},
                       {"layer_min_s", m.layer_min_s},
                       {"balanced_layer_min_s", v.measured_balanced_layer_min_s},
                       {"router_max_s", m.router_max_s},
                       {"dispatch_max_s", m.dispatch_max_s},
                       {"experts_max_s", m.experts_max_s},
                       {"combine_max_s", m.combine_max_s},
                       {"layer_max_s", m.layer_max_s},
                       {"balanced_layer_max_s", v.measured_balanced_layer_max_s},
                       {"repeats", m.repeats},
                       {"noisy", v.measured_noise.noisy},
                       {"noise_reason", v.measured_noise.reason},
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

}  // namespace moesim
