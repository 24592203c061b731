// The expert-parallel run of an experiment over MPI ranks (see ep_run.hpp), in phases: the set-up every
// rank agrees on, then per step the routing, the placement epoch (EPLB rebalancing), the timed forwards,
// the gathers with the cost model at the executed size, and --verify against the single-process layer.
// Every rank returns the same result. The reports are in ep_run_report.cpp. Host only.
// Covered by the mpi-labelled CTest entries (tests/mpi/CMakeLists.txt).
#include "src/distributed/ep_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <sstream>
#include <thread>

#include "src/cost/rebalance.hpp"
#include "src/common/clock.hpp"
#include "src/common/median.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "kernels/moe_layer.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "router/route.hpp"
#include "src/workload/logits_batches.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace {

constexpr const char* kPrefix = "moesim run";

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The phase times and row counts of EpRankStats, in the order the gathers pack them.
constexpr double EpPhaseTimes::*kPhaseFields[] = {
    &EpPhaseTimes::plan_s,         &EpPhaseTimes::idle_dispatch_s, &EpPhaseTimes::counts_s,
    &EpPhaseTimes::pack_s,         &EpPhaseTimes::dispatch_s,      &EpPhaseTimes::unpack_s,
    &EpPhaseTimes::experts_s,      &EpPhaseTimes::idle_combine_s,  &EpPhaseTimes::return_s,
    &EpPhaseTimes::combine_s,      &EpPhaseTimes::layer_s};
constexpr int64_t EpRankStats::*kCountFields[] = {
    &EpRankStats::local_tokens,  &EpRankStats::assignments_sent,     &EpRankStats::rows_sent_remote,
    &EpRankStats::rows_received, &EpRankStats::rows_received_remote, &EpRankStats::rows_computed};
constexpr size_t kStatsFields = std::size(kCountFields) + 1 + std::size(kPhaseFields);  // + local_slots

// The phase times of several repeats, each field its median; the row counts are the same every repeat.
EpRankStats median_stats(const std::vector<EpRankStats>& reps) {
  EpRankStats m = reps.front();
  for (double EpPhaseTimes::*f : kPhaseFields) {
    std::vector<double> v;
    for (const EpRankStats& r : reps) v.push_back(r.times.*f);
    m.times.*f = median(v);
  }
  return m;
}

std::vector<double> pack_stats(const EpRankStats& s) {
  std::vector<double> v;
  for (int64_t EpRankStats::*f : kCountFields) v.push_back(static_cast<double>(s.*f));
  v.push_back(static_cast<double>(s.local_slots));
  for (double EpPhaseTimes::*f : kPhaseFields) v.push_back(s.times.*f);
  return v;
}

EpRankStats unpack_stats(const double* v) {
  EpRankStats s;
  size_t i = 0;
  for (int64_t EpRankStats::*f : kCountFields) s.*f = static_cast<int64_t>(v[i++]);
  s.local_slots = static_cast<int>(v[i++]);
  for (double EpPhaseTimes::*f : kPhaseFields) s.times.*f = v[i++];
  return s;
}

double max_over_mean(const std::vector<double>& v) {
  double mx = 0, sum = 0;
  for (double x : v) {
    mx = std::max(mx, x);
    sum += x;
  }
  return mx > 0 ? mx / (sum / static_cast<double>(v.size())) : 1.0;
}

