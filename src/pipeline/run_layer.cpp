// The executed layer of a run and the synthetic and logits workloads: route requests per batch, the
// modeled cost per placement, timing the executed layer (router, dispatch, experts, combine; CPU or
// CUDA) with its spread and noise flag, and --verify against the serial references (see
// run_internal.hpp). Host only. Covered by tests/cli/cli_test.cpp and tests/pipeline.
#include "src/pipeline/run_internal.hpp"


#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>

#include "src/common/clock.hpp"
#include "src/common/digest.hpp"
#include "src/common/error.hpp"
#include "src/common/median.hpp"
#include "src/cost/placement.hpp"
#include "src/cost/roofline.hpp"
#include "src/decoder/decoder.hpp"
#include "src/decoder/kv_cache.hpp"
#include "src/pipeline/measured_noise.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/logits_batches.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/synthetic_logits.hpp"
#include "src/workload/trace_replay.hpp"
#if defined(MOESIM_HAS_CUDA)
#include "kernels/cuda_backend.hpp"
#endif


namespace moesim::run_detail {

RouteRequest request_for(const Experiment& e, const Batch& b, int batch_index) {
  RouteRequest req;
  req.logits = b.logits.data();
  req.num_tokens = b.num_tokens;
  req.num_experts = e.model.experts;
  req.top_k = e.model.top_k;
  req.token_ids = b.token_ids.data();
  req.sequence_length = 0;
  req.seed = e.workload.seed + static_cast<uint64_t>(batch_index);
  return req;
}

std::string describe_plan(const Experiment& e, const PlanChoice& plan) {
  const PlacementPolicy policy = effective_policy(e.placement);
  if (!plans_from_loads(e.placement)) {
    return policy == PlacementPolicy::contiguous ? "contiguous: static, no EPLB"
                                                 : std::string(to_string(policy)) + ": static, no EPLB";
  }
  return std::string("EPLB ") + to_string(policy) + ", " + describe(plan);
}

PlanProfile read_plan_profile(const Experiment& e) {
  PlanProfile out;
  if (e.placement.kind != PlacementKind::expert_parallel || e.placement.plan_from != PlanFrom::profile) return out;
  namespace fs = std::filesystem;
  // FILE or FILE#KEY (a key inside a moesim load-profile JSON of several profiles).
  std::string path = e.placement.plan_profile, key;
  const size_t hash = path.rfind('#');
  if (hash != std::string::npos) {
    key = path.substr(hash + 1);
    path.resize(hash);
  }
  std::error_code ec;
  if (!fs::path(path).is_absolute() && !fs::exists(path, ec) && !e.source_file.empty() && e.source_file.front() != '<') {
    const fs::path beside = fs::path(e.source_file).parent_path() / path;
    if (fs::exists(beside, ec)) path = beside.lexically_normal().string();
  }
  const LoadProfile p = read_load_profile_file(path, LoadFormat::detect, key, e.model.experts, {}, 0);
  out.layers = p.layers;
  out.total.assign(e.model.experts, 0.0);
  for (const std::vector<int64_t>& row : p.counts) {
    out.counts.emplace_back(row.begin(), row.end());
    for (int x = 0; x < e.model.experts; ++x) out.total[x] += static_cast<double>(row[x]);
  }
  return out;
}

PlanSource plan_source(const Experiment& e, const PlanProfile& profile, int layer) {
  if (profile.total.empty()) {
    // No profile was read (one device: no plan at all): a source that plans from past loads, never asked.
    PlacementConfig past = e.placement;
    if (past.plan_from == PlanFrom::profile) past.plan_from = PlanFrom::past;
    return PlanSource(past, e.model.experts);
  }
  for (size_t i = 0; i < profile.layers.size(); ++i)
    if (profile.layers[i] == layer) return PlanSource(e.placement, e.model.experts, profile.counts[i]);
  return PlanSource(e.placement, e.model.experts, profile.total);
}

std::vector<ModeledPlacement> model_placements(const Experiment& e, const HardwareProfile& hw,
                                               const RouterConfig& router, const std::vector<int64_t>& load,
                                               int64_t capacity, int64_t num_tokens, int64_t undelivered,
                                               const PlanChoice& plan, double overlap_compute_s) {
  LayerCostInput in = layer_cost_input(e, router, CostedSize::model, num_tokens, load, capacity);
  in.undelivered = undelivered;
  in.overlap_compute_s = overlap_compute_s;
  std::vector<ModeledPlacement> out;
  // One device: a group of placement.tensor_parallel GPUs sharing every expert's ffn (model_moe_layer).
  const int node_limit = in.node_limit;  // the expert-parallel placement's (layer_cost_input)
  in.placement = PlacementConfig{};
  in.placement.tensor_parallel = e.placement.tensor_parallel;
  in.node_limit = 0;
  out.push_back({"single", 1, model_moe_layer(hw, in), ""});
  if (e.placement.kind == PlacementKind::expert_parallel) {
    in.placement = resolve_placement(e.placement, router);
    in.node_limit = node_limit;
    if (plans_from_loads(e.placement)) in.placement_load = plan.load;
    out.push_back({"expert_parallel", e.placement.devices, model_moe_layer(hw, in), describe_plan(e, plan)});
  }
  return out;
}

std::vector<ModeledPlacement> model_placements(const Experiment& e, const HardwareProfile& hw,
                                               const RouterConfig& router, const BalanceMetrics& m, int64_t num_tokens,
                                               const PlanChoice& plan, double overlap_compute_s) {
  return model_placements(e, hw, router, m.load, m.capacity, num_tokens,
                          undelivered_assignments(m.dropped, m.tokens_unrouted, e.model.top_k), plan,
                          overlap_compute_s);
}

void model_batches(const Experiment& e, const HardwareProfile& hw, const RouterConfig& router, int64_t num_tokens,
                   const PlanSource& source, VariantResult& vr) {
  const size_t n = vr.per_batch.size();
  if (n == 0) return;
  if (e.placement.kind == PlacementKind::expert_parallel && e.placement.rebalance_every > 0) {
    std::vector<LayerCostInput> steps;
    for (const BalanceMetrics& m : vr.per_batch) {
      LayerCostInput in = layer_cost_input(e, router, CostedSize::model, num_tokens, m.load, m.capacity);
      in.undelivered = undelivered_assignments(m.dropped, m.tokens_unrouted, e.model.top_k);
      in.placement = resolve_placement(e.placement, router);
      steps.push_back(std::move(in));
    }
    vr.rebalance = model_rebalancing(hw, steps, source);
    vr.has_rebalance = true;
  }
  PlanSource plans = source;
  PlacementMean mean(n);
  std::vector<ModeledPlacement> batch;
  for (size_t b = 0; b < n; ++b) {
    const PlanChoice& plan = plans.next(vr.per_batch[b].load);
    batch = model_placements(e, hw, router, vr.per_batch[b], num_tokens, plan);
    if (vr.has_rebalance)
      for (ModeledPlacement& p : batch)
        if (p.placement == "expert_parallel") p.cost = vr.rebalance.step_costs[b];
    if (n > 1) mean.add(batch);
  }
  if (n == 1) {
    vr.modeled = batch;
    vr.last_modeled = std::move(batch);
    return;
  }
  vr.modeled = mean.finish();
  // The plan a mean ran on need not be one batch's (re-plans, the oracle): the last batch's is shown.
  for (size_t p = 0; p < vr.modeled.size() && p < batch.size(); ++p) {
    vr.modeled[p].plan = batch[p].plan;
    LayerCost& c = vr.modeled[p].cost;
    c.placement = batch[p].cost.placement;
    c.device_plan_load = batch[p].cost.device_plan_load;
    c.predicted_balancedness = batch[p].cost.predicted_balancedness;
  }
  vr.last_modeled = std::move(batch);
}

// First difference between two routings, or "" when identical (weights within 1e-5 relative:
// the Thrust path and the serial reference may round the softmax differently).
namespace {

std::string first_routing_mismatch(const Routing& a, const Routing& b) {
  std::ostringstream os;
  if (a.num_assignments() != b.num_assignments() || a.capacity != b.capacity) {
    os << "assignments " << a.num_assignments() << " vs reference " << b.num_assignments() << ", capacity "
       << a.capacity << " vs " << b.capacity;
    return os.str();
  }
  for (int64_t i = 0; i < a.num_assignments(); ++i) {
    if (a.token[i] != b.token[i] || a.expert[i] != b.expert[i] || a.kept[i] != b.kept[i] ||
        std::fabs(a.weight[i] - b.weight[i]) > 1e-5f * (1.0f + std::fabs(b.weight[i]))) {
      os << "assignment " << i << ": (token " << a.token[i] << ", expert " << a.expert[i] << ", weight "
         << a.weight[i] << ", kept " << int(a.kept[i]) << ") vs reference (token " << b.token[i] << ", expert "
         << b.expert[i] << ", weight " << b.weight[i] << ", kept " << int(b.kept[i]) << ")";
      return os.str();
    }
  }
  return "";
}

// Each phase's time per timed repeat, in seconds.
struct PhaseSamples {
  std::vector<double> router, dispatch, experts, combine, layer;
};

double lowest(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }
double highest(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

MeasuredTimes summarize(const PhaseSamples& s) {
  MeasuredTimes t;
  t.router_s = median(s.router);
  t.dispatch_s = median(s.dispatch);
  t.experts_s = median(s.experts);
  t.combine_s = median(s.combine);
  t.layer_s = median(s.layer);
  t.router_min_s = lowest(s.router);
  t.dispatch_min_s = lowest(s.dispatch);
  t.experts_min_s = lowest(s.experts);
  t.combine_min_s = lowest(s.combine);
  t.layer_min_s = lowest(s.layer);
  t.router_max_s = highest(s.router);
  t.dispatch_max_s = highest(s.dispatch);
  t.experts_max_s = highest(s.experts);
  t.combine_max_s = highest(s.combine);
  t.layer_max_s = highest(s.layer);
  t.repeats = static_cast<int>(s.layer.size());
  return t;
}

}  // namespace

// Runs the executed layer `repeats` times after a warm-up on `backend`; returns the median, fastest and
// slowest time of each phase (CUDA: CUDA-event times, `dtype` the GEMM precision).
MeasuredTimes time_layer(const RouterConfig& router, const RouteRequest& req, const ExpertWeights& w,
                         const ExpertWeights* shared, const std::vector<float>& x, int repeats,
                         std::vector<float>& y, Routing* routing_out, ExecBackend backend, Dtype dtype) {
  PhaseSamples samples;
#if defined(MOESIM_HAS_CUDA)
  if (backend == ExecBackend::cuda) {
    std::vector<CudaLayerTimes> per_repeat;
    time_layer_cuda(router, req, w, shared, dtype, x.data(), y.data(), repeats, routing_out, &per_repeat);
    for (const CudaLayerTimes& t : per_repeat) {
      samples.router.push_back(t.router_s);
      samples.dispatch.push_back(t.dispatch_s);
      samples.experts.push_back(t.experts_s);
      samples.combine.push_back(t.combine_s);
      samples.layer.push_back(t.layer_s);
    }
    return summarize(samples);
  }
#endif
  (void)backend;
  (void)dtype;
  for (int rep = -1; rep < repeats; ++rep) {
    RouterState state;  // a fresh state per repeat: timing must not evolve the bias
    const auto t0 = Clock::now();
    Routing r = route_omp(router, req, &state);
    const double router_s = seconds_since(t0);
    const auto t1 = Clock::now();
    DispatchPlan plan = plan_dispatch_omp(r, router.layout, router.block_size);
    const double plan_s = seconds_since(t1);
    MoePhaseTimes phases;
    moe_forward_omp(w, shared, x.data(), r, plan, y.data(), &phases);
    const double layer_s = seconds_since(t0);
    if (rep >= 0) {
      samples.router.push_back(router_s);
      samples.dispatch.push_back(plan_s + phases.dispatch_s);
      samples.experts.push_back(phases.experts_s);
      samples.combine.push_back(phases.combine_s);
      samples.layer.push_back(layer_s);
    }
    if (routing_out) *routing_out = std::move(r);
  }
  return summarize(samples);
}

void time_variant(const RouterConfig& router, const RouteRequest& req, const ExpertWeights& w,
                  const ExpertWeights* shared, const std::vector<float>& x, int repeats, ExecBackend backend,
                  Dtype dtype, VariantResult& vr) {
  std::vector<float> y(x.size(), 0.0f);
  vr.measured = time_layer(router, req, w, shared, x, repeats, y, nullptr, backend, dtype);
  vr.output_digest = float_digest(y.data(), y.size());
  RouterConfig balanced = router;
  balanced.gating = Gating::balanced;
  const MeasuredTimes b = time_layer(balanced, req, w, shared, x, repeats, y, nullptr, backend, dtype);
  vr.measured_balanced_layer_s = b.layer_s;
  vr.measured_balanced_layer_min_s = b.layer_min_s;
  vr.measured_balanced_layer_max_s = b.layer_max_s;
  vr.executed = true;

  NoiseInputs in;
  in.repeats = vr.measured.repeats;
  in.actual = {vr.measured.layer_min_s, vr.measured.layer_s, vr.measured.layer_max_s};
  in.balanced = {b.layer_min_s, b.layer_s, b.layer_max_s};
  // CUDA events time the device, which the host's load does not slow: only the spread and repeat rules.
  if (backend == ExecBackend::cpu) {
    in.threads = host_threads();
    in.cores = host_load_at_start().cores;
    in.load_average = host_load_at_start().load_average;
  }
  vr.measured_noise = judge_measured_noise(in);
}

// The --verify comparison of one executed layer: route_omp against route_ref, then the fast layer
// against the serial reference. Returns "ok" or the first mismatch.
std::string verify_layer(const RouterConfig& router, const RouteRequest& req, const ExpertWeights& w,
                         const ExpertWeights* shared, const std::vector<float>& x, int64_t hidden) {
  RouterState s1, s2;
  Routing fast = route_omp(router, req, &s1);
  Routing ref = route_ref(router, req, &s2);
  std::string mismatch = first_routing_mismatch(fast, ref);
  if (mismatch.empty()) {
    std::vector<float> y(x.size(), 0.0f), y_ref(x.size(), 0.0f);
    const DispatchPlan plan = plan_dispatch_omp(fast, router.layout, router.block_size);
    moe_forward_omp(w, shared, x.data(), fast, plan, y.data(), nullptr);
    moe_forward_ref(w, shared, x.data(), ref, y_ref.data());
    // float32 BLAS against the double-accumulating reference: 1e-3 relative plus 1e-4 absolute.
    for (size_t i = 0; i < y.size() && mismatch.empty(); ++i) {
      if (std::fabs(y[i] - y_ref[i]) > 1e-4f + 1e-3f * std::fabs(y_ref[i])) {
        std::ostringstream os;
        os << "layer output [token " << i / hidden << ", column " << i % hidden << "]: " << y[i] << " vs reference "
           << y_ref[i];
        mismatch = os.str();
      }
    }
  }
  return mismatch.empty() ? "ok" : mismatch;
}

// ---- synthetic and logits batches ---------------------------------------------------------------
void run_batches(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                 RunResult& result) {
  const std::vector<Batch> batches =
      make_logits_batches(e, e.workload.source == WorkloadSource::logits ? resolve_workload_path(e) : "");
  result.num_tokens = batches.empty() ? 0 : batches.front().num_tokens;
  const bool execute = opts.execute && e.execute.enabled;

  // The executed layer's weights and input are shared by every variant.
  ExpertWeights weights, shared;
  std::vector<float> x;
  if (execute) {
    weights = make_expert_weights(e.model.experts, e.execute.hidden, e.execute.ffn, e.workload.seed);
    if (e.model.shared_experts > 0)
      shared = make_expert_weights(e.model.shared_experts, e.execute.hidden, e.execute.ffn, e.workload.seed + 17);
    x = synthetic_hidden(result.num_tokens, e.execute.hidden, e.workload.seed);
  }
  const ExpertWeights* shared_ptr = e.model.shared_experts > 0 ? &shared : nullptr;

  // The losses' pass over each batch's logits, taken once for every variant.
  std::vector<LogitStats> stats(batches.size());
  // plan_from past: the synthetic workload's warm-up batches, routed by each variant before its measured ones
  // (with a router state of their own); a logits file has none.
  const bool plans = e.placement.kind == PlacementKind::expert_parallel && plans_from_loads(e.placement) &&
                     e.placement.plan_from == PlanFrom::past;
  const std::vector<Batch> warmup = plans && e.workload.source == WorkloadSource::synthetic
                                        ? make_warmup_batches(e, e.placement.warmup_batches)
                                        : std::vector<Batch>{};
  const PlanProfile profile = read_plan_profile(e);
  for (const RouterVariant& v : variants) {
    VariantResult vr;
    vr.variant = v;
    PlanSource source = plan_source(e, profile, 0);
    {
      RouterState warm;
      for (size_t b = 0; b < warmup.size(); ++b) {
        const Routing r = route_omp(v.router, request_for(e, warmup[b], -1 - static_cast<int>(b)), &warm);
        std::vector<int64_t> load(e.model.experts, 0);
        for (int64_t i = 0; i < r.num_assignments(); ++i)
          if (r.kept[i]) ++load[r.expert[i]];
        source.warm_up(load);
      }
    }
    RouterState state;
    for (size_t b = 0; b < batches.size(); ++b) {
      const RouteRequest req = request_for(e, batches[b], static_cast<int>(b));
      const Routing r = route_omp(v.router, req, &state);
      if (opts.routing_sink && &v == &variants.front()) {
        const bool has_ids = static_cast<int64_t>(batches[b].token_ids.size()) == batches[b].num_tokens;
        opts.routing_sink(RoutedBatch{static_cast<int64_t>(b), 0, "", &r, batches[b].logits.data(),
                                      has_ids ? batches[b].token_ids.data() : nullptr});
      }
      if (stats[b].prob_sum.empty() && batches[b].num_tokens > 0)
        stats[b] = logit_stats(batches[b].logits.data(), batches[b].num_tokens, e.model.experts);
      vr.per_batch.push_back(compute_balance_metrics(r, stats[b], v.router.layout, v.router.block_size));
      if (!state.expert_bias.empty())
        vr.bias_updates.push_back({static_cast<int64_t>(b), static_cast<int>(b), 0, state.expert_bias});
    }
    vr.final_bias = state.expert_bias;
    model_batches(e, result.hardware, v.router, result.num_tokens, source, vr);
    // The headline's per-expert sums (load, demand, utilization), as a step run keeps them.
    if (vr.per_batch.size() > 1) {
      for (const BalanceMetrics& m : vr.per_batch) {
        StepRecord rec;
        rec.num_tokens = result.num_tokens;
        add_to_totals(vr.totals, rec, m);
      }
    }

    if (execute && !batches.empty()) {
      // The executed layer replays the last batch with a fresh router state (time_layer).
      const Batch& last = batches.back();
      const RouteRequest req = request_for(e, last, static_cast<int>(batches.size() - 1));
      time_variant(v.router, req, weights, shared_ptr, x, e.execute.repeats, opts.backend, e.execute.dtype, vr);
      if (opts.verify) vr.verify_message = verify_layer(v.router, req, weights, shared_ptr, x, e.execute.hidden);
    }
    result.variants.push_back(std::move(vr));
    if (opts.progress) opts.progress(result.variants.size(), variants.size());
  }
}

}  // namespace moesim::run_detail
