// The modeled cost of one MoE layer for a routing's per-expert loads, on one device or expert-parallel
// over D devices (round-robin, a given map, or DeepSeek EPLB's global or hierarchical replication and
// packing), beside the same
// layer under perfectly balanced routing. Inputs: loads [num_experts]; outputs: LayerCost.
// Pure arithmetic, deterministic, host only. Covered by tests/cost/placement_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/all_to_all.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/roofline.hpp"

namespace moesim {

// Physical experts (replicas included) and the device each sits on. Under the global and hierarchical
// policies the slots are in EPLB's physical order (phy2log): device d holds slots [d S, (d + 1) S),
// S = (E + R) / D; under round_robin and map slot e is expert e.
struct ExpertPlacement {
  int num_devices = 1;
  int num_nodes = 1;
  std::vector<int32_t> replicas;  // [num_experts] physical copies of each logical expert (>= 1)
  std::vector<int32_t> expert;    // [num_physical] logical expert of each physical slot (EPLB's phy2log)
  std::vector<int32_t> device;    // [num_physical] device of each physical slot, in [0, num_devices)
  std::vector<int32_t> node;      // [num_physical] node of each slot's device, in [0, num_nodes)
  std::vector<double> plan_load;  // [num_physical] the planner's real-valued load: plan_load[e] / replicas[e]
  std::vector<int64_t> load;      // [num_physical] assignments each slot processes (integers, assign_load)
};

// The planner's load per device [num_devices] (sum of plan_load over each device's slots).
std::vector<double> device_plan_load(const ExpertPlacement& p);
// Slots that share their device with another replica of the same expert (EPLB's greedy allows it;
// placement.spread_replicas avoids it).
int colocated_replicas(const ExpertPlacement& p);
// mean / max of `v` (1 when every entry is 0): balancedness as vLLM's EPLB logs it.
double balancedness_of(const std::vector<double>& v);

// The placement with placement.groups resolved: 0 means router.groups (EPLB's groups are the routing
// groups).
PlacementConfig resolve_placement(const PlacementConfig& placement, const RouterConfig& router);

// Places experts for `plan_load` [num_experts] (docs/cost-model.md "Expert placement"):
//  - kind single: one device, one slot per expert;
//  - policy round_robin: slot e on device e % D (replicas must be 0);
//  - policy map: slot e on map[e] (replicas must be 0);
//  - policy global (DeepSeek EPLB rebalance_experts with one group and one node) and hierarchical
//    (groups packed onto nodes, then replication and packing within each node): see rebalance_eplb.
// Throws ConfigError naming the placement key when EPLB's preconditions fail (D must divide E + R,
// nodes must divide groups and devices, groups must divide E).
ExpertPlacement place_experts(const std::vector<int64_t>& plan_load, const PlacementConfig& placement);
// The same from real-valued loads (an exponential moving average); place_experts converts and calls it.
ExpertPlacement place_experts_real(const std::vector<double>& plan_load, const PlacementConfig& placement);

// DeepSeek EPLB (github.com/deepseek-ai/EPLB, eplb.py rebalance_experts_hierarchical), on real loads w [E]:
//  1. group g's load is the sum over its E / G contiguous experts; balanced_packing puts the G groups on
//     the N nodes, G / N each; node n's experts are numbered in the order its groups were packed;
//  2. per node, replicate_experts gives each of its (E + R) / N - E / N extra slots, in turn, to the
//     expert with the highest w / replicas (ties: the lower number); the node's slots are its experts,
//     then the extras in the order made;
//  3. per node, balanced_packing puts the slots (weight w / replicas) on its D / N devices, S each.
// balanced_packing (n items onto m packs of n / m): when n / m == 1, item i goes to pack i without
// sorting; else items by weight, heaviest first (ties: the lower item, a stable sort), each onto the
// lightest pack that still has room (ties: the lower pack); the item's slot in its pack is the order it
// arrived. With spread, a pack that already holds the item's expert is skipped while another has room,
// and replicate_experts gives an expert at most D / N replicas.
ExpertPlacement rebalance_eplb(const std::vector<double>& w, int num_physical, int num_groups, int num_nodes,
                               int num_devices, bool spread);

// Re-splits `load` [num_experts] over an existing placement's replicas: each expert's load / r per
// replica, the first load % r of its slots (in slot order) one more, so that executed splits stay integers.
void assign_load(ExpertPlacement& placement, const std::vector<int64_t>& load);

struct LayerCostInput {
  int64_t hidden = 0, ffn = 0;      // the model's real expert size
  int num_experts = 0, top_k = 0, shared_experts = 0;
  // The experts' format; its dtype is also the activations' (the all-to-all and all-reduce move these).
  ExpertFormat format = Dtype::bf16;
  int64_t num_tokens = 0;           // N tokens in the batch
  std::vector<int64_t> load;        // [num_experts] kept assignments per expert
  Layout layout = Layout::dropless;
  int64_t capacity = 0;             // C per expert; 0 = dropless (capacity layout then uses max(load))
  int block_size = 64;              // block layout rows per block
  PlacementConfig placement;
  std::vector<double> placement_load;   // [num_experts] loads the placement is planned from; empty = load
  // Assignments the routing owed and did not deliver (undelivered_assignments): costed as dropped work.
  int64_t undelivered = 0;
  // The all-to-all's fan-out (all_to_all.hpp): nodes a token's experts may span (0: any; layer_cost_input
  // sets router.topk_groups for group-limited routing whose groups the hierarchical placement packs onto
  // nodes), and how a token's assignments spread (random: drawn by the loads).
  int node_limit = 0;
  A2aFanout fanout = A2aFanout::random;
  // Compute outside the MoE layer that two-batch overlap also hides the all-to-all under (the decoder's
  // attention of the layer, both micro-batches); 0: the experts alone.
  double overlap_compute_s = 0;
  // Batch sizes the headline's imbalance parts are averaged over (the tile phase, Erosion::tile_phase_s):
  // kTilePhasePoints by default, 1 for the exact batch alone.
  int tile_phase_points = kTilePhasePoints;
  static constexpr int kTilePhasePoints = 16;
};

// `assignments` spread evenly over the experts (floor/ceil, the first ones one more): [num_experts], the `balanced`
// gating's loads, uncapped. experts (when given, [num_experts] of 0/1): over the marked experts only, the others idle.
std::vector<int64_t> even_loads(int num_experts, int64_t assignments, const std::vector<char>* experts = nullptr);

// Assignments a routing owed and did not deliver: max(dropped, top_k x tokens_unrouted). Token-choice
// drops count every lost assignment (an unrouted token's k among them); expert choice drops nothing
// it was asked for, but leaves tokens with no expert, each owed k.
inline int64_t undelivered_assignments(int64_t dropped, int64_t tokens_unrouted, int top_k) {
  return std::max<int64_t>(dropped, static_cast<int64_t>(top_k) * tokens_unrouted);
}

// Where a modeled MoE layer's time goes (docs/design.md "erosion", docs/cost-model.md "Erosion"), in seconds
// of the prediction's column (quantized). Staged on one placement:
//   reference  = the delivered assignments balanced over the experts (the `balanced` gating's loads),
//                placed by the placement's rule as balanced loads would be planned, ideal roofline, experts
//                only (no all-to-all);
//   A          = the delivered assignments balanced over the experts the routing activated (load > 0), the
//                others idle, on the reference's plan, ideal, experts only;
//   T1         = the routing's loads on the plan they ran on, ideal, experts only;
//   T2         = the layout's rows (capacity, block), ideal, experts only;
//   T3         = the layout's rows, quantized (tiles, waves, launches), experts only, the whole batch at once;
//   X          = the experts as run: T3, or under two-batch overlap the two micro-batches one after the other;
//   actual     = X + the communication the layer waits for (the all-to-all, exposed past the other
//                micro-batch's compute under two-batch overlap, and the tensor-parallel all-reduce)
//              = LayerCost::actual.quantized_s.
// parts, each defined by what would change if its cause went away (Q the kernel model's experts-only time of
// dropless rows: Q(loads) the loads as routed, Q(A) and Q(balanced) the counterfactuals above):
//   idle_saving = Q(A) - Q(balanced): what skew saves (or, rarely, costs) by leaving experts idle, whose weights
//                 and row tiles a balanced routing pays: negative at small batches, 0 once every expert is active;
//   imbalance = T1 - A: the straggler on the roofline, the device with the most rows;
//   imbalance_tiles = (Q(loads) - T1) - (Q(A) - A): the tiles, waves, K-step floor and overlap the skew adds
//                 beyond what the same assignments spread over the same active experts pay;
//   communication_imbalance = the routing's waited-for communication minus that of the same delivered
//                 assignments balanced: what the skew of the received copies adds (the busiest receiver);
//   padding = T2 - T1, quantization = (T3 - T2) - (Q(loads) - T1) + (Q(balanced) - reference) (the tiles, waves,
//   floors and launches balanced loads pay too), micro_batch = X - T3, communication = the balanced
//   counterfactual's waited-for communication.
// Those four imbalance parts are exactly 0 under balanced routing. In a LayerCost's headline erosion each of them
// is its expectation over the tile phase (model_moe_layer), and tile_phase = the exact batch's four parts
// minus those expectations: the row tiles this exact batch size happens to cost or save beyond the average over
// nearby batches. The parts sum to actual - reference up to rounding.
// dropped_work = the ideal balanced time of delivered + undelivered assignments minus the reference: work
// not done, never speed.
struct Erosion {
  double reference_s = 0, actual_s = 0;
  double loads_s = 0;      // T1: the routing's loads on the ideal roofline (roofline_efficiency)
  double idle_saving_s = 0, imbalance_s = 0, imbalance_tiles_s = 0, communication_imbalance_s = 0;
  double tile_phase_s = 0;
  double padding_s = 0, quantization_s = 0, micro_batch_s = 0, communication_s = 0;
  double dropped_work_s = 0;
  double delivered = 0;    // assignments processed (sum of the loads)
  double undelivered = 0;  // assignments owed and not processed (undelivered_assignments)
  double served = 0;       // N k - undelivered: the owed assignments this routing served
  // actual / served: the ranking key, so that dropped work and unrouted tokens count against a routing
  // (infinite when nothing is served).
  double time_per_served_s() const;
};

// What imbalance costs in an erosion: the straggler on the roofline, its tiles and the communication it
// lengthens (imbalance + imbalance_tiles + communication_imbalance), apart from what it saves.
inline double imbalance_cost_s(const Erosion& x) {
  return x.imbalance_s + x.imbalance_tiles_s + x.communication_imbalance_s;
}
// What imbalance costs net of what it saves: imbalance_cost_s + idle_saving_s (the balanced counterfactual's
// time is actual - imbalance_total_s).
inline double imbalance_total_s(const Erosion& x) { return imbalance_cost_s(x) + x.idle_saving_s; }

// The size a layer is costed at: the model's real dimensions and dtype, or the executed ones
// (execute.hidden, execute.ffn, execute.dtype).
enum class CostedSize { model, executed };

// An experiment's MoE layer for one routed batch: the expert shape at `size`, experts, top_k and shared
// experts of the model, the router's layout, capacity and block size, the batch's loads; single device
// (set placement and placement_load for expert parallelism).
LayerCostInput layer_cost_input(const Experiment& e, const RouterConfig& router, CostedSize size, int64_t num_tokens,
                                std::vector<int64_t> load, int64_t capacity);

struct LayerCost {
  CostBreakdown actual, balanced;   // the layer's time with the routing's loads / with balanced loads (N k)
  // Where actual.quantized_s goes, against the balanced ideal: the headline, its imbalance parts the
  // expectation over the tile phase (tile_phase_s holds this batch's difference from it).
  Erosion erosion;
  Erosion erosion_exact;            // the same for this exact batch size (tile_phase_s 0)
  // The headline's net effect of imbalance: the balanced counterfactual's time over the routing's own,
  // (actual - imbalance_total_s) / actual (1 when actual is 0), on the headline erosion. Free of drops (the
  // counterfactual has the delivered assignments); a tile step balanced loads pay too is not imbalance.
  // Above 1 when what skew saves (idle experts' weights) outweighs what it costs.
  double batching_efficiency = 1.0;
  double batching_efficiency_exact = 1.0;  // the same on erosion_exact
  // The same on the ideal roofline alone: reference / (reference + imbalance) (1 when both are 0).
  double roofline_efficiency = 1.0;
  double compute_bound_experts = 0; // physical experts whose ideal t(n) is compute-bound (actual loads)
  std::vector<double> device_time_s;    // [devices] quantized expert time per device (no all-to-all)
  std::vector<int64_t> device_tokens;   // [devices] routed assignments processed per device
  double rank_imbalance = 1.0;      // max / mean of device_tokens (1 when all are 0)
  double balancedness = 1.0;        // mean / max of device_tokens, its inverse
  A2aCost a2a;                      // the whole batch's dispatch and combine (expert parallel)
  double all_to_all_s = 0.0;        // dispatch + combine as run, quantized (both micro-batches under overlap)
  double exposed_communication_s = 0.0;  // the part of all_to_all_s the layer waits for
  double dispatch_s = 0.0, combine_s = 0.0;  // all_to_all_s's two phases (both micro-batches under overlap)
  double all_to_all_bytes = 0.0;    // bytes that leave their device, dispatch + combine
  double tensor_parallel_reduce_s = 0.0;  // the all-reduce of placement.tensor_parallel, quantized (with latency)
  // Expert parallel: the plan the actual loads ran on (planned from placement_load), the planner's
  // real-valued load per device, and its predicted balancedness (mean / max of that load) beside the
  // realised one (balancedness, from device_tokens).
  ExpertPlacement placement;
  std::vector<double> device_plan_load;  // [devices]
  double predicted_balancedness = 1.0;
};

// acc += f x every field of x (means over records, whole-model totals over layers).
void add_scaled(Erosion& acc, const Erosion& x, double f);

// batching_efficiency from an erosion: (actual - imbalance_total_s) / actual, 1 when actual is 0.
double efficiency_of(const Erosion& erosion);
// roofline_efficiency from an erosion: reference / T1 (loads_s), 1 when both are 0.
double roofline_efficiency_of(const Erosion& erosion);
// What imbalance costs (imbalance_cost_s) and saves (-idle_saving_s, positive when it saves) as fractions of
// the layer's time (0 when actual is 0).
double imbalance_cost_fraction(const Erosion& erosion);
double idle_saving_fraction(const Erosion& erosion);

// The MoE layer's modeled time (docs/design.md "Cost model"):
//  - rows per expert by layout: dropless n = load; block n = round_up(load, block_size); capacity
//    n = max(C, load) for every expert, idle ones included (C = capacity, or max(load) when 0);
//  - shared experts process every token: N rows on one device, the device's N / D local tokens in EP;
//  - one device: the grouped kernel of GroupedCost;
//  - expert parallel: max over devices of each device's grouped kernel, plus the all-to-all of
//    placement.a2a_kernel (all_to_all.hpp: the copies each kernel moves over the scale-up link and the NIC,
//    each phase its kernel's floor, latency and the busiest device's transfer; dispatch and combine costed
//    apart, each copy a2a_copy_bytes of placement.dispatch_dtype / combine_dtype). Tokens start spread
//    evenly over the devices (data-parallel attention). placement.overlap two_batch runs the batch as two
//    micro-batches, each with its own kernels and all-to-all, and waits only for the communication that both
//    micro-batches' experts (and overlap_compute_s) do not hide. The ideal column omits floors and latency.
//  - balanced: the same N, k, E with loads floor/ceil(N k / E) (the `balanced` gating: expert e gets
//    one extra when e < N k mod E), capped at C when capacity > 0, on the plan the placement's policy makes
//    from those balanced loads: never on the plan made for the routing's own (skewed) loads.
//  - the headline erosion's imbalance parts are their expectation over the tile phase (tile_phase_batches:
//    the loads scaled to nearby batch sizes, on the same plans); erosion_exact keeps this batch's.
//  - tensor parallel (placement.tensor_parallel T > 1): every expert's ffn is split over T GPUs, so each
//    GPU's grouped kernel runs the expert shape (hidden, ceil(ffn / T)) on all the rows, and the partial
//    outputs are summed by a ring all-reduce over the link (Megatron-LM's row-parallel linear; vLLM's
//    tensor-parallel fused MoE reduces the layer's output): 2 (T - 1) / T x rows x hidden x act_bytes,
//    plus one link latency outside the ideal column; rows = the batch's N tokens on one device, the most
//    rows any expert-parallel device (a group of T GPUs) holds otherwise. Balanced and actual alike; the
//    erosion counts it as communication.
// Throws ConfigError when the profile lacks what the placement needs (a peak for dtype, link bandwidth).
LayerCost model_moe_layer(const HardwareProfile& hw, const LayerCostInput& in);

// The tile phase (docs/cost-model.md "The tile phase"): a grouped GEMM pads each expert's rows to its row tile
// and runs its tiles in whole waves, so the time of skewed loads against balanced ones jumps as the batch crosses
// tile and wave boundaries (at 4096 tokens Mixtral's balanced share is exactly 8 tiles of 128 rows and any skew
// pays a ninth; at 4160 it costs nothing more). A serving batch moves every step, so the headline averages each
// imbalance part's share of the layer over tile_phase_points batch sizes spread evenly over the window in which a
// device's quantization repeats, around N: w rows per expert = max(tile_m, ceil(SMs / c) tile_m / s), c the column
// tiles of the device's narrower GEMM and s its expert slots; N + h ((2 j + 1) / P - 1), j < P,
// h = min(w E / (2 k), N / 2) tokens, at least 1. Empty (the exact batch alone) for one point, no tokens, or a
// kernel without row tiles (tile_m < 16: a CPU).
std::vector<int64_t> tile_phase_batches(const ExpertRoofline& rm, const LayerCostInput& in);

// `load` [E] of a batch of num_tokens scaled to one of to_tokens: every load times to_tokens / num_tokens, the
// total rounded to nearest, floors first and the remainder to the largest fractions (ties: the lower expert);
// balanced loads (max - min <= 1) become the `balanced` gating's split of the scaled total.
std::vector<int64_t> scale_loads_to(const std::vector<int64_t>& load, int64_t num_tokens, int64_t to_tokens);

}  // namespace moesim
