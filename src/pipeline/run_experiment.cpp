// Runs one experiment for a list of router variants (see run_experiment.hpp).
#include "pipeline/run_experiment.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "common/error.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "workload/logits_file.hpp"
#include "workload/synthetic_logits.hpp"

namespace moesim {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One routed batch of the workload: logits and token ids.
struct Batch {
  int64_t num_tokens = 0;
  std::vector<float> logits;       // [num_tokens, experts]
  std::vector<int64_t> token_ids;  // [num_tokens]
};

std::vector<Batch> make_batches(const Experiment& e) {
  std::vector<Batch> batches;
  const int E = e.model.experts;
  switch (e.workload.source) {
    case WorkloadSource::synthetic:
      for (int b = 0; b < e.workload.batches; ++b) {
        Batch batch;
        batch.num_tokens = e.workload.batch;
        // Batch b draws fresh noise on the same expert popularity (the bias keeps its seed).
        const std::vector<float> bias = expert_popularity_bias(E, e.workload.skew, e.workload.seed);
        batch.logits = synthetic_logits(batch.num_tokens, E, 0.0, e.workload.seed + 1000003ull * (b + 1));
        for (int64_t t = 0; t < batch.num_tokens; ++t)
          for (int x = 0; x < E; ++x) batch.logits[t * E + x] += bias[x];
        batch.token_ids = synthetic_token_ids(batch.num_tokens, e.model.vocab, e.workload.seed + b);
        batches.push_back(std::move(batch));
      }
      break;
    case WorkloadSource::logits: {
      LogitsMatrix m = read_logits_file(e.workload.path);
      if (m.num_experts != E) {
        throw InputError(e.workload.path + ": expected " + std::to_string(E) +
                         " columns (model.experts), got " + std::to_string(m.num_experts));
      }
      Batch batch;
      batch.num_tokens = m.num_tokens;
      batch.logits = std::move(m.values);
      batch.token_ids = synthetic_token_ids(batch.num_tokens, e.model.vocab, e.workload.seed);
      batches.push_back(std::move(batch));
      break;
    }
    default:
      throw InputError(e.source_file + ": workload.source: '" + to_string(e.workload.source) +
                       "' is not a batch workload; expected synthetic or logits");
  }
  return batches;
}

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
                                               const RouterConfig& router, const BalanceMetrics& m,
                                               int64_t num_tokens) {
  LayerCostInput in;
  in.hidden = e.model.hidden;
  in.ffn = e.model.ffn;
  in.num_experts = e.model.experts;
  in.top_k = e.model.top_k;
  in.shared_experts = e.model.shared_experts;
  in.dtype = e.model.dtype;
  in.num_tokens = num_tokens;
  in.load = m.load;
  in.layout = router.layout;
  in.capacity = m.capacity;
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

// Runs the executed layer `repeats` times after a warm-up; returns the median phase times.
MeasuredTimes time_layer(const RouterConfig& router, const RouteRequest& req, const ExpertWeights& w,
                         const ExpertWeights* shared, const std::vector<float>& x, int repeats,
                         std::vector<float>& y, Routing* routing_out) {
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

}  // namespace

double estimate_run_bytes(const Experiment& e) {
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

std::vector<RouterVariant> own_variant(const Experiment& e) {
  return {RouterVariant{to_string(e.router.gating), e.router}};
}

RunResult run_experiment(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts) {
  RunResult result;
  result.experiment = e;
  result.hardware = load_hardware_profile(e.hardware, e.source_file);

  const double need = estimate_run_bytes(e);
  if (opts.memory_limit_bytes > 0 && need > opts.memory_limit_bytes) {
    std::ostringstream os;
    os << e.source_file << ": the run needs about " << need / (1 << 20) << " MiB, over the memory limit of "
       << opts.memory_limit_bytes / (1 << 20) << " MiB (--memory-limit); lower workload.batch or execute.hidden/ffn";
    throw ResourceError(os.str());
  }

  const std::vector<Batch> batches = make_batches(e);
  result.num_tokens = batches.empty() ? 0 : batches.front().num_tokens;
  const bool execute = opts.execute && e.execute.enabled;

  // The executed layer's weights and input are shared by every variant.
  ExpertWeights weights, shared;
  std::vector<float> x, y, y_ref;
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
    vr.modeled = model_placements(e, result.hardware, v.router, vr.last(), result.num_tokens);

    if (execute && !batches.empty()) {
      // The executed layer replays the last batch with the router state before it, so that
      // aux_free_bias is timed in its converged state.
      const Batch& last = batches.back();
      const RouteRequest req = request_for(e, last, static_cast<int>(batches.size() - 1));
      vr.measured = time_layer(v.router, req, weights, shared_ptr, x, e.execute.repeats, y, nullptr);
      vr.executed = true;
      RouterConfig balanced = v.router;
      balanced.gating = Gating::balanced;
      vr.measured_balanced_layer_s =
          time_layer(balanced, req, weights, shared_ptr, x, e.execute.repeats, y, nullptr).layer_s;
      if (opts.verify) {
        RouterState s1, s2;
        Routing fast = route_omp(v.router, req, &s1);
        Routing ref = route_ref(v.router, req, &s2);
        std::string mismatch = first_routing_mismatch(fast, ref);
        if (mismatch.empty()) {
          const DispatchPlan plan = plan_dispatch_omp(fast, v.router.layout, v.router.block_size);
          moe_forward_omp(weights, shared_ptr, x.data(), fast, plan, y.data(), nullptr);
          y_ref.assign(y.size(), 0.0f);
          moe_forward_ref(weights, shared_ptr, x.data(), ref, y_ref.data());
          // float32 BLAS against the double-accumulating reference: 1e-3 relative plus 1e-4 absolute.
          for (size_t i = 0; i < y.size() && mismatch.empty(); ++i) {
            if (std::fabs(y[i] - y_ref[i]) > 1e-4f + 1e-3f * std::fabs(y_ref[i])) {
              std::ostringstream os;
              os << "layer output [token " << i / e.execute.hidden << ", column " << i % e.execute.hidden
                 << "]: " << y[i] << " vs reference " << y_ref[i];
              mismatch = os.str();
            }
          }
        }
        vr.verify_message = mismatch.empty() ? "ok" : mismatch;
      }
    }
    result.variants.push_back(std::move(vr));
  }
  return result;
}

}  // namespace moesim