std::string placement_rule(const PlacementConfig& p) {
  std::string s;
  switch (effective_policy(p)) {
    case PlacementPolicy::automatic:
    case PlacementPolicy::contiguous: return "contiguous (static, no EPLB)";
    case PlacementPolicy::round_robin: return "round-robin";
    case PlacementPolicy::map: return "placement.map";
    case PlacementPolicy::global: s = "EPLB global"; break;
    case PlacementPolicy::hierarchical:
      s = "EPLB hierarchical, " + std::to_string(p.groups) + " groups on " + std::to_string(p.nodes) + " nodes";
      break;
  }
  s += ", " + std::to_string(p.replicas) + " replica slots";
  if (p.spread_replicas) s += ", replicas spread";
  if (p.rebalance_every > 0) {
    s += ", re-planned every " + std::to_string(p.rebalance_every) + " steps from ";
    s += p.load_estimator == LoadEstimator::window
             ? "the last " + std::to_string(p.rebalance_every) + " steps' loads"
             : "an exponential moving average of the loads (weight " + std::to_string(p.ema_weight) + ")";
  } else if (p.plan_from == PlanFrom::oracle) {
    s += ", oracle: each plan from the step it is charged for";
  }
  s += p.plan_from == PlanFrom::oracle  ? ""
       : p.plan_from == PlanFrom::profile ? ", first planned from placement.plan_profile"
                                          : ", first planned from " + std::to_string(p.warmup_batches) +
                                                " warm-up batches (equal loads for a logits file)";
  return s;
}

LayerCost model_step(const Experiment& e, const HardwareProfile& hw, const PlacementConfig& pc,
                     const std::vector<int64_t>& load, const std::vector<double>& plan_load, int64_t capacity,
                     int64_t num_tokens, bool model_size) {
  LayerCostInput in =
      layer_cost_input(e, e.router, model_size ? CostedSize::model : CostedSize::executed, num_tokens, load, capacity);
  in.placement = pc;
  in.placement_load = plan_load;
  return model_moe_layer(hw, in);
}

// The first difference between the gathered routing and the single-process one, or "".
std::string routing_mismatch(const Routing& ep, const Routing& single) {
  std::ostringstream os;
  if (ep.num_assignments() != single.num_assignments() || ep.capacity != single.capacity) {
    os << "routing: " << ep.num_assignments() << " assignments (capacity " << ep.capacity << ") vs the single-process "
       << single.num_assignments() << " (capacity " << single.capacity << ")";
    return os.str();
  }
  for (int64_t a = 0; a < ep.num_assignments(); ++a) {
    if (ep.token[a] != single.token[a] || ep.expert[a] != single.expert[a] || ep.kept[a] != single.kept[a] ||
        ep.weight[a] != single.weight[a]) {
      os << "routing assignment " << a << ": (token " << ep.token[a] << ", expert " << ep.expert[a] << ", weight "
         << ep.weight[a] << ", kept " << int(ep.kept[a]) << ") vs the single-process (token " << single.token[a]
         << ", expert " << single.expert[a] << ", weight " << single.weight[a] << ", kept " << int(single.kept[a])
         << ")";
      return os.str();
    }
  }
  return "";
}

// Every rank's piece of the global routing, gathered in rank order (tokens renumbered globally).
Routing gather_routing(const Routing& local, const EpTokenShare& share, int64_t num_tokens) {
  std::vector<int32_t> token(local.token);
  for (int32_t& t : token) t += static_cast<int32_t>(share.begin);
  Routing g;
  g.num_tokens = num_tokens;
  g.num_experts = local.num_experts;
  g.top_k = local.top_k;
  g.capacity = local.capacity;
  g.token = ep_allgatherv(token);
  g.expert = ep_allgatherv(local.expert);
  g.weight = ep_allgatherv(local.weight);
  g.kept = ep_allgatherv(local.kept);
  return g;
}

// ---- set-up ---------------------------------------------------------------------------------------------

// Every rank must run the same experiment: compare the effective YAML's hash with rank 0's.
void require_same_experiment(const Experiment& e) {
  const int me = ep_rank();
  const std::vector<double> hashes = ep_allgather({static_cast<double>(fnv1a(experiment_to_yaml(e)) >> 12)});
  ep_agree(kPrefix, [&] {
    if (hashes[me] != hashes[0]) {
      throw ConfigError(e.source_file + ": this rank's effective experiment differs from rank 0's: every rank of "
                        "the job needs the same experiment file and --set options");
    }
  });
}

