// The training step's routed micro-batches (see train_routing.hpp).
#include "src/train/train_routing.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "src/common/counter_rng.hpp"
#include "src/common/error.hpp"
#include "src/workload/load_distribution.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace {

// A stream of its own for the segments' seeds (the workload and router streams are 1..3, 16+ and 101..104).
constexpr uint64_t kStreamTrainSegment = 201;

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

// Counts of the assignments of a routing per expert: all of them (demand) and the kept ones.
void count_loads(const Routing& r, std::vector<int64_t>& demand, std::vector<int64_t>& kept) {
  demand.assign(r.num_experts, 0);
  kept.assign(r.num_experts, 0);
  for (size_t i = 0; i < r.expert.size(); ++i) {
    ++demand[r.expert[i]];
    if (r.kept[i]) ++kept[r.expert[i]];
  }
}

}  // namespace

int train_node_limit(const RouterConfig& router, int experts, const TrainLayout& layout) {
  const bool grouped = router.gating == Gating::group_limited || router.gating == Gating::aux_free_bias;
  if (!grouped || router.topk_groups >= router.groups || router.groups <= 0 || experts % router.groups != 0) return 0;
  const int ep = layout.cfg.ep;
  const int per_node = layout.devices_per_node > 0 ? std::max(1, layout.devices_per_node / layout.cfg.etp) : ep;
  const int ep_per_node = std::min(ep, per_node);
  const int nodes = ep / ep_per_node;
  const int64_t experts_per_node = int64_t{experts / ep} * ep_per_node;
  const int64_t experts_per_group = experts / router.groups;
  if (nodes <= 1 || experts_per_node % experts_per_group != 0 || router.topk_groups >= nodes) return 0;
  return router.topk_groups;
}

TrainRouter::TrainRouter(const Experiment& e)
    : router_(e.router), workload_(e.workload), experts_(e.model.experts), top_k_(e.model.top_k),
      routed_micro_batches_(e.train.routed_micro_batches) {
  router_.capacity_scope = CapacityScope::batch;  // each source rank's segment is one capacity batch
  if (workload_.source == WorkloadSource::synthetic) bias_ = expert_popularity_bias(experts_, workload_.skew, workload_.seed);
}

void TrainRouter::check_model_workload() {
  switch (workload_.source) {
    case WorkloadSource::synthetic:
    case WorkloadSource::load_distribution:
      return;
    case WorkloadSource::load_profile:
      if (profile_.empty()) {
        const LoadProfile p = read_load_profile_file(workload_.path, workload_.format, workload_.profile_key, experts_,
                                                     workload_.expert_map, top_k_);
        profile_ = p.counts;
        profile_name_ = workload_.path;
        if (profile_.empty()) throw InputError(workload_.path + ": expected at least one layer of expert loads, got none");
      }
      return;
    default:
      throw ConfigError(std::string("workload.source: expected synthetic, load_profile or load_distribution with "
                                    "train.routing model (moesim train routes whole micro-batches of training tokens), "
                                    "got ") +
                        to_string(workload_.source));
  }
}

std::vector<int64_t> TrainRouter::kept_of(const std::vector<int64_t>& demand, int64_t capacity) const {
  std::vector<int64_t> kept = demand;
  if (capacity > 0)
    for (int64_t& k : kept) k = std::min(k, capacity);
  return kept;
}

const TrainRouter::Segment& TrainRouter::segment(bool forced, bool capped, int64_t local_tokens, int64_t index) {
  capped = capped && router_.capacity_factor > 0;
  Pool& pool = pools_[{forced, capped, local_tokens}];
  while (static_cast<int64_t>(pool.segments.size()) <= index) {
    const int64_t i = static_cast<int64_t>(pool.segments.size());
    RouterConfig cfg = router_;
    if (forced) cfg.gating = Gating::random;
    if (!capped) cfg.capacity_factor = 0;
    RouteRequest req;
    req.num_tokens = local_tokens;
    req.num_experts = experts_;
    req.top_k = top_k_;
    req.seed = counter_hash(workload_.seed, kStreamTrainSegment, static_cast<uint64_t>(i));
    std::vector<float> logits;
    if (!forced && cfg.gating != Gating::random && cfg.gating != Gating::balanced && cfg.gating != Gating::hash) {
      logits = synthetic_logits(local_tokens, experts_, 0.0, req.seed);
      for (int64_t t = 0; t < local_tokens; ++t)
        for (int e = 0; e < experts_; ++e) logits[static_cast<size_t>(t) * experts_ + e] += bias_[e];
      req.logits = logits.data();
    }
    const Routing r = route_ref(cfg, req, &pool.state);
    Segment s;
    count_loads(r, s.demand, s.kept);
    pool.segments.push_back(std::move(s));
    ++routed_segments_;
  }
  return pool.segments[static_cast<size_t>(index)];
}

