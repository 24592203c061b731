// Balance metrics of one routed batch (docs/design.md "Definitions"): loads, imbalance, drops, aux losses.
// Inputs: a Routing (assignments, kept mask) and optionally the router logits [num_tokens, num_experts].
// Host code, serial, double accumulators in a fixed order: the same input gives the same bits on any
// machine and thread count. Built by g++ only. Covered by tests/router/balance_metrics_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"
#include "router/routing.hpp"

namespace moesim {

// Every field is a report key of the same name. Conventions for degenerate inputs, chosen so that an
// empty batch reads as "nothing to be unbalanced" and never divides by zero:
//  - no kept assignment (sum(load) == 0, e.g. num_tokens == 0): imbalance 1, max_vio 0, cv 0, entropy_norm 1,
//    top20_share = bottom20_share = ceil(0.2 E) / E (the uniform share); same rule for demand_imbalance;
//  - num_tokens * top_k == 0: drop_rate 0 and utilization all 0;
//  - has_logits is false when logits were not given or num_tokens == 0; the four losses are then 0
//    and must not be reported.
struct BalanceMetrics {
  std::vector<int64_t> load;    // [num_experts] kept assignments per expert
  std::vector<int64_t> demand;  // [num_experts] assignments the gate asked of each expert
  double imbalance = 1.0;         // max(load) / mean(load), mean over all E experts
  // MaxVio (Wang et al. 2024, arXiv:2408.15664, eq. 6): (max(load) - mean(load)) / mean(load) on the same
  // loads; imbalance - 1 with the numerator in integers (exactly 0 when balanced), 0 for an empty batch.
  double max_vio = 0.0;
  double demand_imbalance = 1.0;  // same on demand
  double cv = 0.0;                // population std(load) / mean(load)
  double entropy_norm = 1.0;      // H(load / sum(load)) / ln E; E == 1 gives 1
  int active_experts = 0;         // experts with load > 0
  int dead_experts = 0;           // experts with load == 0 (num_experts - active_experts)
  int64_t capacity = 0;           // C per expert; 0 = dropless
  int64_t dropped = 0;            // sum(demand - load)
  double drop_rate = 0.0;         // dropped / (num_tokens * top_k)
  int64_t tokens_unrouted = 0;    // tokens with no kept assignment
  bool has_logits = false;        // the loss fields below are meaningful
  double aux_loss = 0.0;          // HF Mixtral form, k at perfect balance
  double aux_loss_switch = 0.0;   // Switch/Megatron form, 1 at perfect balance
  double aux_loss_gshard = 0.0;   // GShard top-1 form over each token's own top-1 expert, 1 at perfect balance
  double z_loss = 0.0;            // ST-MoE router z-loss
  int64_t padding_waste = 0;      // rows computed but empty under the layout
  double top20_share = 0.0;       // share of kept assignments on the ceil(0.2 E) most loaded experts
  double bottom20_share = 0.0;    // share on the ceil(0.2 E) least loaded experts
  std::vector<double> utilization;  // [num_experts] load[e] / (num_tokens * top_k / num_experts)
};

// Metrics of a routed batch. logits: [num_tokens, num_experts] row-major, or nullptr (no losses).
// layout/block_size choose padding_waste: dropless 0; block sum(round_up(load, block_size)) - sum(load);
// capacity E*C - sum(load), where C = r.capacity, or max(load) when r.capacity == 0 (the buffer a
// dropless capacity layout allocates, as DeepSpeed drop_tokens=False and Tutel capacity_factor=0 do);
// an expert holding more than C rows (per-sequence capacity) counts max(C, load[e]) rows.
// Requires: num_experts >= 1, top_k >= 1, num_tokens >= 0, parallel arrays of equal length, token ids in
// [0, num_tokens), expert ids in [0, num_experts), block_size >= 1 for the block layout.
BalanceMetrics compute_balance_metrics(const Routing& r, const float* logits, Layout layout,
                                       int block_size);

// What the losses need of the logits alone, which every strategy routing the same batch shares: each expert's
// softmax probability summed over the tokens, and the squared log-sum-exp summed (in token order, serially:
// the same bits wherever it is computed).
struct LogitStats {
  std::vector<double> prob_sum;  // [num_experts]
  double z_sum = 0.0;
  int64_t num_tokens = 0;
};
LogitStats logit_stats(const float* logits, int64_t num_tokens, int num_experts);
// compute_balance_metrics with the logits' statistics already taken (stats.num_tokens must be r's, and
// stats.prob_sum sized r.num_experts): the same metrics, without another pass over the logits.
BalanceMetrics compute_balance_metrics(const Routing& r, const LogitStats& stats, Layout layout, int block_size);

// Metrics of a per-expert load profile (no logits, no drops, dropless layout): load = demand, and
// every token is assumed routed. Requires load non-empty, entries >= 0, num_tokens >= 0, top_k >= 1.
BalanceMetrics metrics_from_loads(const std::vector<int64_t>& load, int64_t num_tokens, int top_k);

// Summary of a metric across layers or steps. Percentiles use the nearest-rank rule: p-th percentile
// = the ceil(p/100 * n)-th smallest value (1-based), so every reported value is one of the inputs.
// An empty input gives all zeros.
struct Aggregate {
  double mean = 0.0;
  double p50 = 0.0;
  double p95 = 0.0;
  double max = 0.0;
};
Aggregate aggregate(const std::vector<double>& values);

}  // namespace moesim
