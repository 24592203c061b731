// Private to src/pipeline: the pieces run_experiment puts together, one file per concern
// (run_layer.cpp: the executed layer and synthetic/logits batches; run_steps.cpp: decoder, trace and
// load-profile runs and their records). Host only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "src/cost/rebalance.hpp"
#include "src/cost/roofline.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/workload/logits_batches.hpp"

namespace moesim::run_detail {

using Batch = LogitsBatch;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

RouteRequest request_for(const Experiment& e, const Batch& b, int batch_index);

// The modeled MoE layer on each placement; the expert-parallel one on the plan `plan` chose (read only when
// the placement plans from loads). overlap_compute_s: the attention of the layer, which two-batch overlap also
// hides the all-to-all under (the decoder's; 0 for runs that model no attention).
std::vector<ModeledPlacement> model_placements(const Experiment& e, const HardwareProfile& hw,
                                               const RouterConfig& router, const std::vector<int64_t>& load,
                                               int64_t capacity, int64_t num_tokens, int64_t undelivered,
                                               const PlanChoice& plan, double overlap_compute_s = 0.0);
// The same for a routed batch's metrics: its kept loads, capacity and undelivered assignments.
std::vector<ModeledPlacement> model_placements(const Experiment& e, const HardwareProfile& hw,
                                               const RouterConfig& router, const BalanceMetrics& m, int64_t num_tokens,
                                               const PlanChoice& plan, double overlap_compute_s = 0.0);

// The placement line's account of a plan: "contiguous: static, no EPLB" for a static policy, else the EPLB
// policy and describe(plan).
std::string describe_plan(const Experiment& e, const PlanChoice& plan);

// The loads of placement.plan_profile (plan_from profile), read once per run: one row per recorded layer and
// their sum; empty otherwise.
struct PlanProfile {
  std::vector<int> layers;
  std::vector<std::vector<double>> counts;  // [layers][experts]
  std::vector<double> total;                // [experts]
};
PlanProfile read_plan_profile(const Experiment& e);
// A fresh plan source for one MoE layer of a run: the profile's row of that layer number (else the sum over
// its layers) when it plans from a profile.
PlanSource plan_source(const Experiment& e, const PlanProfile& profile, int layer);

// A batch run's modeled cost: every routed batch of vr.per_batch modeled per placement (the expert-parallel
// one on its epoch's plan when placement.rebalance_every re-plans: src/cost/rebalance.hpp, vr.rebalance), then
// vr.modeled = their mean (PlacementMean; one batch: its own cost) and vr.last_modeled = the last batch's.
void model_batches(const Experiment& e, const HardwareProfile& hw, const RouterConfig& router, int64_t num_tokens,
                   const PlanSource& source, VariantResult& vr);

// Runs the executed layer `repeats` times after a warm-up on `backend`; returns the median, fastest and
// slowest time of each phase (CUDA: CUDA-event times, `dtype` the GEMM precision).
MeasuredTimes time_layer(const RouterConfig& router, const RouteRequest& req, const ExpertWeights& w,
                         const ExpertWeights* shared, const std::vector<float>& x, int repeats,
                         std::vector<float>& y, Routing* routing_out, ExecBackend backend, Dtype dtype);

// A variant's measured block: time_layer under its routing (measured, output_digest) and under balanced
// routing (measured_balanced_layer_*), then the noise flag of both (measured_noise.hpp; on CUDA the
// spread and repeat rules only). Sets executed.
void time_variant(const RouterConfig& router, const RouteRequest& req, const ExpertWeights& w,
                  const ExpertWeights* shared, const std::vector<float>& x, int repeats, ExecBackend backend,
                  Dtype dtype, VariantResult& vr);

// The --verify comparison of one executed layer: route_omp against route_ref, then the fast layer
// against the serial reference. Returns "ok" or the first mismatch.
std::string verify_layer(const RouterConfig& router, const RouteRequest& req, const ExpertWeights& w,
                         const ExpertWeights* shared, const std::vector<float>& x, int64_t hidden);

// ---- synthetic and logits batches ---------------------------------------------------------------
void run_batches(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                 RunResult& result);

int primary_devices(const Experiment& e);
// The GPUs of one attention rank: placement.attention_tp with kind expert_parallel, else 1.
int attention_tp_of(const Experiment& e);


// Sets a record's modeled MoE layer per placement and what the record keeps of it: the primary placement's
// batching efficiency, quantized MoE time and erosion, and the layer's time with rec.attention_s.
void set_record_cost(std::vector<ModeledPlacement> modeled, StepRecord& rec);

// The mean modeled MoE layer of a step run's records (decode records when there are any), one record at a
// time in record order, `count` of them in all: every time, erosion and per-device figure averaged;
// batching_efficiency from the mean erosion.
class PlacementMean {
 public:
  explicit PlacementMean(size_t count) : n_(static_cast<double>(count)), count_(count) {}
  void add(const std::vector<ModeledPlacement>& modeled);
  std::vector<ModeledPlacement> finish() const;