// Routing is the cost of a training step's model: R micro-batches of an EP group's tokens. Bounded so that no layout
// runs for minutes: at most kMaxRoutedLogits logits (synthetic routing) or kMaxRoutedAssignments assignments.
constexpr double kMaxRoutedLogits = 1u << 30, kMaxRoutedAssignments = 1u << 31;

static void check_routing_size(const TrainLayout& layout, int micro_batches, double per_token, double limit, const char* what) {
  const double n = static_cast<double>(micro_batches) * static_cast<double>(layout.group_tokens) * per_token;
  if (n > limit)
    throw ConfigError("train.routed_micro_batches: expected at most " + fmt(limit) + " " + what + " routed (" +
                      std::to_string(micro_batches) + " micro-batches of " + std::to_string(layout.group_tokens) +
                      " tokens), got " + fmt(n) + "; route fewer micro-batches, or give the imbalance as "
                      "train.routing rank_overload:X");
}

TrainLoads TrainRouter::reference(const TrainLayout& layout) { return forced(layout, false); }

TrainLoads TrainRouter::forced(const TrainLayout& layout, bool capped) {
  check_routing_size(layout, routed_micro_batches_, top_k_, kMaxRoutedAssignments, "assignments");
  TrainLoads out;
  out.tokens = layout.group_tokens;
  out.top_k = top_k_;
  out.node_limit = train_node_limit(router_, experts_, layout);
  const int64_t per_source = capped ? expert_capacity(router_, layout.local_tokens, top_k_, experts_) : 0;
  out.capacity = per_source > 0 ? per_source * layout.ep_sources : 0;
  for (int i = 0; i < routed_micro_batches_; ++i) {
    MicroBatchLoads mb;
    mb.demand.assign(experts_, 0);
    mb.kept.assign(experts_, 0);
    for (int64_t j = 0; j < layout.ep_sources; ++j) {
      const Segment& s = segment(true, capped, layout.local_tokens, i * layout.ep_sources + j);
      for (int e = 0; e < experts_; ++e) {
        mb.demand[e] += s.demand[e];
        mb.kept[e] += s.kept[e];
      }
    }
    out.samples.push_back(std::move(mb));
  }
  out.description = "forced balance: each token's " + std::to_string(top_k_) + " experts uniformly at random "
                    "(Megatron-LM --moe-router-force-load-balancing)" +
                    (out.capacity > 0 ? ", capacity factor " + fmt(router_.capacity_factor) + " per source rank"
                                      : std::string(", dropless"));
  return out;
}

