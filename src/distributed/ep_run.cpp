// The expert-parallel run of an experiment over MPI ranks (see ep_run.hpp): setup agreed by every rank,
// per-step routing, placement epochs (EPLB rebalancing), timed forwards, gathers, the cost model at the
// executed size, --verify against the single-process layer, and the reports. Host only.
// Covered by the mpi-labelled CTest entries (tests/mpi/CMakeLists.txt).
#include "src/distributed/ep_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <memory>
#include <sstream>
#include <thread>

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


// The phase times of several repeats, each field its median; the row counts are the same every repeat.
EpRankStats median_stats(const std::vector<EpRankStats>& reps) {
  EpRankStats m = reps.front();
  auto med = [&](double EpPhaseTimes::*f) {
    std::vector<double> v;
    for (const EpRankStats& r : reps) v.push_back(r.times.*f);
    m.times.*f = median(v);
  };
  for (double EpPhaseTimes::*f :
       {&EpPhaseTimes::plan_s, &EpPhaseTimes::idle_dispatch_s, &EpPhaseTimes::counts_s, &EpPhaseTimes::pack_s,
        &EpPhaseTimes::dispatch_s, &EpPhaseTimes::unpack_s, &EpPhaseTimes::experts_s, &EpPhaseTimes::idle_combine_s,
        &EpPhaseTimes::return_s, &EpPhaseTimes::combine_s, &EpPhaseTimes::layer_s})
    med(f);
  return m;
}

constexpr size_t kStatsFields = 18;
std::vector<double> pack_stats(const EpRankStats& s) {
  const EpPhaseTimes& t = s.times;
  return {static_cast<double>(s.local_tokens), static_cast<double>(s.assignments_sent),
          static_cast<double>(s.rows_sent_remote), static_cast<double>(s.rows_received),
          static_cast<double>(s.rows_received_remote), static_cast<double>(s.rows_computed),
          static_cast<double>(s.local_slots), t.plan_s, t.idle_dispatch_s, t.counts_s, t.pack_s, t.dispatch_s,
          t.unpack_s, t.experts_s, t.idle_combine_s, t.return_s, t.combine_s, t.layer_s};
}
EpRankStats unpack_stats(const double* v) {
  EpRankStats s;
  s.local_tokens = static_cast<int64_t>(v[0]);
  s.assignments_sent = static_cast<int64_t>(v[1]);
  s.rows_sent_remote = static_cast<int64_t>(v[2]);
  s.rows_received = static_cast<int64_t>(v[3]);
  s.rows_received_remote = static_cast<int64_t>(v[4]);
  s.rows_computed = static_cast<int64_t>(v[5]);
  s.local_slots = static_cast<int>(v[6]);
  EpPhaseTimes& t = s.times;
  t.plan_s = v[7];
  t.idle_dispatch_s = v[8];
  t.counts_s = v[9];
  t.pack_s = v[10];
  t.dispatch_s = v[11];
  t.unpack_s = v[12];
  t.experts_s = v[13];
  t.idle_combine_s = v[14];
  t.return_s = v[15];
  t.combine_s = v[16];
  t.layer_s = v[17];
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
  if (p.replicas > 0) {
    std::string s = "EPLB, " + std::to_string(p.replicas) + " replica slots";
    if (p.rebalance_every > 0)
      s += ", re-planned every " + std::to_string(p.rebalance_every) + " steps from the last " +
           std::to_string(p.rebalance_every) + " steps' loads";
    else
      s += ", planned from step 0's loads";
    return s;
  }
  return p.map.empty() ? "round-robin" : "placement.map";
}