// The keys a run under mpirun needs; ConfigError names the first that does not fit.
void require_ep_runnable(const Experiment& e, int num_ranks) {
  if (e.placement.kind != PlacementKind::expert_parallel) {
    throw ConfigError(e.source_file + ": placement.kind: expected expert_parallel for a run under mpirun, got " +
                      to_string(e.placement.kind));
  }
  if (e.placement.devices != 1 && e.placement.devices != num_ranks) {
    throw ConfigError(e.source_file + ": placement.devices: expected " + std::to_string(num_ranks) +
                      " (the MPI ranks of this job) or 1 (take the job's size), got " +
                      std::to_string(e.placement.devices));
  }
  if (e.workload.source != WorkloadSource::synthetic && e.workload.source != WorkloadSource::logits) {
    throw ConfigError(e.source_file + ": workload.source: expected synthetic or logits for an expert-parallel "
                      "run under mpirun, got " + to_string(e.workload.source));
  }
  if (e.placement.tensor_parallel != 1) {
    throw ConfigError(e.source_file + ": placement.tensor_parallel: expected 1 for a run under mpirun (each rank "
                      "executes whole experts; tensor parallelism is modeled only: run without mpirun), got " +
                      std::to_string(e.placement.tensor_parallel));
  }
  if (!e.execute.enabled) {
    throw ConfigError(e.source_file + ": execute.enabled: expected true for a run under mpirun (it executes the "
                      "layer); run without mpirun for the cost model alone");
  }
  if (e.execute.dtype != Dtype::fp32) {
    throw ConfigError(e.source_file + ": execute.dtype: expected fp32 (the CPU experts), got " +
                      to_string(e.execute.dtype));
  }
  const PlacementPolicy policy = effective_policy(e.placement);
  if (e.placement.plan_from == PlanFrom::profile) {
    throw ConfigError(e.source_file + ": placement.plan_from: expected past or oracle for a run under mpirun, got "
                      "profile; run without mpirun to plan from a recorded profile");
  }
  const int slots = e.model.experts + e.placement.replicas;
  if ((policy == PlacementPolicy::global || policy == PlacementPolicy::hierarchical) && slots % num_ranks != 0) {
    throw ConfigError(e.source_file + ": placement.devices: expected the MPI ranks (" + std::to_string(num_ranks) +
                      ") to divide model.experts + placement.replicas (" + std::to_string(slots) +
                      ") for placement.policy " + to_string(policy) + "; change -np or placement.replicas");
  }
  for (int d : e.placement.map) {
    if (d >= num_ranks) {
      throw ConfigError(e.source_file + ": placement.map: device " + std::to_string(d) + " is not one of the " +
                        std::to_string(num_ranks) + " MPI ranks");
    }
  }
}

// What every step shares: the placement rule at the job's size, the batches, the weights, the rank's tokens.
struct EpRunInputs {
  PlacementConfig pc;
  std::vector<LogitsBatch> batches;
  ExpertWeights weights, shared;
  bool has_shared = false;
  EpTokenShare share;
  std::vector<float> x_local;  // [share.size(), execute.hidden]: the rank's rows of the batch's hidden states
  int repeats = 1;
  const ExpertWeights* shared_weights() const { return has_shared ? &shared : nullptr; }
};

