// The routing of a training step (docs/training.md "Routing in training"): each micro-batch of an
// expert-parallel group routes its own tokens, as ep x etp source ranks of local_tokens tokens each, and every
// source rank caps each expert at its own capacity (Megatron-Core's topk_softmax_with_capacity runs on the rank's
// tokens before the dispatch), so a group's expert takes at most ep etp C rows, C = the router's capacity of
// local_tokens tokens. The loads come from train.routing:
//  model          - synthetic workloads: the experiment's router (route_ref) on N(0, 1) + popularity-bias logits
//                   (synthetic_logits.hpp; the bias of workload.skew and workload.seed, one per run, so every
//                   micro-batch shares the popular experts), one routing per source rank; load_profile: each recorded
//                   layer's counts scaled to the group's assignments; load_distribution: its draws;
//  forced_balance - the `random` gating (every token k distinct experts uniformly at random): what Megatron-LM's
//                   --moe-router-force-load-balancing does by replacing the logits with N(0, 1) draws;
//  power_law      - aiconfigurator's power-law draws (load_distribution.hpp);
//  rank_overload  - the busiest EP rank X times the mean, the others the rest, each rank's experts even.
// Loads that are not routed token by token (load profiles, draws, rank overloads) are capped at the group's total
// capacity ep etp C per expert. A TrainRouter routes each (routing, local_tokens) source-rank segment once and
// keeps it, so that layouts sharing a segment size cost many times from one routing (route once, cost many).
// Deterministic: every draw is keyed on workload.seed and the segment's index. Host only.
// Covered by tests/train/train_routing_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "router/route.hpp"
#include "src/config/experiment.hpp"
#include "src/train/train_input.hpp"

namespace moesim {

// One routed micro-batch of one MoE layer's expert-parallel group.
struct MicroBatchLoads {
  std::vector<int64_t> demand;  // [experts] assignments the router asked of each expert
  std::vector<int64_t> kept;    // [experts] assignments each expert processes (<= demand)
};

struct TrainLoads {
  std::vector<MicroBatchLoads> samples;  // the micro-batches routed; every MoE layer of every micro-batch draws one
  int64_t capacity = 0;        // rows per expert of the capacity layout: ep etp C; 0 = dropless
  int64_t tokens = 0;          // the group's tokens per micro-batch (layout.group_tokens)
  int top_k = 1;
  // Nodes a token's experts may span (group-limited routing whose groups fill whole nodes); 0: any.
  int node_limit = 0;
  std::string description;     // what the loads are, as the reports print it
};

// The nodes a token's experts may span under `router` with `layout`'s EP ranks on nodes of devices_per_node
// GPUs: router.topk_groups when the gating limits groups (group_limited, aux_free_bias with topk_groups < groups)
// and each node's experts are whole groups; 0 otherwise.
int train_node_limit(const RouterConfig& router, int experts, const TrainLayout& layout);

class TrainRouter {
 public:
  // The experiment's router, workload, experts and top_k.
  explicit TrainRouter(const Experiment& e);
  // The loads of `routing` for one EP group of `layout`: train.routed_micro_batches micro-batches (a load profile:
  // its layers; rank_overload: one). Throws ConfigError naming train.routing when a rank overload cannot be
  // carried (X above ep, or an expert above the group's tokens), naming workload.source for a workload train
  // cannot route with routing model (decoder, trace, logits); a load profile is read at its first use
  // (InputError naming the file).
  TrainLoads loads(const TrainRouting& routing, const TrainLayout& layout);
  // The erosion's reference for `layout`: forced balance, dropless (router.capacity_factor 0), whatever the
  // router's capacity; its segments are shared with loads(forced_balance) when the router drops nothing.
  TrainLoads reference(const TrainLayout& layout);
  // Source-rank segments routed so far (each routed once; the benchmark counts them).
  int64_t routed_segments() const { return routed_segments_; }

 private:
  struct Segment {
    std::vector<int64_t> demand, kept;
  };
  struct Pool {
    RouterState state;  // aux_free_bias carries its bias from segment to segment, in index order
    std::vector<Segment> segments;
  };
  // Segment `index` of the pool of (forced, capped, local_tokens): routed by the router (or the `random` gating
  // when forced), with its capacity when capped.
  const Segment& segment(bool forced, bool capped, int64_t local_tokens, int64_t index);
  TrainLoads forced(const TrainLayout& layout, bool capped);
  void check_model_workload();
  std::vector<int64_t> kept_of(const std::vector<int64_t>& demand, int64_t capacity) const;

  RouterConfig router_;
  WorkloadConfig workload_;
  int experts_ = 0, top_k_ = 0;
  int routed_micro_batches_ = 1;
  std::vector<float> bias_;                         // [experts] the popularity bias of workload.skew
  std::vector<std::vector<int64_t>> profile_;       // load_profile: [layers][experts]
  std::string profile_name_;
  std::map<std::tuple<bool, bool, int64_t>, Pool> pools_;  // (forced, capped, local_tokens)
  int64_t routed_segments_ = 0;
};

}  // namespace moesim
