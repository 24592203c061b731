// Runs one experiment for a list of router variants (see run_experiment.hpp).
#include "src/pipeline/run_experiment.hpp"

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

namespace moesim {
namespace {


using Batch = LogitsBatch;

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

std::vector<ModeledPlacement> model_placements(const Experiment& e, const HardwareProfile& hw,
                                               const RouterConfig& router, const std::vector<int64_t>& load,
                                               int64_t capacity, int64_t num_tokens) {
  LayerCostInput in;
  in.hidden = e.model.hidden;
  in.ffn = e.model.ffn;
  in.num_experts = e.model.experts;
  in.top_k = e.model.top_k;
  in.shared_experts = e.model.shared_experts;
  in.dtype = e.model.dtype;
  in.num_tokens = num_tokens;
  in.load = load;
  in.layout = router.layout;
  in.capacity = capacity;
  in.block_size = router.block_size;
  std::vector<ModeledPlacement> out;
  in.placement = PlacementConfig{};
  out.push_back({"single", 1, model_moe_layer(hw, in)});
  if (e.placement.kind == PlacementKind::expert_parallel) {
    in.placement = e.placement;
    out.push_back({"expert_parallel", e.placement.devices, model_moe_layer(hw, in)});
  }
  return out;
}

// First difference between two routings, or "" when identical (weights within 1e-5 relative:
// the Thrust path and the serial reference may round the softmax differently).
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

// Runs the executed layer `repeats` times after a warm-up on `backend`; returns the median phase
// times (CUDA: CUDA-event times, `dtype` the GEMM precision).
MeasuredTimes time_layer(const RouterConfig& router, const RouteRequest& req, const ExpertWeights& w,
                         const ExpertWeights* shared, const std::vector<float>& x, int repeats,
                         std::vector<float>& y, Routing* routing_out, ExecBackend backend, Dtype dtype) {
#if defined(MOESIM_HAS_CUDA)
  if (backend == ExecBackend::cuda) {
    const CudaLayerTimes t = time_layer_cuda(router, req, w, shared, dtype, x.data(), y.data(), repeats, routing_out);
    return {t.router_s, t.dispatch_s, t.experts_s, t.combine_s, t.layer_s};
  }
#endif
  (void)backend;
  (void)dtype;
  std::vector<double> t_router, t_dispatch, t_experts, t_combine, t_layer;
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
      t_router.push_back(router_s);
      t_dispatch.push_back(plan_s + phases.dispatch_s);
      t_experts.push_back(phases.experts_s);
      t_combine.push_back(phases.combine_s);
      t_layer.push_back(layer_s);
    }
    if (routing_out) *routing_out = std::move(r);
  }
  return {median(t_router), median(t_dispatch), median(t_experts), median(t_combine), median(t_layer)};
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

void check_memory(const Experiment& e, const RunOptions& opts) {
  const double need = estimate_run_bytes(e);
  if (opts.memory_limit_bytes > 0 && need > opts.memory_limit_bytes) {
    std::ostringstream os;
    os << e.source_file << ": the run needs about " << need / (1 << 20) << " MiB, over the memory limit of "
       << opts.memory_limit_bytes / (1 << 20) << " MiB (--memory-limit); lower workload.batch or execute.hidden/ffn";
    if (e.workload.source == WorkloadSource::decoder)
      os << ", workload.prompt_len, workload.decode_steps or execute.layers";
    throw ResourceError(os.str());
  }
}

int primary_devices(const Experiment& e) {
  return e.placement.kind == PlacementKind::expert_parallel ? std::max(1, e.placement.devices) : 1;
}

const ModeledPlacement& primary_of(const std::vector<ModeledPlacement>& modeled) {
  for (const ModeledPlacement& p : modeled)
    if (p.placement == "expert_parallel") return p;
  return modeled.front();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Fills a record's modeled MoE cost from its routing metrics, and the derived totals.
void model_record(const Experiment& e, const HardwareProfile& hw, const RouterConfig& router, const BalanceMetrics& m,
                  StepRecord& rec) {
  rec.modeled = model_placements(e, hw, router, m.load, m.capacity, rec.num_tokens);
  const ModeledPlacement& p = primary_of(rec.modeled);
  rec.batching_efficiency = p.cost.batching_efficiency;
  rec.modeled_layer_s = p.cost.actual.quantized_s + (rec.has_attention ? rec.modeled_attention.quantized_s : 0.0);
}

CostBreakdown mean_breakdown(const std::vector<const CostBreakdown*>& cs) {
  CostBreakdown m;
  for (const CostBreakdown* c : cs) {
    m.ideal_s += c->ideal_s;
    m.quantized_s += c->quantized_s;
    m.calibrated_s += c->calibrated_s;
  }
  const double n = static_cast<double>(std::max<size_t>(1, cs.size()));
  m.ideal_s /= n;
  m.quantized_s /= n;
  m.calibrated_s /= n;
  return m;
}

// The mean modeled MoE layer of `records` (decode records when there are any), per placement:
// every time and per-device figure averaged; batching_efficiency = mean balanced / mean actual time.
std::vector<ModeledPlacement> mean_placements(const std::vector<StepRecord>& records) {
  bool any_decode = false;
  for (const StepRecord& r : records) any_decode = any_decode || r.phase == "decode";
  std::vector<const StepRecord*> use;
  for (const StepRecord& r : records)
    if (!any_decode || r.phase == "decode") use.push_back(&r);
  std::vector<ModeledPlacement> out;
  if (use.empty()) return out;
  for (size_t pi = 0; pi < use.front()->modeled.size(); ++pi) {
    ModeledPlacement mp;
    mp.placement = use.front()->modeled[pi].placement;
    mp.devices = use.front()->modeled[pi].devices;
    std::vector<const CostBreakdown*> actual, balanced;
    LayerCost& c = mp.cost;
    const double n = static_cast<double>(use.size());
    std::vector<double> device_tokens;
    c.rank_imbalance = 0;
    c.balancedness = 0;
    for (const StepRecord* r : use) {
      const LayerCost& x = r->modeled[pi].cost;
      actual.push_back(&x.actual);
      balanced.push_back(&x.balanced);
      c.compute_bound_experts += x.compute_bound_experts / n;
      c.rank_imbalance += x.rank_imbalance / n;
      c.balancedness += x.balancedness / n;
      c.all_to_all_s += x.all_to_all_s / n;
      c.all_to_all_bytes += x.all_to_all_bytes / n;
      c.device_time_s.resize(x.device_time_s.size(), 0.0);
      device_tokens.resize(x.device_tokens.size(), 0.0);
      for (size_t d = 0; d < x.device_time_s.size(); ++d) c.device_time_s[d] += x.device_time_s[d] / n;
      for (size_t d = 0; d < x.device_tokens.size(); ++d) device_tokens[d] += static_cast<double>(x.device_tokens[d]) / n;
    }
    for (double t : device_tokens) c.device_tokens.push_back(static_cast<int64_t>(std::llround(t)));
    c.actual = mean_breakdown(actual);
    c.balanced = mean_breakdown(balanced);
    c.batching_efficiency = c.actual.quantized_s > 0 ? c.balanced.quantized_s / c.actual.quantized_s : 1.0;
    out.push_back(mp);
  }
  return out;
}

// Phase totals. Each step's modeled time is the mean over its records' layers times model.layers (the
// executed or recorded layers stand for the model's); measured time is the decoder's step wall time.
void summarize_phases(const Experiment& e, const std::vector<double>& step_wall_s, VariantResult& vr) {
  std::vector<std::string> order;
  for (const StepRecord& r : vr.records)
    if (std::find(order.begin(), order.end(), r.phase) == order.end()) order.push_back(r.phase);
  const double model_layers = e.model.layers;
  for (const std::string& phase : order) {
    PhaseSummary s;
    s.phase = phase;
    std::map<int, std::vector<const StepRecord*>> steps;
    for (const StepRecord& r : vr.records) {
      if (r.phase != phase) continue;
      steps[r.step].push_back(&r);
      s.tokens_unrouted += vr.per_batch[&r - vr.records.data()].tokens_unrouted;
    }
    s.steps = static_cast<int>(steps.size());
    for (const auto& [step, recs] : steps) {
      int64_t tokens = 0;
      double attention = 0, moe = 0;
      for (const StepRecord* r : recs) {
        tokens = std::max(tokens, r->num_tokens);
        attention += r->has_attention ? r->modeled_attention.quantized_s : 0.0;
        moe += primary_of(r->modeled).cost.actual.quantized_s;
      }
      const double scale = model_layers / static_cast<double>(recs.size());
      s.tokens += tokens;
      s.modeled_attention_s += attention * scale;
      s.modeled_moe_s += moe * scale;
      if (step >= 0 && static_cast<size_t>(step) < step_wall_s.size()) s.measured_s += step_wall_s[step];
      s.kv_cache_bytes = recs.back()->kv_cache_bytes * model_layers;
    }
    s.modeled_s = s.modeled_attention_s + s.modeled_moe_s;
    s.modeled_tokens_per_s = s.modeled_s > 0 ? static_cast<double>(s.tokens) / s.modeled_s : 0.0;
    s.measured_tokens_per_s = s.measured_s > 0 ? static_cast<double>(s.tokens) / s.measured_s : 0.0;
    vr.phases.push_back(s);
  }
  vr.modeled = mean_placements(vr.records);
}

AttentionShape model_attention_shape(const Experiment& e) {
  AttentionShape a;
  a.hidden = e.model.hidden;
  a.heads = e.model.heads;
  a.kv_heads = e.model.kv_heads;
  a.head_dim = e.model.head_dim;
  a.dtype = e.model.dtype;
  return a;
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
  std::vector<float> x, y;
  if (execute) {
    weights = make_expert_weights(e.model.experts, e.execute.hidden, e.execute.ffn, e.workload.seed);
    if (e.model.shared_experts > 0)
      shared = make_expert_weights(e.model.shared_experts, e.execute.hidden, e.execute.ffn, e.workload.seed + 17);
    x = synthetic_hidden(result.num_tokens, e.execute.hidden, e.workload.seed);
    y.assign(x.size(), 0.0f);
  }
  const ExpertWeights* shared_ptr = e.model.shared_experts > 0 ? &shared : nullptr;

  for (const RouterVariant& v : variants) {
    VariantResult vr;
    vr.variant = v;
    RouterState state;
    for (size_t b = 0; b < batches.size(); ++b) {
      const RouteRequest req = request_for(e, batches[b], static_cast<int>(b));
      const Routing r = route_omp(v.router, req, &state);
      vr.per_batch.push_back(compute_balance_metrics(r, batches[b].logits.data(), v.router.layout, v.router.block_size));
    }
    vr.final_bias = state.expert_bias;
    vr.modeled = model_placements(e, result.hardware, v.router, vr.last().load, vr.last().capacity, result.num_tokens);

    if (execute && !batches.empty()) {
      // The executed layer replays the last batch with a fresh router state (time_layer).
      const Batch& last = batches.back();
      const RouteRequest req = request_for(e, last, static_cast<int>(batches.size() - 1));
      vr.measured = time_layer(v.router, req, weights, shared_ptr, x, e.execute.repeats, y, nullptr, opts.backend, e.execute.dtype);
      vr.output_digest = float_digest(y.data(), y.size());
      vr.executed = true;
      RouterConfig balanced = v.router;
      balanced.gating = Gating::balanced;
      vr.measured_balanced_layer_s =
          time_layer(balanced, req, weights, shared_ptr, x, e.execute.repeats, y, nullptr, opts.backend, e.execute.dtype).layer_s;
      if (opts.verify) vr.verify_message = verify_layer(v.router, req, weights, shared_ptr, x, e.execute.hidden);
    }
    result.variants.push_back(std::move(vr));
    if (opts.progress) opts.progress(result.variants.size(), variants.size());
  }
}

// ---- decoder ----------------------------------------------------------------------------------------
void run_decoder(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                 RunResult& result) {
  const Decoder decoder(e);
  const DecoderShape& shape = decoder.shape();
  result.has_decoder = true;
  result.decoder_shape = shape;
  result.prompt_len = decoder_prompt_lengths(e.workload);
  result.num_tokens = e.workload.decode_steps > 0
                          ? e.workload.batch
                          : std::accumulate(result.prompt_len.begin(), result.prompt_len.end(), int64_t{0});
  const AttentionShape attn = model_attention_shape(e);
  const int64_t D = primary_devices(e);
  const int dtype_bytes_model = dtype_bytes(e.model.dtype);
  const bool execute = opts.execute && e.execute.enabled;

  for (const RouterVariant& v : variants) {
    const DecoderRun run = decoder.run(v.router);
    result.topic = run.topic;
    result.kv_cache_allocated_bytes = run.kv_cache_allocated_bytes;
    VariantResult vr;
    vr.variant = v;
    for (const DecoderRecord& d : run.records) {
      StepRecord rec;
      rec.phase = to_string(d.phase);
      rec.step = d.step;
      rec.layer = d.layer;
      rec.num_tokens = d.num_tokens;
      rec.context_tokens = d.context_tokens;
      rec.kv_cache_bytes =
          KvCache::bytes_for(1, e.model.kv_heads, e.model.head_dim, static_cast<double>(d.context_tokens), dtype_bytes_model);
      rec.kv_cache_bytes_executed = d.kv_cache_bytes;
      // --no-execute (and execute.enabled false) leave measured times out, so that the report is the
      // same at any thread count.
      rec.has_measured = execute;
      if (execute) rec.measured = d.measured;
      // Attention is data-parallel over the expert-parallel devices (each holds 1/D of the sequences,
      // the layout the placement model assumes), so one device's share is modeled.
      rec.has_attention = true;
      if (d.phase == DecoderPhase::decode) {
        rec.modeled_attention = attention_decode_time(result.hardware, attn, ceil_div(e.workload.batch, D),
                                                      ceil_div(d.context_tokens, D));
      } else {
        rec.modeled_attention =
            attention_prefill_time(result.hardware, attn, ceil_div(d.num_tokens, D), ceil_div(d.attended_positions, D));
      }
      model_record(e, result.hardware, v.router, d.metrics, rec);
      vr.per_batch.push_back(d.metrics);
      vr.records.push_back(std::move(rec));
    }
    if (!run.router_states.empty()) vr.final_bias = run.router_states.back().expert_bias;
    vr.final_hidden_digest = float_digest(run.final_hidden.data(), run.final_hidden.size());
    summarize_phases(e, execute ? run.step_wall_s : std::vector<double>{}, vr);

    if (execute) {
      // Re-time the last step's last MoE layer on its real hidden states: the variant's routing (a fresh
      // router state, as time_layer does) against balanced routing.
      const DecoderMoeInput& in = run.last_moe_input;
      const DecoderLayerWeights& lw = decoder.weights().layers[in.layer];
      const ExpertWeights* shared_ptr = shape.shared_experts > 0 ? &lw.shared : nullptr;
      RouteRequest req;
      req.logits = in.logits.data();
      req.num_tokens = in.num_tokens;
      req.num_experts = shape.experts;
      req.top_k = shape.top_k;
      req.token_ids = in.token_ids.data();
      req.sequence_length = in.sequence_length;
      req.seed = in.seed;
      std::vector<float> y(in.x.size(), 0.0f);
      vr.measured = time_layer(v.router, req, lw.experts, shared_ptr, in.x, e.execute.repeats, y, nullptr, opts.backend, e.execute.dtype);
      vr.output_digest = float_digest(y.data(), y.size());
      RouterConfig balanced = v.router;
      balanced.gating = Gating::balanced;
      vr.measured_balanced_layer_s =
          time_layer(balanced, req, lw.experts, shared_ptr, in.x, e.execute.repeats, y, nullptr, opts.backend, e.execute.dtype).layer_s;
      vr.executed = true;
      if (opts.verify) vr.verify_message = verify_layer(v.router, req, lw.experts, shared_ptr, in.x, shape.hidden);
    }
    result.variants.push_back(std::move(vr));
    if (opts.progress) opts.progress(result.variants.size(), variants.size());
  }
}

// ---- trace replay -----------------------------------------------------------------------------------
void run_trace(const Experiment& e, const std::vector<RouterVariant>& variants, RunResult& result) {
  result.workload_path = resolve_workload_path(e);
  const Trace trace = read_trace_file(result.workload_path, e.model.experts);
  result.trace_replayed = !trace.has_logits;
  result.num_tokens = trace.batches.back().num_tokens;
  for (const RouterVariant& v : variants) {
    VariantResult vr;
    vr.variant = v;
    std::map<int, RouterState> states;  // per recorded layer, kept across steps
    for (const TraceBatch& b : trace.batches) {
      Routing r;
      const float* logits = trace.has_logits ? b.logits.data() : nullptr;
      if (trace.has_logits) {
        RouteRequest req;
        req.logits = logits;
        req.num_tokens = b.num_tokens;
        req.num_experts = e.model.experts;
        req.top_k = e.model.top_k;
        req.token_ids = b.token_ids.data();
        req.seed = decoder_route_seed(e.workload.seed, static_cast<int>(b.step), b.layer);
        r = route_omp(v.router, req, &states[b.layer]);
      } else {
        r = recorded_routing(b, e.model.experts, e.model.top_k);
      }
      StepRecord rec;
      rec.phase = b.phase.empty() ? "trace" : b.phase;
      rec.step = static_cast<int>(b.step);
      rec.layer = b.layer;
      rec.num_tokens = b.num_tokens;
      const BalanceMetrics m = compute_balance_metrics(r, logits, v.router.layout, v.router.block_size);
      model_record(e, result.hardware, v.router, m, rec);
      vr.per_batch.push_back(m);
      vr.records.push_back(std::move(rec));
    }
    if (!states.empty()) vr.final_bias = states.rbegin()->second.expert_bias;
    summarize_phases(e, {}, vr);
    result.variants.push_back(std::move(vr));
  }
}

// ---- real load profiles -----------------------------------------------------------------------------
void run_load_profile(const Experiment& e, const std::vector<RouterVariant>& variants, RunResult& result) {
  result.workload_path = resolve_workload_path(e);
  const LoadProfile profile = read_load_profile(result.workload_path, e.workload.profile_key, e.model.experts);
  result.profile_key = profile.key;
  result.num_tokens = e.workload.batch;
  const int k = e.model.top_k;
  for (const RouterVariant& v : variants) {
    VariantResult vr;
    vr.variant = v;
    for (size_t i = 0; i < profile.layers.size(); ++i) {
      const std::vector<int64_t>& counts = profile.counts[i];
      const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      // The metrics are the recorded counts' own; the cost model sees the expected loads of a batch of
      // workload.batch tokens with the same shape.
      const BalanceMetrics m = metrics_from_loads(counts, total / k, k);
      StepRecord rec;
      rec.phase = "profile";
      rec.step = 0;
      rec.layer = profile.layers[i];
      rec.num_tokens = e.workload.batch;
      rec.modeled = model_placements(e, result.hardware, v.router, scale_loads(counts, e.workload.batch * k), 0,
                                     e.workload.batch);
      const ModeledPlacement& p = primary_of(rec.modeled);
      rec.batching_efficiency = p.cost.batching_efficiency;
      rec.modeled_layer_s = p.cost.actual.quantized_s;
      vr.per_batch.push_back(m);
      vr.records.push_back(std::move(rec));
    }
    summarize_phases(e, {}, vr);
    result.variants.push_back(std::move(vr));
  }
}

double file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0.0 : static_cast<double>(n);
}

}  // namespace