// The set-up, agreed by every rank (ep_agree: a failure on any rank is one message and one exit code): the
// checks, the hardware profile, the memory estimate, the batches, the weights and a trial of the model.
// Fills res's hardware, sizes and routing mode.
EpRunInputs prepare_inputs(const Experiment& e, const EpRunOptions& opts, EpRunResult& res) {
  const int num_ranks = res.num_ranks;
  EpRunInputs in;
  in.pc = resolve_placement(e.placement, e.router);
  ep_agree(kPrefix, [&] {
    require_ep_runnable(e, num_ranks);
    in.pc.devices = num_ranks;
    res.hardware = load_hardware_profile(e.hardware, e.source_file);
    const double need = estimate_run_bytes(e);
    if (opts.memory_limit_bytes > 0 && need > opts.memory_limit_bytes) {
      std::ostringstream os;
      os << e.source_file << ": each rank needs about " << need / (1 << 20) << " MiB, over the memory limit of "
         << opts.memory_limit_bytes / (1 << 20) << " MiB (--memory-limit); lower workload.batch or execute.hidden/ffn";
      throw ResourceError(os.str());
    }
    // The same batches as the single-process pipeline (CTest mpi.run_matches_single_process).
    in.batches = make_logits_batches(e, e.workload.source == WorkloadSource::logits ? resolve_workload_path(e) : "");
    res.num_tokens = in.batches.empty() ? 0 : in.batches.front().num_tokens;
    in.weights = make_expert_weights(e.model.experts, e.execute.hidden, e.execute.ffn, e.workload.seed);
    if (e.model.shared_experts > 0)
      in.shared = make_expert_weights(e.model.shared_experts, e.execute.hidden, e.execute.ffn, e.workload.seed + 17);
    // The model needs a peak for the executed dtype and a link bandwidth: fail here, not mid-run.
    model_step(e, res.hardware, in.pc, std::vector<int64_t>(e.model.experts, 1), {}, 0, 1, false);
  });
  in.has_shared = e.model.shared_experts > 0;
  // The model's own size needs a peak for model.dtype (a calibrated CPU profile has fp32 only).
  res.has_model_size = peak_flops_per_s(res.hardware, e.model.dtype).has_value();
  res.routing_local = ep_routing_is_token_local(e.router);
  res.placement_rule = placement_rule(in.pc);

  const int64_t N = res.num_tokens;
  const int64_t H = e.execute.hidden;
  in.share = ep_token_share(N, ep_rank(), num_ranks);
  // Every rank draws the batch's hidden states from the shared seed (counter-based) and keeps its rows.
  const std::vector<float> x_full = synthetic_hidden(N, H, e.workload.seed);
  in.x_local.assign(x_full.begin() + in.share.begin * H, x_full.begin() + in.share.end * H);
  in.repeats = std::max(1, e.execute.repeats);
  return in;
}

// ---- one step -------------------------------------------------------------------------------------------

// What a rank carries from step to step.
struct EpRunState {
  RouterState router;
  std::unique_ptr<EpMoeLayer> layer, static_layer;
  std::unique_ptr<PlanSource> source;          // the plans' loads, step after step (warm-up batches seen)
  std::vector<double> plan_load;               // the loads the current placement was planned from
  std::vector<double> static_plan_load;        // the first plan's loads (the static placement's)
  std::vector<float> y_local, y_static;        // the rank's outputs of the last forwards
};

// The router request of batch b, without its tokens.
RouteRequest step_request(const Experiment& e, size_t b) {
  RouteRequest req;
  req.num_experts = e.model.experts;
  req.top_k = e.model.top_k;
  req.seed = e.workload.seed + static_cast<uint64_t>(b);
  return req;
}

struct StepRouting {
  Routing local;        // the rank's tokens, renumbered from 0
  Routing global;       // the whole batch
  double route_s = 0;   // routing (with the logits gather when replicated)
};

// Route: the rank's share, or the whole batch from the gathered router logits; then the global routing.
StepRouting route_step(const Experiment& e, const LogitsBatch& batch, size_t b, const EpTokenShare& share,
                       bool routing_local, int64_t num_tokens, RouterState& state) {
  const int E = e.model.experts;
  RouteRequest req = step_request(e, b);
  std::vector<float> local_logits(batch.logits.begin() + share.begin * E, batch.logits.begin() + share.end * E);
  StepRouting r;
  const auto t_route = Clock::now();
  if (routing_local) {
    req.logits = local_logits.data();
    req.num_tokens = share.size();
    req.token_ids = batch.token_ids.data() + share.begin;
    r.local = route_omp(e.router, req, &state);
  } else {
    const std::vector<float> all_logits = ep_allgatherv(local_logits);
    req.logits = all_logits.data();
    req.num_tokens = num_tokens;
    req.token_ids = batch.token_ids.data();
    r.global = route_omp(e.router, req, &state);
    r.local = ep_local_routing(r.global, share);
  }
  r.route_s = seconds_since(t_route);
  if (routing_local) r.global = gather_routing(r.local, share, num_tokens);
  return r;
}

