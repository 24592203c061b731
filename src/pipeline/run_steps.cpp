// Step-structured runs: the decoder workload (prefill and decode steps, per layer), trace replay and
// real load profiles, each record costed per placement, with phase totals (see run_internal.hpp).
// Deterministic apart from measured times. Host only. Covered by tests/decoder/decoder_test.cpp and
// tests/workload/*_test.cpp.
#include "src/pipeline/run_internal.hpp"
#include "src/step/attention_ranks.hpp"


#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
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
#include "src/workload/load_distribution.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/logits_batches.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/megatron_loads.hpp"
#include "src/workload/synthetic_logits.hpp"
#include "src/workload/trace_replay.hpp"
#if defined(MOESIM_HAS_CUDA)
#include "kernels/cuda_backend.hpp"
#endif


namespace moesim::run_detail {

int primary_devices(const Experiment& e) {
  return e.placement.kind == PlacementKind::expert_parallel ? std::max(1, e.placement.devices) : 1;
}

int attention_tp_of(const Experiment& e) {
  return e.placement.kind == PlacementKind::expert_parallel ? std::max(1, e.placement.attention_tp) : 1;
}

void set_record_cost(std::vector<ModeledPlacement> modeled, StepRecord& rec) {
  rec.modeled = std::move(modeled);
  const ModeledPlacement& p = primary_placement(rec.modeled);
  rec.batching_efficiency = p.cost.batching_efficiency;
  rec.modeled_layer_s = p.cost.actual.quantized_s + rec.attention_s;
  rec.moe_quantized_s = p.cost.actual.quantized_s;
  rec.moe_erosion = p.cost.erosion;
  rec.moe_dispatch_s = p.cost.dispatch_s;
  rec.moe_combine_s = p.cost.combine_s;
  rec.moe_exposed_s = p.cost.exposed_communication_s;
}

void PlacementMean::add(const std::vector<ModeledPlacement>& modeled) {
  if (acc_.empty()) {
    for (const ModeledPlacement& p : modeled) {
      Acc a;
      a.mp.placement = p.placement;
      a.mp.devices = p.devices;
      a.mp.cost.rank_imbalance = 0;
      a.mp.cost.balancedness = 0;
      acc_.push_back(std::move(a));
    }
  }
  const double n = n_;
  for (size_t pi = 0; pi < acc_.size(); ++pi) {
    const LayerCost& x = modeled[pi].cost;
    Acc& a = acc_[pi];
    LayerCost& c = a.mp.cost;
    a.actual.ideal_s += x.actual.ideal_s;
    a.actual.quantized_s += x.actual.quantized_s;
    a.balanced.ideal_s += x.balanced.ideal_s;
    a.balanced.quantized_s += x.balanced.quantized_s;
    c.compute_bound_experts += x.compute_bound_experts / n;
    add_scaled(c.erosion, x.erosion, 1.0 / n);
    add_scaled(c.erosion_exact, x.erosion_exact, 1.0 / n);
    c.rank_imbalance += x.rank_imbalance / n;
    c.balancedness += x.balancedness / n;
    c.all_to_all_s += x.all_to_all_s / n;
    c.exposed_communication_s += x.exposed_communication_s / n;
    c.all_to_all_bytes += x.all_to_all_bytes / n;
    add_scaled(c.a2a, x.a2a, 1.0 / n);
    if (x.a2a.dispatch.transfer_s > a.slowest_dispatch_s) {
      // The busiest device is the slowest record's.
      a.slowest_dispatch_s = x.a2a.dispatch.transfer_s;
      c.a2a.dispatch.busiest_device = x.a2a.dispatch.busiest_device;
      c.a2a.combine.busiest_device = x.a2a.combine.busiest_device;
    }
    c.tensor_parallel_reduce_s += x.tensor_parallel_reduce_s / n;
    c.device_time_s.resize(x.device_time_s.size(), 0.0);
    a.device_tokens.resize(x.device_tokens.size(), 0.0);
    for (size_t d = 0; d < x.device_time_s.size(); ++d) c.device_time_s[d] += x.device_time_s[d] / n;
    for (size_t d = 0; d < x.device_tokens.size(); ++d) a.device_tokens[d] += static_cast<double>(x.device_tokens[d]) / n;
  }
}

std::vector<ModeledPlacement> PlacementMean::finish() const {
  std::vector<ModeledPlacement> out;
  if (count_ == 0) return out;
  const double n = static_cast<double>(std::max<size_t>(1, count_));
  for (const Acc& a : acc_) {
    ModeledPlacement mp = a.mp;
    LayerCost& c = mp.cost;
    for (double t : a.device_tokens) c.device_tokens.push_back(static_cast<int64_t>(std::llround(t)));
    c.actual = {a.actual.ideal_s / n, a.actual.quantized_s / n};
    c.balanced = {a.balanced.ideal_s / n, a.balanced.quantized_s / n};
    c.batching_efficiency = efficiency_of(c.erosion);
    c.batching_efficiency_exact = efficiency_of(c.erosion_exact);
    c.roofline_efficiency = roofline_efficiency_of(c.erosion_exact);
    out.push_back(std::move(mp));
  }
  return out;
}

StepCollector::StepCollector(VariantResult& vr, size_t num_records, size_t decode_records, const RunOptions& opts,
                             size_t variant)
    : vr_(vr), decode_only_(decode_records > 0), opts_(opts), variant_(variant),
      mean_(decode_records > 0 ? decode_records : num_records) {
  vr_.per_batch.reserve(num_records);
  vr_.records.reserve(num_records);
}

void StepCollector::add(StepRecord rec, BalanceMetrics m, const DecoderStepFigures* d) {
  if (!decode_only_ || rec.phase == "decode") mean_.add(rec.modeled);
  add_to_totals(vr_.totals, rec, m);
  if (opts_.record_sink) opts_.record_sink(variant_, rec, m, d);
  if (!opts_.records && !vr_.records.empty()) {
    // The previous record is no longer the last: its detail is in the mean and the totals now.
    std::vector<ModeledPlacement>().swap(vr_.records.back().modeled);
    BalanceMetrics& prev = vr_.per_batch.back();
    std::vector<int64_t>().swap(prev.load);
    std::vector<int64_t>().swap(prev.demand);
    std::vector<double>().swap(prev.utilization);
  }
  vr_.per_batch.push_back(std::move(m));
  vr_.records.push_back(std::move(rec));
}

// The executed or recorded layers stand for the model's: attention and the KV cache times model.layers, the
// MoE part and its erosion times the MoE layers (model.moe_layers; dense layers' FFNs are not modeled).
void StepCollector::finish(const Experiment& e, const std::vector<double>& step_wall_s) {
  VariantResult& vr = vr_;
  std::vector<std::string> order;
  for (const StepRecord& r : vr.records)
    if (std::find(order.begin(), order.end(), r.phase) == order.end()) order.push_back(r.phase);
  const double model_layers = e.model.layers;
  const double moe_layers = moe_layer_count(e.model);
  for (const std::string& phase : order) {
    PhaseSummary s;
    s.phase = phase;
    std::map<int, std::vector<size_t>> steps;
    for (size_t i = 0; i < vr.records.size(); ++i) {
      if (vr.records[i].phase != phase) continue;
      steps[vr.records[i].step].push_back(i);
      s.tokens_unrouted += vr.per_batch[i].tokens_unrouted;
    }
    s.steps = static_cast<int>(steps.size());
    double balance_sum = 0;
    int64_t balance_records = 0;
    for (const auto& [step, recs] : steps) {
      int64_t tokens = 0;
      double attention = 0, wait = 0, moe = 0, dispatch = 0, combine = 0, exposed = 0;
      for (size_t i : recs) {
        tokens = std::max(tokens, vr.records[i].num_tokens);
        attention += vr.records[i].attention_s;
        if (!vr.decoder.empty()) {
          wait += vr.decoder[i].attention_wait_s;
          balance_sum += vr.decoder[i].attention_balance_ratio;
          ++balance_records;
        }
        moe += vr.records[i].moe_quantized_s;
        dispatch += vr.records[i].moe_dispatch_s;
        combine += vr.records[i].moe_combine_s;
        exposed += vr.records[i].moe_exposed_s;
      }
      const double scale = model_layers / static_cast<double>(recs.size());
      const double moe_scale = moe_layers / static_cast<double>(recs.size());
      for (size_t i : recs) add_scaled(s.erosion, vr.records[i].moe_erosion, moe_scale);
      s.tokens += tokens;
      s.modeled_attention_s += attention * scale;
      s.modeled_attention_wait_s += wait * scale;
      s.modeled_moe_s += moe * moe_scale;
      s.modeled_dispatch_s += dispatch * moe_scale;
      s.modeled_combine_s += combine * moe_scale;
      s.modeled_exposed_s += exposed * moe_scale;
      if (step >= 0 && static_cast<size_t>(step) < step_wall_s.size()) s.measured_s += step_wall_s[step];
      if (!vr.decoder.empty()) s.kv_cache_bytes = vr.decoder[recs.back()].kv_cache_bytes * model_layers;
    }
    if (balance_records > 0) s.attention_balance_ratio = balance_sum / static_cast<double>(balance_records);
    s.modeled_s = s.modeled_attention_s + s.modeled_moe_s;
    s.modeled_tokens_per_s = s.modeled_s > 0 ? static_cast<double>(s.tokens) / s.modeled_s : 0.0;
    s.measured_tokens_per_s = s.measured_s > 0 ? static_cast<double>(s.tokens) / s.measured_s : 0.0;
    vr.phases.push_back(s);
  }
  vr.modeled = mean_.finish();
}

AttentionShape model_attention_shape(const Experiment& e) {
  AttentionShape a;
  a.hidden = e.model.hidden;
  // One GPU of an attention rank: placement.attention_tp splits the heads (GQA's KV heads too, down to one each).
  const int tp = attention_tp_of(e);
  a.heads = e.model.heads / tp;
  a.kv_heads = std::max(1, e.model.kv_heads / tp);
  a.head_dim = e.model.head_dim;
  a.dtype = e.model.dtype;
  return a;
}

// ---- decoder ----------------------------------------------------------------------------------------
namespace {

// The step's sequences as the ranks take them: a decode step runs one token of each, attending to its
// context after the append (its prompt plus the steps so far: d.context_tokens spread evenly over the
// sequences on top of their prompts); the prefill runs each prompt, token p attending to p + 1 positions.
std::vector<StepSequence> step_sequences(const std::vector<int>& prompt_len, const DecoderRecord& d, bool decode) {
  std::vector<StepSequence> out;
  out.reserve(prompt_len.size());
  int64_t prompts = 0;
  for (int p : prompt_len) prompts += p;
  const int64_t generated = prompt_len.empty() ? 0 : (d.context_tokens - prompts) / static_cast<int64_t>(prompt_len.size());
  for (int p : prompt_len) {
    StepSequence s;
    if (decode) {
      s.context_tokens = p + generated;
      s.query_tokens = 1;
      s.attended_positions = s.context_tokens;
    } else {
      s.context_tokens = p;
      s.query_tokens = p;
      s.attended_positions = static_cast<int64_t>(p) * (p + 1) / 2;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

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
  const int attention_ranks = primary_devices(e) / attention_tp_of(e);
  const int dtype_bytes_model = dtype_bytes(e.model.dtype);
  const bool execute = opts.execute && e.execute.enabled;
  const PlanProfile profile = read_plan_profile(e);

  for (const RouterVariant& v : variants) {
    // Each MoE layer plans from its own past steps (its first step from equal loads, or the profile).
    std::map<int, PlanSource> sources;
    Decoder::RoutingObserver observe;
    if (opts.routing_sink && &v == &variants.front()) {
      observe = [&](const DecoderRecord& d, const Routing& r, const float* logits, const int64_t* token_ids) {
        opts.routing_sink(RoutedBatch{d.step, d.layer, to_string(d.phase), &r, logits, token_ids});
      };
    }
    const DecoderRun run = decoder.run(v.router, observe);
    result.topic = run.topic;
    result.kv_cache_allocated_bytes = run.kv_cache_allocated_bytes;
    VariantResult vr;
    vr.variant = v;
    size_t decode_records = 0;
    for (const DecoderRecord& d : run.records) decode_records += d.phase == DecoderPhase::decode;
    StepCollector collect(vr, run.records.size(), decode_records, opts, result.variants.size());
    vr.decoder.reserve(run.records.size());
    for (const DecoderRecord& d : run.records) {
      StepRecord rec;
      rec.phase = to_string(d.phase);
      rec.step = d.step;
      rec.layer = d.layer;
      rec.num_tokens = d.num_tokens;
      DecoderStepFigures fig;
      fig.context_tokens = d.context_tokens;
      fig.kv_cache_bytes =
          KvCache::bytes_for(1, e.model.kv_heads, e.model.head_dim, static_cast<double>(d.context_tokens), dtype_bytes_model);
      fig.kv_cache_bytes_executed = d.kv_cache_bytes;
      // --no-execute (and execute.enabled false) leave measured times out, so that the report is the
      // same at any thread count.
      fig.has_measured = execute;
      if (execute) fig.measured = d.measured;
      // Attention is data-parallel over the expert-parallel devices, devices / placement.attention_tp ranks:
      // the step's sequences spread over them by placement.request_balance, each rank's attention costed on its
      // own, and the layer's all-to-all waiting for the slowest (src/step/attention_ranks.hpp).
      const bool decode_phase = d.phase == DecoderPhase::decode;
      const RankAttention ranks = attention_over_ranks(
          result.hardware, attn,
          spread_requests(step_sequences(result.prompt_len, d, decode_phase), attention_ranks,
                          e.placement.request_balance),
          decode_phase);
      fig.modeled_attention = ranks.slowest;
      fig.attention_balance_ratio = ranks.balance_ratio;
      fig.attention_wait_s = ranks.wait_s;
      rec.attention_s = fig.modeled_attention.quantized_s;
      PlanSource& source = sources.try_emplace(d.layer, plan_source(e, profile, d.layer)).first->second;
      set_record_cost(model_placements(e, result.hardware, v.router, d.metrics, rec.num_tokens,
                                       source.next(d.metrics.load), rec.attention_s),
                      rec);
      if (!d.expert_bias.empty())
        vr.bias_updates.push_back({static_cast<int64_t>(vr.per_batch.size()), d.step, d.layer, d.expert_bias});
      vr.decoder.push_back(fig);
      collect.add(std::move(rec), d.metrics, &vr.decoder.back());
    }
    if (!run.router_states.empty()) vr.final_bias = run.router_states.back().expert_bias;
    vr.final_hidden_digest = float_digest(run.final_hidden.data(), run.final_hidden.size());
    collect.finish(e, execute ? run.step_wall_s : std::vector<double>{});

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
      time_variant(v.router, req, lw.experts, shared_ptr, in.x, e.execute.repeats, opts.backend, e.execute.dtype, vr);
      if (opts.verify) vr.verify_message = verify_layer(v.router, req, lw.experts, shared_ptr, in.x, shape.hidden);
    }
    result.variants.push_back(std::move(vr));
    if (opts.progress) opts.progress(result.variants.size(), variants.size());
  }
}

// ---- trace replay -----------------------------------------------------------------------------------
namespace {

// One batch of a trace for one variant: re-routed when the trace has logits (router state per layer kept
// across steps), else replayed under the variant's capacity keys; then its record.
void trace_batch(const Experiment& e, const RouterVariant& v, bool first_variant, const TraceBatch& b,
                 bool has_logits, const RunOptions& opts, RunResult& result, VariantResult& vr,
                 std::map<int, RouterState>& states, std::map<int, PlanSource>& sources, const PlanProfile& profile,
                 StepCollector& collect) {
  Routing r;
  const float* logits = has_logits ? b.logits.data() : nullptr;
  const uint64_t seed = decoder_route_seed(e.workload.seed, static_cast<int>(b.step), b.layer);
  if (has_logits) {
    RouteRequest req;
    req.logits = logits;
    req.num_tokens = b.num_tokens;
    req.num_experts = e.model.experts;
    req.top_k = e.model.top_k;
    req.token_ids = b.token_ids.data();
    req.seed = seed;
    r = route_omp(v.router, req, &states[b.layer]);
    if (!states[b.layer].expert_bias.empty()) {
      vr.bias_updates.push_back({static_cast<int64_t>(vr.per_batch.size()), static_cast<int>(b.step), b.layer,
                                 states[b.layer].expert_bias});
    }
  } else {
    r = replay_routing(b, result.workload_path, e.model.experts, e.model.top_k, v.router, seed);
  }
  if (opts.routing_sink && first_variant)
    opts.routing_sink(RoutedBatch{b.step, b.layer, b.phase, &r, logits, b.token_ids.data()});
  StepRecord rec;
  rec.phase = b.phase.empty() ? "trace" : b.phase;
  rec.step = static_cast<int>(b.step);
  rec.layer = b.layer;
  rec.num_tokens = b.num_tokens;
  BalanceMetrics m = compute_balance_metrics(r, logits, v.router.layout, v.router.block_size);
  PlanSource& source = sources.try_emplace(b.layer, plan_source(e, profile, b.layer)).first->second;
  set_record_cost(model_placements(e, result.hardware, v.router, m, rec.num_tokens, source.next(m.load)), rec);
  collect.add(std::move(rec), std::move(m));
}

// Variants of a trace without logits replay it; variants that differ in router.gating would re-route it.
void require_one_gating(const std::vector<RouterVariant>& variants, const std::string& path) {
  for (const RouterVariant& v : variants) {
    if (v.router.gating != variants.front().router.gating) {
      throw InputError(path + ": \"logits\": expected on every line to re-route the trace with " +
                       to_string(variants.front().router.gating) + " and " + to_string(v.router.gating) +
                       ", got none (a trace without logits is only replayed as recorded)");
    }
  }
}

// A Megatron-LM router trace (megatron_loads.hpp) replayed: each decoder line is one (step, layer) batch of its
// tokens in order, streamed from the file once per variant after a first pass has checked every line, so that
// the trace is never held whole. It records no routing weights: each assignment weighs 1 / topk (what
// --dump-routing writes), and router.drop_policy score, which ranks assignments by weight, is refused.
void run_router_trace(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                      RunResult& result) {
  const std::string& path = result.workload_path;
  require_one_gating(variants, path);
  for (const RouterVariant& v : variants) {
    if (v.router.drop_policy == DropPolicy::score && v.router.capacity_factor > 0) {
      throw InputError(path + ": router.drop_policy: expected position or random for a Megatron-LM router trace "
                       "(it records no routing weights to rank by), got score");
    }
  }
  const MegatronLoads checked = read_megatron_router_trace(path, e.model.experts, e.model.top_k);
  size_t num_batches = 0;
  for (int64_t n : checked.forward_counts) num_batches += static_cast<size_t>(n);
  result.trace_replayed = true;
  const PlanProfile profile = read_plan_profile(e);
  for (const RouterVariant& v : variants) {
    VariantResult vr;
    vr.variant = v;
    StepCollector collect(vr, num_batches, 0, opts, result.variants.size());
    std::map<int, RouterState> states;
    std::map<int, PlanSource> sources;  // per recorded layer: its plan from its own past steps
    std::ifstream in(path, std::ios::binary);
    if (!in) throw open_failure<InputError>(path, path + ": cannot open the router trace");
    RouterTraceReader reader(in, path, e.model.experts, e.model.top_k);
    RouterTraceLine line;
    TraceBatch b;
    while (reader.next(line)) {
      if (!line.decoder) continue;
      const int k = line.topk;
      b.step = line.step;
      b.layer = line.layer;
      b.num_tokens = line.num_tokens;
      b.token.resize(static_cast<size_t>(b.num_tokens));
      std::iota(b.token.begin(), b.token.end(), int64_t{0});
      b.token_ids = b.token;
      b.line.assign(static_cast<size_t>(b.num_tokens), line.line);
      b.offsets.resize(static_cast<size_t>(b.num_tokens) + 1);
      for (int64_t t = 0; t <= b.num_tokens; ++t) b.offsets[t] = t * k;
      b.expert = line.experts;
      b.weight.assign(b.expert.size(), 1.0f / static_cast<float>(k));
      b.kept.assign(b.expert.size(), 1);
      trace_batch(e, v, &v == &variants.front(), b, false, opts, result, vr, states, sources, profile, collect);
    }
    result.num_tokens = b.num_tokens;
    collect.finish(e, {});
    result.variants.push_back(std::move(vr));
  }
}

}  // namespace

void run_trace(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
               RunResult& result) {
  result.workload_path = resolve_workload_path(e);
  if (is_megatron_router_trace_file(result.workload_path)) return run_router_trace(e, variants, opts, result);
  // Flat arrays, one batch built at a time: no heap object per line or per batch (issue 18).
  const FlatTrace trace = read_flat_trace_file(result.workload_path, e.model.experts);
  result.trace_replayed = !trace.has_logits;
  if (!trace.has_logits) require_one_gating(variants, result.workload_path);
  const size_t num_batches = trace.num_batches();
  result.num_tokens = trace.batch_begin[num_batches] - trace.batch_begin[num_batches - 1];
  size_t decode_batches = 0;
  for (uint8_t phase : trace.batch_phase) decode_batches += phase == 2;
  const PlanProfile profile = read_plan_profile(e);
  for (const RouterVariant& v : variants) {
    VariantResult vr;
    vr.variant = v;
    StepCollector collect(vr, num_batches, decode_batches, opts, result.variants.size());
    std::map<int, RouterState> states;  // per recorded layer, kept across steps
    std::map<int, PlanSource> sources;  // per recorded layer: its plan from its own past steps
    for (size_t bi = 0; bi < num_batches; ++bi) {
      trace_batch(e, v, &v == &variants.front(), trace.batch(bi), trace.has_logits, opts, result, vr, states, sources,
                  profile, collect);
    }
    if (!states.empty()) vr.final_bias = states.rbegin()->second.expert_bias;
    collect.finish(e, {});
    result.variants.push_back(std::move(vr));
  }
}

// ---- real load profiles -----------------------------------------------------------------------------
void run_load_profile(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                      RunResult& result) {
  result.workload_path = resolve_workload_path(e);
  const LoadProfile profile = read_load_profile_file(result.workload_path, e.workload.format, e.workload.profile_key,
                                                     e.model.experts, e.workload.expert_map, e.model.top_k);
  result.profile_key = profile.key;
  result.profile_format = to_string(profile.format);
  result.profile_format_forced = profile.format_forced;
  result.num_tokens = e.workload.batch;
  const int k = e.model.top_k;
  const PlanProfile plan_profile = read_plan_profile(e);
  // plan_from past: the profile is the engine's record of past loads, so each layer plans from its own row
  // (the loads it charges are that row's expectation: no batch noise separates them).
  PlacementConfig from_record = e.placement;
  if (from_record.plan_from == PlanFrom::past) from_record.plan_from = PlanFrom::profile;
  for (const RouterVariant& v : variants) {
    VariantResult vr;
    vr.variant = v;
    StepCollector collect(vr, profile.layers.size(), 0, opts, result.variants.size());
    for (size_t i = 0; i < profile.layers.size(); ++i) {
      const std::vector<int64_t>& counts = profile.counts[i];
      const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      // The metrics are the recorded counts' own; the cost model sees the expected loads of a batch of
      // workload.batch tokens with the same shape.
      StepRecord rec;
      rec.phase = "profile";
      rec.step = 0;
      rec.layer = profile.layers[i];
      rec.num_tokens = e.workload.batch;
      const std::vector<int64_t> loads = scale_loads(counts, e.workload.batch * k);
      PlanSource source = e.placement.plan_from == PlanFrom::past
                              ? PlanSource(from_record, e.model.experts, std::vector<double>(counts.begin(), counts.end()))
                              : plan_source(e, plan_profile, rec.layer);
      set_record_cost(model_placements(e, result.hardware, v.router, loads, 0, e.workload.batch, 0, source.next(loads)),
                      rec);
      collect.add(std::move(rec), metrics_from_loads(counts, total / k, k));
    }
    collect.finish(e, {});
    result.variants.push_back(std::move(vr));
  }
}

// ---- peers' load distributions ----------------------------------------------------------------------
void run_load_distribution(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts,
                           RunResult& result) {
  const WorkloadConfig& w = e.workload;
  const int k = e.model.top_k;
  // workload.batches draws, the same for every variant, recorded as the layers of one forward step (each
  // layer draws its loads apart, as the collector's layers do). The generator's EP step (the heaviest group swapped
  // onto rank 0, the rank aiconfigurator times) is left out: moesim costs the slowest device wherever it is.
  std::vector<std::vector<int64_t>> draws(static_cast<size_t>(w.batches));
  const auto draw = [&](uint64_t seed, size_t b) {
    return w.distribution == LoadDistribution::balanced
               ? balanced_round_robin_loads(w.batch, e.model.experts, k)
               : power_law_loads(w.batch, e.model.experts, k, w.power_law_alpha, 1, seed, b);
  };
  for (size_t b = 0; b < draws.size(); ++b) draws[b] = draw(w.seed, b);
  const PlanProfile plan_profile = read_plan_profile(e);
  const bool warm = e.placement.kind == PlacementKind::expert_parallel && plans_from_loads(e.placement) &&
                    e.placement.plan_from == PlanFrom::past;
  result.num_tokens = w.batch;
  for (const RouterVariant& v : variants) {
    VariantResult vr;
    vr.variant = v;
    StepCollector collect(vr, draws.size(), 0, opts, result.variants.size());
    for (size_t b = 0; b < draws.size(); ++b) {
      StepRecord rec;
      rec.phase = to_string(w.distribution);
      rec.step = 0;
      rec.layer = static_cast<int>(b);
      rec.num_tokens = w.batch;
      // Each draw is a layer: its plan comes from earlier draws of the same layer (other seeds).
      PlanSource source = plan_source(e, plan_profile, rec.layer);
      for (int j = 0; warm && j < e.placement.warmup_batches; ++j)
        source.warm_up(draw(w.seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(j + 1), b));
      set_record_cost(model_placements(e, result.hardware, v.router, draws[b], 0, w.batch, 0, source.next(draws[b])),
                      rec);
      collect.add(std::move(rec), metrics_from_loads(draws[b], w.batch, k));
    }
    collect.finish(e, {});
    result.variants.push_back(std::move(vr));
  }
}

}  // namespace moesim::run_detail