TrainLoads TrainRouter::loads(const TrainRouting& routing, const TrainLayout& layout) {
  TrainLoads out;
  out.tokens = layout.group_tokens;
  out.top_k = top_k_;
  out.node_limit = train_node_limit(router_, experts_, layout);
  const int64_t per_source = expert_capacity(router_, layout.local_tokens, top_k_, experts_);
  out.capacity = per_source > 0 ? per_source * layout.ep_sources : 0;
  const int64_t assignments = layout.group_tokens * top_k_;
  const int ep = layout.cfg.ep;
  const int R = routed_micro_batches_;
  const std::string cap = out.capacity > 0 ? ", capacity factor " + fmt(router_.capacity_factor) + " per source rank"
                                           : ", dropless";
  auto routed = [&]() {
    for (int i = 0; i < R; ++i) {
      MicroBatchLoads mb;
      mb.demand.assign(experts_, 0);
      mb.kept.assign(experts_, 0);
      for (int64_t j = 0; j < layout.ep_sources; ++j) {
        const Segment& s = segment(false, true, layout.local_tokens, i * layout.ep_sources + j);
        for (int e = 0; e < experts_; ++e) {
          mb.demand[e] += s.demand[e];
          mb.kept[e] += s.kept[e];
        }
      }
      out.samples.push_back(std::move(mb));
    }
  };
  switch (routing.kind) {
    case TrainRoutingKind::forced_balance:
      return forced(layout, true);
    case TrainRoutingKind::power_law:
      for (int i = 0; i < R; ++i) {
        MicroBatchLoads mb;
        mb.demand = power_law_loads(layout.group_tokens, experts_, top_k_, routing.value, ep, workload_.seed,
                                    static_cast<uint64_t>(i));
        mb.kept = kept_of(mb.demand, out.capacity);
        out.samples.push_back(std::move(mb));
      }
      out.description = "power law, alpha " + fmt(routing.value) + " (aiconfigurator's draws)" + cap;
      return out;
    case TrainRoutingKind::rank_overload: {
      const double x = routing.value;
      if (x > ep)
        throw ConfigError("train.routing: expected rank_overload:X with X at most train.ep (" + std::to_string(ep) +
                          "), got " + to_string(routing));
      const int per_rank = experts_ / ep;
      const int64_t mean = assignments / ep;
      const int64_t busiest = std::min<int64_t>(assignments, std::llround(x * static_cast<double>(assignments) / ep));
      if ((busiest + per_rank - 1) / per_rank > layout.group_tokens)
        throw ConfigError("train.routing: expected rank_overload:X with X at most experts / top_k (" +
                          fmt(static_cast<double>(experts_) / top_k_) +
                          ": a token takes an expert once), got " + to_string(routing));
      std::vector<int64_t> rank(ep, 0);
      rank[0] = busiest;
      const int64_t rest = assignments - busiest;
      for (int r = 1; r < ep; ++r) rank[r] = rest / (ep - 1) + (r - 1 < rest % (ep - 1) ? 1 : 0);
      if (ep == 1) rank[0] = assignments;
      MicroBatchLoads mb;
      mb.demand.assign(experts_, 0);
      for (int r = 0; r < ep; ++r)
        for (int j = 0; j < per_rank; ++j) mb.demand[r * per_rank + j] = rank[r] / per_rank + (j < rank[r] % per_rank ? 1 : 0);
      mb.kept = kept_of(mb.demand, out.capacity);
      out.samples.push_back(std::move(mb));
      out.description = "rank overload " + fmt(x) + ": the busiest of " + std::to_string(ep) + " EP ranks takes " +
                        fmt(x) + "x the mean " + std::to_string(mean) + " assignments" + cap;
      return out;
    }
    case TrainRoutingKind::model:
      break;
  }
  check_model_workload();
  switch (workload_.source) {
    case WorkloadSource::synthetic:
      check_routing_size(layout, R, experts_, kMaxRoutedLogits, "logits");
      routed();
      out.description = std::string("router ") + to_string(router_.gating) + " on synthetic logits (workload.skew " +
                        fmt(workload_.skew) + ", seed " + std::to_string(workload_.seed) + ")" + cap;
      break;
    case WorkloadSource::load_profile:
      for (const std::vector<int64_t>& counts : profile_) {
        MicroBatchLoads mb;
        mb.demand = scale_loads(counts, assignments);
        mb.kept = kept_of(mb.demand, out.capacity);
        out.samples.push_back(std::move(mb));
      }
      out.description = "recorded loads of " + profile_name_ + " (" + std::to_string(profile_.size()) +
                        " layers, scaled to the group's assignments)" + cap;
      break;
    case WorkloadSource::load_distribution:
      for (int i = 0; i < R; ++i) {
        MicroBatchLoads mb;
        mb.demand = workload_.distribution == LoadDistribution::balanced
                        ? balanced_round_robin_loads(layout.group_tokens, experts_, top_k_)
                        : power_law_loads(layout.group_tokens, experts_, top_k_, workload_.power_law_alpha, ep,
                                          workload_.seed, static_cast<uint64_t>(i));
        mb.kept = kept_of(mb.demand, out.capacity);
        out.samples.push_back(std::move(mb));
      }
      out.description = std::string("load distribution ") + to_string(workload_.distribution) + cap;
      break;
    default:
      break;  // refused by the constructor
  }
  return out;
}

}  // namespace moesim