// Placement epochs: step 0 plans from its own loads; every rebalance_every steps from the window. Makes the
// layer at step 0 and re-slices it on a re-plan; sets rec's epoch and rebalanced.
void plan_epoch(const Experiment& e, const EpRunInputs& in, int step, const std::vector<int64_t>& load,
                EpRunState& s, EpRunResult& res, EpStep& rec) {
  const PlacementConfig& pc = in.pc;
  bool replanned = false;
  const PlanChoice& choice = s.source->next(load, &replanned);
  if (replanned) {
    s.plan_load = choice.load;
    if (step == 0) s.static_plan_load = s.plan_load;
    ExpertPlacement p = place_experts_real(s.plan_load, pc);
    assign_load(p, load);
    res.placements.push_back(p);
    res.epoch_first_step.push_back(step);
    if (!s.layer) {
      s.layer = std::make_unique<EpMoeLayer>(in.weights, in.shared_weights(), p, e.router.layout, e.router.block_size);
    } else {
      s.layer->set_placement(p);
      rec.rebalanced = true;
    }
  }
  rec.epoch = static_cast<int>(res.placements.size()) - 1;
}

struct StepTimes {
  EpRankStats mine;           // this rank's rows and phase medians
  double static_layer_s = 0;  // its median layer time under the static placement (has_static)
};

// Timed forwards: one untimed warm-up before the first step, then `repeats`, phase medians; with
// rec.has_static the same under the static (first) placement.
StepTimes timed_forwards(const Experiment& e, const EpRunInputs& in, int step, const Routing& local,
                         const std::vector<int64_t>& load, bool has_static, const EpRunResult& res, EpRunState& s) {
  if (step == 0) s.layer->forward(local, in.x_local.data(), s.y_local.data(), nullptr);
  std::vector<EpRankStats> reps;
  std::vector<int64_t> step_load;
  for (int r = 0; r < in.repeats; ++r) {
    EpRankStats st;
    s.layer->forward(local, in.x_local.data(), s.y_local.data(), &st, &step_load);
    reps.push_back(st);
  }
  MOESIM_REQUIRE(step_load == load, "step " << step << ": the layer's global load differs from the routing's");
  StepTimes t;
  t.mine = median_stats(reps);
  if (has_static) {
    if (!s.static_layer)
      s.static_layer = std::make_unique<EpMoeLayer>(in.weights, in.shared_weights(), res.placements.front(),
                                                    e.router.layout, e.router.block_size);
    std::vector<double> times;
    for (int r = 0; r < in.repeats; ++r) {
      EpRankStats st;
      s.static_layer->forward(local, in.x_local.data(), s.y_static.data(), &st);
      times.push_back(st.times.layer_s);
    }
    t.static_layer_s = median(times);
  }
  return t;
}

// Every rank's figures of the step, gathered into rec (the same on every rank).
void gather_step(const StepTimes& t, double route_s, int num_ranks, EpStep& rec) {
  std::vector<double> packed = pack_stats(t.mine);
  packed.push_back(route_s);
  packed.push_back(t.static_layer_s);
  const std::vector<double> all = ep_allgather(packed);
  const size_t stride = kStatsFields + 2;
  std::vector<double> rows, expert_times;
  for (int r = 0; r < num_ranks; ++r) {
    const double* v = all.data() + r * stride;
    rec.ranks.push_back(unpack_stats(v));
    rec.route_s.push_back(v[kStatsFields]);
    rec.layer_s = std::max(rec.layer_s, rec.ranks.back().times.layer_s);
    rec.static_layer_s = std::max(rec.static_layer_s, v[kStatsFields + 1]);
    rows.push_back(static_cast<double>(rec.ranks.back().rows_received));
    expert_times.push_back(rec.ranks.back().times.experts_s);
  }
  rec.rank_imbalance = max_over_mean(rows);
  rec.expert_time_imbalance = max_over_mean(expert_times);
}