std::string resolve_workload_path(const Experiment& e) {
  namespace fs = std::filesystem;
  const std::string& p = e.workload.path;
  std::error_code ec;
  if (p.empty() || fs::path(p).is_absolute() || fs::exists(p, ec)) return p;
  if (!e.source_file.empty() && e.source_file.front() != '<') {
    const fs::path beside = fs::path(e.source_file).parent_path() / p;
    if (fs::exists(beside, ec)) return beside.lexically_normal().string();
  }
  return p;
}

double estimate_run_bytes(const Experiment& e) {
  switch (e.workload.source) {
    case WorkloadSource::decoder:
      return estimate_decoder_bytes(e);
    case WorkloadSource::trace:
    case WorkloadSource::load_profile:
      // The parsed file (numbers as floats and ids are smaller than their text) plus the routings of
      // one batch at a time.
      return 2.0 * file_bytes(resolve_workload_path(e)) + 64.0 * e.model.experts;
    default:
      break;
  }
  const double N = static_cast<double>(e.workload.batch);
  const double E = e.model.experts, k = e.model.top_k, H = e.execute.hidden, F = e.execute.ffn;
  const double S = e.model.shared_experts;
  const double routing = N * E * 4 /*logits*/ + N * 8 /*ids*/ + N * k * 13 /*assignments*/ * 2 /*plan*/;
  double bytes = routing * std::max(1, e.workload.batches);
  if (e.execute.enabled) {
    const double rows = N * k + E * std::max(64, e.router.block_size);  // worst padding
    bytes += N * H * 4 * 2                 // x and y
             + (E + S) * 3 * H * F * 4     // expert weights
             + rows * (2 * H + 3 * F) * 4  // gathered rows, intermediates, expert outputs
             + N * H * 4;                  // reference output for --verify
  }
  return bytes;
}

RunResult run_experiment(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts) {
  RunResult result;
  result.experiment = e;
  result.hardware = load_hardware_profile(e.hardware, e.source_file);
  check_memory(e, opts);
#if defined(MOESIM_HAS_CUDA)
  if (opts.backend == ExecBackend::cuda) {
    result.backend = ExecBackend::cuda;
    result.device = cuda_device_description();
  }
#endif
  switch (e.workload.source) {
    case WorkloadSource::decoder:
      run_decoder(e, variants, opts, result);
      break;
    case WorkloadSource::trace:
      run_trace(e, variants, result);
      break;
    case WorkloadSource::load_profile:
      run_load_profile(e, variants, result);
      break;
    case WorkloadSource::synthetic:
    case WorkloadSource::logits:
      if (e.workload.source == WorkloadSource::logits) result.workload_path = resolve_workload_path(e);
      run_batches(e, variants, opts, result);
      break;
  }
  return result;
}

}  // namespace moesim