LayerCost model_step(const Experiment& e, const HardwareProfile& hw, const PlacementConfig& pc,
                     const std::vector<int64_t>& load, const std::vector<int64_t>& plan_load, int64_t capacity,
                     int64_t num_tokens, bool model_size) {
  LayerCostInput in;
  in.hidden = model_size ? e.model.hidden : e.execute.hidden;
  in.ffn = model_size ? e.model.ffn : e.execute.ffn;
  in.dtype = model_size ? e.model.dtype : e.execute.dtype;
  in.num_experts = e.model.experts;
  in.top_k = e.model.top_k;
  in.shared_experts = e.model.shared_experts;
  in.num_tokens = num_tokens;
  in.load = load;
  in.layout = e.router.layout;
  in.capacity = capacity;
  in.block_size = e.router.block_size;
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

}  // namespace

EpRunResult run_experiment_ep(const Experiment& e, const EpRunOptions& opts) {
  const int num_ranks = ep_num_ranks(), me = ep_rank();
  EpRunResult res;
  res.experiment = e;
  res.num_ranks = num_ranks;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  res.ranks_per_host = local ? std::max(1, std::atoi(local)) : num_ranks;
  res.host_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));

  // Every rank must run the same experiment: compare the effective YAML's hash with rank 0's.
  const std::vector<double> hashes = ep_allgather({static_cast<double>(fnv1a(experiment_to_yaml(e)) >> 12)});
  ep_agree(kPrefix, [&] {
    if (hashes[me] != hashes[0]) {
      throw ConfigError(e.source_file + ": this rank's effective experiment differs from rank 0's: every rank of "
                        "the job needs the same experiment file and --set options");
    }
  });

  PlacementConfig pc = e.placement;
  std::vector<LogitsBatch> batches;
  ExpertWeights weights, shared;
  ep_agree(kPrefix, [&] {
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
    if (!e.execute.enabled) {
      throw ConfigError(e.source_file + ": execute.enabled: expected true for a run under mpirun (it executes the "
                        "layer); run without mpirun for the cost model alone");
    }
    if (e.execute.dtype != Dtype::fp32) {
      throw ConfigError(e.source_file + ": execute.dtype: expected fp32 (the CPU experts), got " +
                        to_string(e.execute.dtype));
    }
    if (e.placement.rebalance_every > 0 && e.placement.replicas == 0) {
      throw ConfigError(e.source_file + ": placement.rebalance_every: expected 0 when placement.replicas is 0 "
                        "(rebalancing moves replica slots; round-robin and map placements ignore loads), got " +
                        std::to_string(e.placement.rebalance_every));
    }
    pc.devices = num_ranks;
    for (int d : pc.map) {
      if (d >= num_ranks) {
        throw ConfigError(e.source_file + ": placement.map: device " + std::to_string(d) + " is not one of the " +
                          std::to_string(num_ranks) + " MPI ranks");
      }
    }
    res.hardware = load_hardware_profile(e.hardware, e.source_file);
    const double need = estimate_run_bytes(e);
    if (opts.memory_limit_bytes > 0 && need > opts.memory_limit_bytes) {
      std::ostringstream os;
      os << e.source_file << ": each rank needs about " << need / (1 << 20) << " MiB, over the memory limit of "
         << opts.memory_limit_bytes / (1 << 20) << " MiB (--memory-limit); lower workload.batch or execute.hidden/ffn";
      throw ResourceError(os.str());
    }
    // The same batches as the single-process pipeline (CTest mpi.run_matches_single_process).
    batches = make_logits_batches(e, e.workload.source == WorkloadSource::logits ? resolve_workload_path(e) : "");
    res.num_tokens = batches.empty() ? 0 : batches.front().num_tokens;
    weights = make_expert_weights(e.model.experts, e.execute.hidden, e.execute.ffn, e.workload.seed);
    if (e.model.shared_experts > 0)
      shared = make_expert_weights(e.model.shared_experts, e.execute.hidden, e.execute.ffn, e.workload.seed + 17);
    // The model needs a peak for the executed dtype and a link bandwidth: fail here, not mid-run.
    model_step(e, res.hardware, pc, std::vector<int64_t>(e.model.experts, 1), {}, 0, 1, false);
  });
  // The model's own size needs a peak for model.dtype (a calibrated CPU profile has fp32 only).
  res.has_model_size = peak_flops_per_s(res.hardware, e.model.dtype).has_value();
  res.routing_local = ep_routing_is_token_local(e.router);
  res.placement_rule = placement_rule(pc);

  const int64_t N = res.num_tokens;
  const int E = e.model.experts;
  const int64_t H = e.execute.hidden;
  const EpTokenShare share = ep_token_share(N, me, num_ranks);
  // Every rank draws the batch's hidden states from the shared seed (counter-based) and keeps its rows.
  std::vector<float> x_local;
  {
    const std::vector<float> x_full = synthetic_hidden(N, H, e.workload.seed);
    x_local.assign(x_full.begin() + share.begin * H, x_full.begin() + share.end * H);
  }
  std::vector<float> y_local(x_local.size()), y_static(x_local.size());
  const ExpertWeights* shared_ptr = e.model.shared_experts > 0 ? &shared : nullptr;
  const int repeats = std::max(1, e.execute.repeats);

  RouterState state;
  std::unique_ptr<EpMoeLayer> layer, static_layer;
  std::vector<std::vector<int64_t>> observed;  // global loads per step
  std::vector<int64_t> plan_load;              // the loads the current placement was planned from
  for (size_t b = 0; b < batches.size(); ++b) {
    const int step = static_cast<int>(b);
    EpStep rec;
    rec.step = step;
    // Route: the rank's share, or the whole batch from the gathered router logits.
    RouteRequest req;
    req.num_experts = E;
    req.top_k = e.model.top_k;
    req.seed = e.workload.seed + static_cast<uint64_t>(b);
    std::vector<float> local_logits(batches[b].logits.begin() + share.begin * E,
                                    batches[b].logits.begin() + share.end * E);
    Routing local;
    Routing global;
    const auto t_route = Clock::now();
    if (res.routing_local) {
      req.logits = local_logits.data();
      req.num_tokens = share.size();
      req.token_ids = batches[b].token_ids.data() + share.begin;
      local = route_omp(e.router, req, &state);
    } else {
      const std::vector<float> all_logits = ep_allgatherv(local_logits);
      req.logits = all_logits.data();
      req.num_tokens = N;
      req.token_ids = batches[b].token_ids.data();
      global = route_omp(e.router, req, &state);
      local = ep_local_routing(global, share);
    }
    const double route_s = seconds_since(t_route);
    if (res.routing_local) global = gather_routing(local, share, N);
    rec.metrics = compute_balance_metrics(global, batches[b].logits.data(), e.router.layout, e.router.block_size);
    const std::vector<int64_t>& load = rec.metrics.load;

    // Placement epochs: step 0 plans from its own loads; every rebalance_every steps from the window.
    const bool rebalance = pc.rebalance_every > 0 && step > 0 && step % pc.rebalance_every == 0;
    if (step == 0 || rebalance) {
      if (step == 0) {
        plan_load = load;
      } else {
        plan_load.assign(E, 0);
        for (size_t s = observed.size() - pc.rebalance_every; s < observed.size(); ++s)
          for (int x = 0; x < E; ++x) plan_load[x] += observed[s][x];
      }
      const ExpertPlacement p = place_experts(plan_load, pc);
      res.placements.push_back(p);
      res.epoch_first_step.push_back(step);
      if (!layer) {
        layer = std::make_unique<EpMoeLayer>(weights, shared_ptr, p, e.router.layout, e.router.block_size);
      } else {
        layer->set_placement(p);
        rec.rebalanced = true;
      }
    }
    rec.epoch = static_cast<int>(res.placements.size()) - 1;
    const std::vector<int64_t> current_plan_load = plan_load;

    // Timed forwards: one untimed warm-up before the first step, then `repeats`, phase medians.
    if (step == 0) layer->forward(local, x_local.data(), y_local.data(), nullptr);
    std::vector<EpRankStats> reps;
    std::vector<int64_t> step_load;
    for (int r = 0; r < repeats; ++r) {
      EpRankStats st;
      layer->forward(local, x_local.data(), y_local.data(), &st, &step_load);
      reps.push_back(st);
    }
    MOESIM_REQUIRE(step_load == load, "step " << step << ": the layer's global load differs from the routing's");
    const EpRankStats mine = median_stats(reps);
    rec.has_static = rec.epoch > 0;
    double static_layer_mine = 0;
    if (rec.has_static) {
      if (!static_layer)
        static_layer = std::make_unique<EpMoeLayer>(weights, shared_ptr, res.placements.front(), e.router.layout,
                                                    e.router.block_size);
      std::vector<double> t;
      for (int r = 0; r < repeats; ++r) {
        EpRankStats st;
        static_layer->forward(local, x_local.data(), y_static.data(), &st);
        t.push_back(st.times.layer_s);
      }
      static_layer_mine = median(t);
    }

    // Gather every rank's figures.
    std::vector<double> packed = pack_stats(mine);
    packed.push_back(route_s);
    packed.push_back(static_layer_mine);
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
    rec.modeled = model_step(e, res.hardware, pc, load, current_plan_load, global.capacity, N, false);
    if (rec.has_static) {
      rec.static_modeled = model_step(e, res.hardware, pc, load, observed.front(), global.capacity, N, false);
      rec.static_rank_imbalance = rec.static_modeled.rank_imbalance;
    }
    if (b + 1 == batches.size() && res.has_model_size)
      res.modeled_model_size = model_step(e, res.hardware, pc, load, current_plan_load, global.capacity, N, true);

    // --verify: rank 0 runs the single-process layer on the same batch and compares.
    if (opts.verify) {
      const std::vector<float> y_all = ep_allgatherv(y_local);
      const std::vector<float> y_static_all = rec.has_static ? ep_allgatherv(y_static) : std::vector<float>{};
      if (me == 0 && res.verify_ok) {
        std::string mismatch;
        if (res.routing_local) {
          RouteRequest full = req;
          full.logits = batches[b].logits.data();
          full.num_tokens = N;
          full.token_ids = batches[b].token_ids.data();
          RouterState fresh;
          mismatch = routing_mismatch(global, route_omp(e.router, full, &fresh));
        }
        const DispatchPlan plan = plan_dispatch_omp(global, e.router.layout, e.router.block_size);
        if (mismatch.empty() && plan.counts != load) mismatch = "per-expert loads differ from the single-process plan";
        if (mismatch.empty()) {
          const std::vector<float> x_full = synthetic_hidden(N, H, e.workload.seed);
          std::vector<float> y_single(x_full.size());
          moe_forward_omp(weights, shared_ptr, x_full.data(), global, plan, y_single.data(), nullptr);
          for (int which = 0; which < (rec.has_static ? 2 : 1) && mismatch.empty(); ++which) {
            const std::vector<float>& y = which == 0 ? y_all : y_static_all;
            for (size_t i = 0; i < y.size(); ++i) {
              const float d = std::fabs(y[i] - y_single[i]);
              res.verify_max_abs_diff = std::max(res.verify_max_abs_diff, static_cast<double>(d));
              if (!(d <= kEpAbsTol + kEpRelTol * std::fabs(y_single[i]))) {
                std::ostringstream os;
                os << "step " << step << (which ? " (static placement)" : "") << ": output [token " << i / H
                   << ", column " << i % H << "] " << y[i] << " vs the single-process " << y_single[i];
                mismatch = os.str();
                break;
              }
            }
          }
        } else {
          mismatch = "step " + std::to_string(step) + ": " + mismatch;
        }
        if (!mismatch.empty()) {
          res.verify_ok = false;
          res.verify_message = mismatch;
        }
      }
    }
    observed.push_back(load);
    res.steps.push_back(std::move(rec));
  }
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