 private:
  struct Acc {
    ModeledPlacement mp;
    std::vector<double> device_tokens;
    CostBreakdown actual, balanced;  // sums, divided by the count in finish()
    double slowest_dispatch_s = -1;  // the record whose busiest device is reported
  };
  double n_;
  size_t count_;
  std::vector<Acc> acc_;
};

// One variant's records of a step run (decoder, trace, load profile), added in record order: each record's
// per-expert figures go to VariantResult::totals and its modeled placements to the mean over the decode
// records (every record when there are none); RunOptions::record_sink sees each whole. Unless
// RunOptions::records keeps them all, a record's modeled placements and per-expert vectors are freed when
// the next record comes, so that a run of many small batches holds a few hundred bytes a record whatever
// the expert count (issue 18).
class StepCollector {
 public:
  // num_records: the records to come; decode_records: how many of them are decode records; variant: the
  // variant's index (record_sink's).
  StepCollector(VariantResult& vr, size_t num_records, size_t decode_records, const RunOptions& opts, size_t variant);
  // d: the record's decoder figures (decoder runs; VariantResult::decoder's entry), else null.
  void add(StepRecord rec, BalanceMetrics m, const DecoderStepFigures* d = nullptr);
  // Phase totals and the mean placements. Each step's modeled time is the mean over its records' layers
  // times the model's layers (attention: model.layers; MoE: the model.moe_layers MoE layers); measured
  // time is the decoder's step wall time (step_wall_s, indexed by step; empty: none).
  void finish(const Experiment& e, const std::vector<double>& step_wall_s);

 private:
  VariantResult& vr_;
  bool decode_only_;
  const RunOptions& opts_;
  size_t variant_;
  PlacementMean mean_;
};

AttentionShape model_attention_shape(const Experiment& e);

// ---- decoder ----------------------------------------------------------------------------------------
void run_decoder(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                 RunResult& result);

// ---- trace replay -----------------------------------------------------------------------------------
// Without logits every variant replays the recorded decisions (replay_routing) under its capacity keys;
// variants that differ in router.gating then ask for re-routing: InputError naming "logits" and the file.
// A Megatron-LM router trace (megatron_loads.hpp, recognised by its first line) is streamed from the file a
// line (a batch) at a time and replayed the same way, with weights 1/topk; router.drop_policy score is refused.
void run_trace(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
               RunResult& result);

// ---- real load profiles -----------------------------------------------------------------------------
void run_load_profile(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                      RunResult& result);

// ---- peers' load distributions (workload.source load_distribution) ----------------------------------
// workload.batches draws of workload.batch tokens from workload.distribution (src/workload/load_distribution.hpp),
// each costed as one MoE layer and recorded as a step; nothing is routed or executed.
void run_load_distribution(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                           RunResult& result);

}  // namespace moesim::run_detail