// The first output beyond the tolerance of the distributed layer, or ""; tracks the largest difference.
std::string output_mismatch(const std::vector<float>& y, const std::vector<float>& y_single, int step,
                            bool static_placement, int64_t H, double& max_abs_diff) {
  for (size_t i = 0; i < y.size(); ++i) {
    const float d = std::fabs(y[i] - y_single[i]);
    max_abs_diff = std::max(max_abs_diff, static_cast<double>(d));
    if (!(d <= kEpAbsTol + kEpRelTol * std::fabs(y_single[i]))) {
      std::ostringstream os;
      os << "step " << step << (static_placement ? " (static placement)" : "") << ": output [token " << i / H
         << ", column " << i % H << "] " << y[i] << " vs the single-process " << y_single[i];
      return os.str();
    }
  }
  return "";
}

// --verify: rank 0 runs the single-process layer on the same batch and compares; the first mismatch stays.
void verify_step(const Experiment& e, const EpRunInputs& in, size_t b, const StepRouting& routing,
                 const std::vector<int64_t>& load, const EpStep& rec, const EpRunState& s, EpRunResult& res) {
  const std::vector<float> y_all = ep_allgatherv(s.y_local);
  const std::vector<float> y_static_all = rec.has_static ? ep_allgatherv(s.y_static) : std::vector<float>{};
  if (ep_rank() != 0 || !res.verify_ok) return;
  const LogitsBatch& batch = in.batches[b];
  const int64_t N = res.num_tokens, H = e.execute.hidden;
  const Routing& global = routing.global;
  std::string mismatch;
  if (res.routing_local) {
    RouteRequest full = step_request(e, b);
    full.logits = batch.logits.data();
    full.num_tokens = N;
    full.token_ids = batch.token_ids.data();
    RouterState fresh;
    mismatch = routing_mismatch(global, route_omp(e.router, full, &fresh));
  }
  const DispatchPlan plan = plan_dispatch_omp(global, e.router.layout, e.router.block_size);
  if (mismatch.empty() && plan.counts != load) mismatch = "per-expert loads differ from the single-process plan";
  if (mismatch.empty()) {
    const std::vector<float> x_full = synthetic_hidden(N, H, e.workload.seed);
    std::vector<float> y_single(x_full.size());
    moe_forward_omp(in.weights, in.shared_weights(), x_full.data(), global, plan, y_single.data(), nullptr);
    for (int which = 0; which < (rec.has_static ? 2 : 1) && mismatch.empty(); ++which) {
      mismatch = output_mismatch(which == 0 ? y_all : y_static_all, y_single, rec.step, which != 0, H,
                                 res.verify_max_abs_diff);
    }
  } else {
    mismatch = "step " + std::to_string(rec.step) + ": " + mismatch;
  }
  if (!mismatch.empty()) {
    res.verify_ok = false;
    res.verify_message = mismatch;
  }
}