// ---- reports ------------------------------------------------------------------------------------------
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
  }
  if (g.steps > 0) {
    const double n = g.steps;
    for (double* v : {&g.rank_imbalance, &g.static_rank_imbalance, &g.modeled_s, &g.static_modeled_s, &g.layer_s,
                      &g.static_layer_s})
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

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

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

}  // namespace

nlohmann::json ep_run_to_json(const EpRunResult& r) {
  const Experiment& e = r.experiment;
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["moesim_version"] = MOESIM_VERSION;
  j["mode"] = "expert_parallel_mpi";
  j["experiment"] = {{"name", e.name}, {"source", e.source_file}};
  j["ranks"] = r.num_ranks;
  j["ranks_per_host"] = r.ranks_per_host;
  j["host_cores"] = r.host_cores;
  j["num_tokens"] = r.num_tokens;
  j["gating"] = to_string(e.router.gating);
  j["routing"] = r.routing_local ? "local" : "replicated";
  j["model"] = {{"hidden", e.model.hidden}, {"ffn", e.model.ffn}, {"experts", e.model.experts},
                {"top_k", e.model.top_k}, {"shared_experts", e.model.shared_experts}, {"dtype", to_string(e.model.dtype)}};
  j["execute"] = {{"hidden", e.execute.hidden}, {"ffn", e.execute.ffn}, {"repeats", e.execute.repeats}};
  j["hardware"] = {{"name", r.hardware.name},
                   {"calibrated", r.hardware.calibrated},
                   {"link_bandwidth_bytes_per_s", r.hardware.link_bandwidth_bytes_per_s},
                   {"link_latency_s", r.hardware.link_latency_s}};
  nlohmann::json epochs = nlohmann::json::array();
  for (size_t i = 0; i < r.placements.size(); ++i) {
    const ExpertPlacement& p = r.placements[i];
    epochs.push_back({{"first_step", r.epoch_first_step[i]}, {"expert", p.expert}, {"device", p.device},
                      {"replicas", p.replicas}});
  }
  j["placement"] = {{"rule", r.placement_rule},
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
    if (s.has_static) {
      js["static"] = {{"rank_imbalance", s.static_rank_imbalance}, {"layer_s", s.static_layer_s},
                      {"modeled", cost_json(s.static_modeled)}};
    }
    steps.push_back(js);
  }
  j["steps"] = steps;
  if (r.has_model_size) j["modeled_model_size"] = cost_json(r.modeled_model_size);
  const Gain g = rebalance_gain(r);
  if (g.steps > 0) {
    j["rebalance_gain"] = {{"steps", g.steps},
                           {"rank_imbalance", g.rank_imbalance},
                           {"static_rank_imbalance", g.static_rank_imbalance},
                           {"modeled_layer_s", g.modeled_s},
                           {"static_modeled_layer_s", g.static_modeled_s},
                           {"layer_s", g.layer_s},
                           {"static_layer_s", g.static_layer_s}};
  }
  if (!r.verify_message.empty()) j["verify"] = {{"ok", r.verify_ok}, {"message", r.verify_message}};
  return j;
}

std::string format_ep_run(const EpRunResult& r, ReportFormat format) {
  if (format == ReportFormat::json) return ep_run_to_json(r).dump(2) + "\n";
  const std::vector<std::string> header = row_header();
  const std::vector<std::vector<std::string>> rows = step_rank_rows(r);
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
  if (format == ReportFormat::markdown) {
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

  const Experiment& e = r.experiment;
  const HardwareProfile& hw = r.hardware;
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
  os << "\n\n" << aligned(header, rows) << "\n";

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
       << fixed(g.static_rank_imbalance, 3) << " -> " << fixed(g.rank_imbalance, 3) << "; modeled layer "
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

}  // namespace moesim
