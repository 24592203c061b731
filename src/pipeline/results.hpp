// The results of a run, as the runner fills them and every report reads them: per router variant the
// routing metrics of each batch, step records and phase totals of step-structured workloads, the
// modeled cost per placement and the measured times and digests of the executed layer. Plain data,
// no behaviour, so that reports depend on results and not on the kernels that produced them. Host
// only. Filled by src/pipeline/run_experiment.cpp; read by src/report (tests/report/report_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/placement.hpp"
#include "src/cost/rebalance.hpp"
#include "src/cost/roofline.hpp"
#include "src/decoder/decoder_shape.hpp"
#include "router/balance_metrics.hpp"

namespace moesim {

// A router configuration to run, with the label that names it in reports.
struct RouterVariant {
  std::string label;     // e.g. "token_choice" or "token_choice capacity_factor=2"
  RouterConfig router;
};

// The experiment's own router as the only variant, labelled by its gating name.
inline std::vector<RouterVariant> own_variant(const Experiment& e) {
  return {RouterVariant{to_string(e.router.gating), e.router}};
}

// Wall-clock times over `execute.repeats` timed repeats after one warm-up, in seconds: the median of
// each phase, and the fastest and slowest repeat beside it (min <= median <= max).
struct MeasuredTimes {
  double router_s = 0, dispatch_s = 0, experts_s = 0, combine_s = 0, layer_s = 0;  // medians
  double router_min_s = 0, dispatch_min_s = 0, experts_min_s = 0, combine_min_s = 0, layer_min_s = 0;
  double router_max_s = 0, dispatch_max_s = 0, experts_max_s = 0, combine_max_s = 0, layer_max_s = 0;
  int repeats = 0;  // timed repeats behind each median
};

// Whether a variant's measured times are too noisy to compare (src/pipeline/measured_noise.hpp,
// docs/design.md "Measured spread and noise"); reason: every rule that fired, "; "-separated.
struct MeasuredNoise {
  bool noisy = false;
  std::string reason;  // "" when not noisy
};

struct ModeledPlacement {
  std::string placement;  // "single" or "expert_parallel"
  int devices = 1;
  LayerCost cost;
  // Expert parallel: where the plan came from, one line (describe_plan): "contiguous: static, no EPLB",
  // "EPLB global, planned from the loads of 8 warm-up batches", "... oracle: ...".
  std::string plan;
};

// One routed batch of a step-structured workload (decoder, trace, load profile): one layer of one step,
// as the phase totals, the headline and the tables read it. records[i] describes per_batch[i] (the routing
// metrics; load = tokens per expert). A run many records long holds a few hundred bytes for each: without
// RunOptions::records only the last record keeps its modeled placements and its metrics' per-expert
// vectors (the per-expert figures are summed in VariantResult::totals as the records are made).
struct StepRecord {
  std::string phase;               // "prefill" | "decode" (decoder, traces that say), "trace", "profile"
  int step = 0;                    // decoder: 0 = prefill, 1..decode_steps; trace: as recorded
  int layer = 0;                   // executed layer (decoder), recorded layer (trace, profile)
  int64_t num_tokens = 0;          // tokens routed in this batch
  double attention_s = 0;          // decoder: the layer's modeled attention (quantized); 0 without attention
  std::vector<ModeledPlacement> modeled;  // this batch's MoE layer, per placement (see above)
  double moe_quantized_s = 0;      // the primary placement's modeled MoE time (quantized), kept on every record
  Erosion moe_erosion;             // the primary placement's erosion, kept on every record
  double batching_efficiency = 1;  // of the primary placement (expert_parallel when used, else single)
  double modeled_layer_s = 0;      // modeled attention + MoE layer (primary placement, quantized)
  // The primary placement's all-to-all as run (dispatch, combine) and the part the layer waits for.
  double moe_dispatch_s = 0, moe_combine_s = 0, moe_exposed_s = 0;
};

// The decoder's own figures of one record (decoder runs: VariantResult::decoder[i] belongs to records[i]).
struct DecoderStepFigures {
  int64_t context_tokens = 0;      // tokens in the layer's KV cache after the step (all sequences)
  double kv_cache_bytes = 0;       // that layer's KV cache at the model's real size and dtype
  double kv_cache_bytes_executed = 0;  // the executed layer's cache in use (float32)
  bool has_measured = false;       // executed: measured holds this layer's wall times (one pass)
  DecoderTimes measured;
  CostBreakdown modeled_attention; // model's real size, per layer: the slowest data-parallel rank's (run_steps.cpp)
  // Expert parallel: the step's sequences over the devices' attention (src/step/attention_ranks.hpp): mean over
  // max KV tokens (prefill: query tokens) per rank, and what the slowest rank adds over the ranks' mean.
  double attention_balance_ratio = 1;
  double attention_wait_s = 0;
};

// A step run's per-expert figures summed over its records in record order, as the records are made: the
// headline's load, demand and token-weighted utilization, and each recorded layer's loads.
struct ExpertTotals {
  std::vector<int64_t> load, demand;          // [experts] summed over the records
  std::vector<double> utilization_by_tokens;  // [experts] sum of num_tokens x utilization
  std::vector<double> utilization_sum;        // [experts] plain sum (the weights when no record routed a token)
  double tokens = 0;                          // sum of num_tokens (as a double, in record order)
  size_t records = 0;
  struct Layer {
    std::vector<int64_t> load;  // [experts] summed over the layer's records
    int64_t tokens = 0;
  };
  std::map<int, Layer> layers;  // by recorded (or executed) layer
};

// Adds one record's metrics to the totals (in record order: the sums are then the same bits on any machine).
inline void add_to_totals(ExpertTotals& t, const StepRecord& rec, const BalanceMetrics& m) {
  const size_t E = m.load.size();
  t.load.resize(E, 0);
  t.demand.resize(E, 0);
  t.utilization_by_tokens.resize(E, 0.0);
  t.utilization_sum.resize(E, 0.0);
  const double w = static_cast<double>(rec.num_tokens);
  for (size_t e = 0; e < E; ++e) {
    t.load[e] += m.load[e];
    t.demand[e] += e < m.demand.size() ? m.demand[e] : 0;
    const double u = e < m.utilization.size() ? m.utilization[e] : 0.0;
    t.utilization_by_tokens[e] += w * u;
    t.utilization_sum[e] += u;
  }
  t.tokens += w;
  ++t.records;
  ExpertTotals::Layer& l = t.layers[rec.layer];
  l.load.resize(E, 0);
  for (size_t e = 0; e < E; ++e) l.load[e] += m.load[e];
  l.tokens += rec.num_tokens;
}

// Totals of one phase of a step-structured run.
struct PhaseSummary {
  std::string phase;
  int steps = 0;                   // distinct steps
  int64_t tokens = 0;              // tokens processed (summed over steps, counted once per step)
  int64_t tokens_unrouted = 0;     // summed over steps and layers
  double measured_s = 0;           // decoder, executed: wall time of the steps (execute.layers layers)
  double measured_tokens_per_s = 0;
  double modeled_s = 0;            // the whole model at its real size: attention of model.layers layers, MoE of
                                   // the model.moe_layers MoE layers
  double modeled_tokens_per_s = 0;
  double modeled_attention_s = 0;  // its attention part
  double modeled_attention_wait_s = 0;  // of it, what the slowest data-parallel rank adds over the ranks' mean
  double attention_balance_ratio = 1;   // the records' mean of DecoderStepFigures::attention_balance_ratio
  double modeled_moe_s = 0;        // its MoE part (model.moe_layers layers)
  // The MoE part's all-to-all, summed like it: dispatch and combine as run, and what the layers wait for
  // (modeled_moe_s = experts + exposed + the tensor-parallel all-reduce).
  double modeled_dispatch_s = 0, modeled_combine_s = 0, modeled_exposed_s = 0;
  Erosion erosion;                 // where modeled_moe_s goes (primary placement), summed like it
  double kv_cache_bytes = 0;       // decoder: whole model's KV cache (model.layers) at the phase's end
};

// aux_free_bias: one layer's expert bias right after one update (one routed batch).
struct BiasUpdate {
  int64_t batch = 0;               // the entry of per_batch (and records) whose routing made the update
  int step = 0;                    // step-structured runs: the record's step; batch runs: the batch index
  int layer = 0;                   // the layer whose router state it is (batch runs: 0)
  std::vector<float> bias;         // [num_experts]
};

struct VariantResult {
  RouterVariant variant;
  // One entry per routed batch (decoder: per step and layer), in order. Step runs without
  // RunOptions::records: every entry but the last has empty load, demand and utilization (see totals).
  std::vector<BalanceMetrics> per_batch;
  std::vector<StepRecord> records;        // decoder, trace, load_profile: one per entry of per_batch
  std::vector<DecoderStepFigures> decoder;  // decoder: one per record
  ExpertTotals totals;                    // step runs: every record's per-expert figures, summed
  std::vector<PhaseSummary> phases;       // decoder: prefill, decode; trace: per recorded phase; profile
  std::vector<float> final_bias;          // aux_free_bias: the bias after the last batch (last layer)
  std::vector<BiasUpdate> bias_updates;   // aux_free_bias: the bias after every update, in routing order
  // The headline modeled cost per placement (docs/design.md "One number per metric"): a batch run's mean
  // over its batches (a single batch: that batch's), a step run's mean over the decode records (all records
  // when there is no decode phase), so that variants rank on typical batches and steps. The expert-parallel
  // entry of a mean carries the last batch's plan (placement, device_plan_load, predicted_balancedness).
  std::vector<ModeledPlacement> modeled;
  // Batch runs: the last batch's own cost per placement (aggregate "last"; one batch: modeled).
  std::vector<ModeledPlacement> last_modeled;
  bool executed = false;
  MeasuredTimes measured;
  // Measured balanced counterfactual: the same executed layer with `balanced` routing (median, and the
  // fastest and slowest repeat).
  double measured_balanced_layer_s = 0;
  double measured_balanced_layer_min_s = 0, measured_balanced_layer_max_s = 0;
  // The noise flag of measured and the balanced counterfactual together: when up, measured batching
  // efficiency is shown as "-" in tables (JSON keeps the number beside the flag).
  MeasuredNoise measured_noise;
  // common/digest.hpp digests. output_digest: the executed layer's output under this variant's routing
  // (the same at any thread count for one BLAS kernel; CPU and CUDA equal on exact inputs). decoder:
  // final_hidden_digest of the decoder's last hidden states, the same on every machine.
  std::string output_digest;
  std::string final_hidden_digest;
  std::string verify_message;             // --verify: "ok" or the first mismatch
  // placement.rebalance_every > 0 (synthetic and logits workloads): every batch modeled on its epoch's
  // plan at the model's size; modeled's expert_parallel entry is then the mean of those costs.
  bool has_rebalance = false;
  RebalanceRun rebalance;
  const BalanceMetrics& last() const { return per_batch.back(); }
};

// The weight of each entry `which` of v.per_batch in a headline mean (docs/design.md "One number per metric"):
// a record's num_tokens; every entry weighs 1 when those records routed no token at all, and in a batch run
// (its batches are of one size). One formula for the reports (src/report metric_value) and the sweep rows.
inline std::vector<double> headline_weights(const VariantResult& v, const std::vector<size_t>& which) {
  if (v.records.empty()) return std::vector<double>(which.size(), 1.0);
  double total = 0;
  for (size_t i : which) total += static_cast<double>(v.records[i].num_tokens);
  std::vector<double> w;
  for (size_t i : which) w.push_back(total > 0 ? static_cast<double>(v.records[i].num_tokens) : 1.0);
  return w;
}

// The headline mean of one rate of every entry of v.per_batch under headline_weights (imbalance, drop_rate:
// the sweep rows' columns; the reports' headline of every rate, src/report/report.cpp).
inline double headline_mean(const VariantResult& v, double BalanceMetrics::*rate) {
  std::vector<size_t> all(v.per_batch.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::vector<double> w = headline_weights(v, all);
  double num = 0, den = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    num += w[i] * (v.per_batch[i].*rate);
    den += w[i];
  }
  return den > 0 ? num / den : 0.0;
}

// The variant's modeled placement of that name ("single", "expert_parallel"); null when not modeled.
inline const ModeledPlacement* find_placement(const VariantResult& v, const std::string& name) {
  for (const ModeledPlacement& p : v.modeled)
    if (p.placement == name) return &p;
  return nullptr;
}

// The placement whose cost ranks the variants and heads the reports, of a variant or of one record:
// expert_parallel when the experiment uses it, else single (the first); null when nothing is modeled.
inline const ModeledPlacement* primary_of(const std::vector<ModeledPlacement>& modeled) {
  for (const ModeledPlacement& p : modeled)
    if (p.placement == "expert_parallel") return &p;
  return modeled.empty() ? nullptr : &modeled.front();
}
inline const ModeledPlacement& primary_placement(const std::vector<ModeledPlacement>& modeled) {
  return *primary_of(modeled);
}
inline const ModeledPlacement& primary_placement(const VariantResult& v) { return primary_placement(v.modeled); }

// Where the executed layer runs (--backend, resolved by the CLI: auto -> cuda when a device is usable).
enum class ExecBackend { cpu, cuda };

struct RunResult {
  Experiment experiment;
  HardwareProfile hardware;
  int64_t num_tokens = 0;     // tokens per routed batch (decoder: per decode step, or the prefill without one)
  std::vector<VariantResult> variants;
  // decoder: the executed shape and the per-sequence prompt lengths and topics.
  bool has_decoder = false;
  DecoderShape decoder_shape;
  std::vector<int> prompt_len;
  std::vector<int> topic;
  double kv_cache_allocated_bytes = 0;  // executed, preallocated
  // trace: whether the recorded decisions were replayed (no logits) or re-routed.
  bool trace_replayed = false;
  std::string workload_path;            // trace / load_profile / logits: the file read
  std::string workload_digest;          // its bytes' digest (common/digest.hpp file_digest)
  std::string profile_key;              // load_profile: the profile used
  std::string profile_format;           // load_profile: the format read (workload.format's spelling)
  bool profile_format_forced = false;   // load_profile: named by workload.format, not recognised by content
  ExecBackend backend = ExecBackend::cpu;  // where the executed layer ran
  std::string device;                      // cuda: the device's description (cuda_device_description)
  // Step runs: whether the reports list every record (RunOptions::records, `--records`); the records'
  // aggregates, phases and headline are reported either way.
  bool records_listed = true;
  // compare --vary of keys outside router.*: the rows come from several experiments (each row's modeled
  // placement carries its own devices and plan; `experiment` is the first's).
  bool varied = false;
};

}  // namespace moesim