// Step b: route, place, run, gather, model, verify.
EpStep run_step(const Experiment& e, const EpRunOptions& opts, const EpRunInputs& in, size_t b, EpRunState& s,
                EpRunResult& res) {
  const int step = static_cast<int>(b);
  const int64_t N = res.num_tokens;
  EpStep rec;
  rec.step = step;
  const StepRouting routing = route_step(e, in.batches[b], b, in.share, res.routing_local, N, s.router);
  const Routing& global = routing.global;
  rec.metrics = compute_balance_metrics(global, in.batches[b].logits.data(), e.router.layout, e.router.block_size);
  const std::vector<int64_t>& load = rec.metrics.load;

  plan_epoch(e, in, step, load, s, res, rec);
  const std::vector<double> current_plan_load = s.plan_load;
  rec.has_static = rec.epoch > 0;
  const StepTimes times = timed_forwards(e, in, step, routing.local, load, rec.has_static, res, s);
  gather_step(times, routing.route_s, res.num_ranks, rec);

  // The cost model at the executed size for this step's placement (and the static one), and at the
  // model's size after the last step.
  rec.modeled = model_step(e, res.hardware, in.pc, load, current_plan_load, global.capacity, N, false);
  if (rec.has_static) {
    rec.static_modeled = model_step(e, res.hardware, in.pc, load, s.static_plan_load, global.capacity, N, false);
    rec.static_rank_imbalance = rec.static_modeled.rank_imbalance;
    // The gain at the model's real size: the executed size's launch and tile floors can hide it.
    if (res.has_model_size) {
      rec.has_model_size = true;
      rec.model_size = model_step(e, res.hardware, in.pc, load, current_plan_load, global.capacity, N, true);
      rec.static_model_size = model_step(e, res.hardware, in.pc, load, s.static_plan_load, global.capacity, N, true);
    }
  }
  if (b + 1 == in.batches.size() && res.has_model_size)
    res.modeled_model_size = model_step(e, res.hardware, in.pc, load, current_plan_load, global.capacity, N, true);

  if (opts.verify) verify_step(e, in, b, routing, load, rec, s, res);
  return rec;
}

}  // namespace

EpRunResult run_experiment_ep(const Experiment& e, const EpRunOptions& opts) {
  const int num_ranks = ep_num_ranks();
  EpRunResult res;
  res.experiment = e;
  res.num_ranks = num_ranks;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  res.ranks_per_host = local ? std::max(1, std::atoi(local)) : num_ranks;
  res.host_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  require_same_experiment(e);

  const EpRunInputs in = prepare_inputs(e, opts, res);
  EpRunState s;
  // The first plan's past: the synthetic workload's warm-up batches, routed whole on every rank (the same loads).
  s.source = std::make_unique<PlanSource>(in.pc, e.model.experts);
  if (plans_from_loads(in.pc) && in.pc.plan_from == PlanFrom::past && e.workload.source == WorkloadSource::synthetic) {
    RouterState warm;
    const std::vector<LogitsBatch> warmup = make_warmup_batches(e, in.pc.warmup_batches);
    for (size_t b = 0; b < warmup.size(); ++b) {
      RouteRequest req = step_request(e, b);
      req.logits = warmup[b].logits.data();
      req.num_tokens = warmup[b].num_tokens;
      req.token_ids = warmup[b].token_ids.data();
      req.seed = e.workload.seed + static_cast<uint64_t>(-1 - static_cast<int64_t>(b));  // as the single process
      const Routing r = route_omp(e.router, req, &warm);
      std::vector<int64_t> load(e.model.experts, 0);
      for (int64_t i = 0; i < r.num_assignments(); ++i)
        if (r.kept[i]) ++load[r.expert[i]];
      s.source->warm_up(load);
    }
  }
  s.y_local.resize(in.x_local.size());
  s.y_static.resize(in.x_local.size());
  for (size_t b = 0; b < in.batches.size(); ++b) res.steps.push_back(run_step(e, opts, in, b, s, res));

  if (opts.verify && res.verify_ok) {
    std::ostringstream os;
    os << "ok: " << res.steps.size() << " steps; routing and per-expert loads identical to the single-process "
       << "run, outputs within " << kEpAbsTol << " + " << kEpRelTol << " |y| (largest difference "
       << res.verify_max_abs_diff << ")";
    res.verify_message = os.str();
  }
  // Rank 0's verdict for everyone.
  std::vector<double> verdict = ep_allgather({res.verify_ok ? 1.0 : 0.0});
  res.verify_ok = verdict[0] != 0.0;
  return res;
}

}  // namespace moesim
