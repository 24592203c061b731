// Expert placement (single; expert parallel round-robin, map, or DeepSeek EPLB's global and hierarchical
// replication + packing) and the modeled MoE layer cost for actual and balanced loads. The single-device path allocates nothing but the two one-element
// output vectors, so the model can be evaluated millions of times per second inside sweeps.
// Deterministic: every tie is broken by the lower index. Host only. Covered by tests/cost/placement_test.cpp.
#include "src/cost/placement.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "src/common/error.hpp"

namespace moesim {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows an expert (or one of its r replicas) occupies under the layout.
struct LayoutRule {
  Layout layout;
  int block_size;
  int64_t capacity;  // resolved C (> 0) for the capacity layout

  int64_t rows(int64_t load, int replicas) const {
    switch (layout) {
      case Layout::dropless: return load;
      case Layout::block: return ceil_div(load, block_size) * block_size;
      case Layout::capacity: return std::max(ceil_div(capacity, replicas), load);
    }
    return load;
  }
};

// The `balanced` gating's loads: floor/ceil(N k / E), the first (N k mod E) experts one more, capped at C.
struct BalancedLoads {
  int64_t base, rem, cap;
  BalancedLoads(int64_t total, int num_experts, int64_t capacity)
      : base(total / num_experts), rem(total % num_experts),
        cap(capacity > 0 ? capacity : std::numeric_limits<int64_t>::max()) {}
  int64_t operator()(int e) const { return std::min(base + (e < rem ? 1 : 0), cap); }
};

void split_load(const ExpertPlacement& p, const std::vector<int64_t>& load, std::vector<int64_t>& out) {
  std::vector<int32_t> seen(p.replicas.size(), 0);
  out.resize(p.expert.size());
  for (size_t i = 0; i < p.expert.size(); ++i) {
    const int e = p.expert[i];
    const int64_t r = p.replicas[e];
    const int j = seen[e]++;
    out[i] = load[e] / r + (j < load[e] % r ? 1 : 0);
  }
}

// The all-to-all traffic of a batch whose assignments sit on the devices as `device_tokens` [devices].
// The node limit holds only where the placement's nodes are the machine's (a hierarchical placement over
// placement.nodes nodes of hardware.devices_per_node devices each).
A2aTraffic traffic_of(const HardwareProfile& hw, const LayerCostInput& in, const std::vector<int64_t>& device_tokens,
                      int64_t num_tokens) {
  A2aTraffic t;
  t.device_assignments = device_tokens;
  t.num_tokens = num_tokens;
  t.top_k = in.top_k;
  t.num_experts = in.num_experts;
  const int D = static_cast<int>(device_tokens.size());
  const int per_node = hw.devices_per_node > 0 ? std::min(hw.devices_per_node, D) : D;
  const bool aligned = in.placement.policy != PlacementPolicy::hierarchical || D == in.placement.nodes * per_node;
  t.node_limit = aligned ? in.node_limit : 0;
  t.fanout = in.fanout;
  t.dispatch_bytes = a2a_copy_bytes(in.placement.dispatch_dtype, in.format.dtype, in.hidden);
  t.combine_bytes = a2a_copy_bytes(in.placement.combine_dtype, in.format.dtype, in.hidden);
  return t;
}

// The all-reduce of tensor parallelism (model_moe_layer): a ring over T GPUs moves 2 (T - 1) / T of the
// [rows, hidden] partial outputs through each GPU's link; latency outside the ideal column. Zero for T 1.
CostBreakdown tensor_parallel_reduce(const HardwareProfile& hw, int tp, int64_t rows, int64_t hidden, Dtype dtype) {
  CostBreakdown c;
  if (tp <= 1 || rows <= 0) return c;
  if (hw.link_bandwidth_bytes_per_s <= 0) {
    throw ConfigError(hw.name + ": hardware.link_bandwidth_gbs: expected a positive number for "
                      "placement.tensor_parallel " + std::to_string(tp) + " (its all-reduce crosses the link), got none");
  }
  const double bytes = 2.0 * (tp - 1) / tp * static_cast<double>(rows) * static_cast<double>(hidden) * dtype_bytes(dtype);
  c.ideal_s = bytes / hw.link_bandwidth_bytes_per_s;
  c.quantized_s = c.ideal_s + hw.link_latency_s;
  return c;
}

void add_to(CostBreakdown& acc, const CostBreakdown& x) {
  acc.ideal_s += x.ideal_s;
  acc.quantized_s += x.quantized_s;
}

struct PlacedCost {
  CostBreakdown experts;   // max over devices of each device's grouped kernel (no all-to-all)
  std::vector<double> device_time_s;
  std::vector<int64_t> device_tokens;
  double compute_bound = 0;
};

PlacedCost cost_placed(const ExpertRoofline& rm, const ExpertPlacement& p,
                       const LayoutRule& rule, const LayerCostInput& in) {
  const int num_devices = p.num_devices;
  std::vector<GroupedCost> groups(num_devices, GroupedCost(rm));
  PlacedCost out;
  out.device_tokens.assign(num_devices, 0);
  int64_t compute_bound = 0;
  for (size_t i = 0; i < p.expert.size(); ++i) {
    const int64_t rows = rule.rows(p.load[i], p.replicas[p.expert[i]]);
    groups[p.device[i]].add(rows);
    compute_bound += rm.compute_bound(rows) ? 1 : 0;
    out.device_tokens[p.device[i]] += p.load[i];
  }
  out.compute_bound = static_cast<double>(compute_bound);
  // Shared experts run on each device's local tokens (N / D, the first N mod D devices one more).
  for (int d = 0; d < num_devices; ++d) {
    const int64_t local = in.num_tokens / num_devices + (d < in.num_tokens % num_devices ? 1 : 0);
    for (int s = 0; s < in.shared_experts; ++s) groups[d].add(local);
  }
  out.device_time_s.assign(num_devices, 0.0);
  for (int d = 0; d < num_devices; ++d) {
    const CostBreakdown c = groups[d].time();
    out.experts.ideal_s = std::max(out.experts.ideal_s, c.ideal_s);
    out.experts.quantized_s = std::max(out.experts.quantized_s, c.quantized_s);
    out.device_time_s[d] = c.quantized_s;
  }
  return out;
}

// One placed batch as the layer runs it: its experts (once, or as two micro-batches) and its all-to-all
// (exposed: under two-batch overlap, what the other micro-batch's compute does not hide).
struct RunCost {
  PlacedCost full;            // the whole batch at once (the erosion's stages)
  CostBreakdown experts;      // the experts as run: full, or the two micro-batches one after the other
  A2aCost a2a;                // the whole batch's all-to-all (the JSON's all_to_all)
  double communication_s = 0, communication_ideal_s = 0;  // the all-to-all as run, both micro-batches
  double dispatch_s = 0, combine_s = 0;                   // its phases as run
  double exposed_s = 0, exposed_ideal_s = 0;              // what the layer waits for
};

// Half of a placement's rows for a micro-batch: slot loads ceil (first) or floor (second) of half.
ExpertPlacement half_of(const ExpertPlacement& p, bool first) {
  ExpertPlacement h = p;
  for (int64_t& l : h.load) l = first ? (l + 1) / 2 : l / 2;
  return h;
}

RunCost run_placed(const HardwareProfile& hw, const ExpertRoofline& rm, const ExpertPlacement& p,
                   const LayoutRule& rule, const LayerCostInput& in) {
  RunCost r;
  r.full = cost_placed(rm, p, rule, in);
  r.a2a = all_to_all(hw, in.placement.a2a_kernel, traffic_of(hw, in, r.full.device_tokens, in.num_tokens));
  if (in.placement.overlap == A2aOverlap::none || p.num_devices <= 1) {
    r.experts = r.full.experts;
    r.communication_s = r.exposed_s = r.a2a.time_s();
    r.communication_ideal_s = r.exposed_ideal_s = r.a2a.ideal_s();
    r.dispatch_s = r.a2a.dispatch.time_s;
    r.combine_s = r.a2a.combine.time_s;
    return r;
  }
  // Two-batch overlap: micro-batch 0 holds ceil(N / 2) tokens and ceil(load / 2) of every slot, micro-batch
  // 1 the rest; each runs its own grouped kernels and all-to-all. In steady state the compute stream runs
  // both micro-batches' experts (and the attention the caller names) while the communication stream runs
  // both all-to-alls: the layer waits for communication only past the compute.
  for (int b = 0; b < 2; ++b) {
    LayerCostInput half = in;
    half.num_tokens = b == 0 ? (in.num_tokens + 1) / 2 : in.num_tokens / 2;
    LayoutRule half_rule = rule;
    half_rule.capacity = b == 0 ? (rule.capacity + 1) / 2 : rule.capacity / 2;
    const PlacedCost c = cost_placed(rm, half_of(p, b == 0), half_rule, half);
    r.experts.ideal_s += c.experts.ideal_s;
    r.experts.quantized_s += c.experts.quantized_s;
    const A2aCost a = all_to_all(hw, in.placement.a2a_kernel, traffic_of(hw, half, c.device_tokens, half.num_tokens));
    r.communication_s += a.time_s();
    r.communication_ideal_s += a.ideal_s();
    r.dispatch_s += a.dispatch.time_s;
    r.combine_s += a.combine.time_s;
  }
  r.exposed_s = std::max(0.0, r.communication_s - r.experts.quantized_s - in.overlap_compute_s);
  r.exposed_ideal_s = std::max(0.0, r.communication_ideal_s - r.experts.ideal_s - in.overlap_compute_s);
  return r;
}

}  // namespace

std::vector<int64_t> even_loads(int num_experts, int64_t assignments, const std::vector<char>* experts) {
  std::vector<int64_t> out(num_experts, 0);
  int count = num_experts;
  if (experts) count = static_cast<int>(std::count(experts->begin(), experts->end(), char{1}));
  if (count == 0) return out;
  const int64_t base = assignments / count, rem = assignments % count;
  int i = 0;
  for (int e = 0; e < num_experts; ++e) {
    if (experts && !(*experts)[e]) continue;
    out[e] = base + (i++ < rem ? 1 : 0);
  }
  return out;
}

namespace {

// Dropless rows `loads` [num_experts], experts only (shared experts on their tokens): on one device, or on
// `plan` (expert parallel) with the loads re-split over its replicas.
CostBreakdown experts_only(const ExpertRoofline& rm, const LayerCostInput& in, const std::vector<int64_t>& loads,
                           const ExpertPlacement* plan) {
  const LayoutRule dropless{Layout::dropless, 1, 0};
  if (plan == nullptr) {
    GroupedCost g(rm);
    for (int e = 0; e < in.num_experts; ++e) g.add(loads[e]);
    for (int s = 0; s < in.shared_experts; ++s) g.add(in.num_tokens);
    return g.time();
  }
  ExpertPlacement p = *plan;
  assign_load(p, loads);
  return cost_placed(rm, p, dropless, in).experts;
}

// Fills the erosion stages around the prediction (see Erosion): `loads` the experts-only columns of the
// loads as routed, dropless rows (T1 ideal, Q(loads) quantized), `layout` those at the layout's rows (T2
// ideal, T3 quantized), `run_s` the experts as run (T3, or the two micro-batches), `communication_s` the
// communication the layer waits for with the routing's loads and `balanced_communication_s` with the same
// delivered assignments balanced; actual = run_s + communication_s. `plan`: the plan balanced loads get
// (expert parallel; nullptr on one device), on which the reference, A and the dropped work are costed.
Erosion erosion_of(const ExpertRoofline& rm, const LayerCostInput& in, int64_t delivered,
                   const CostBreakdown& loads, const CostBreakdown& layout, double run_s, double communication_s,
                   double balanced_communication_s, const ExpertPlacement* plan) {
  Erosion x;
  x.delivered = static_cast<double>(delivered);
  x.undelivered = static_cast<double>(in.undelivered);
  x.served = static_cast<double>(std::max<int64_t>(0, in.num_tokens * in.top_k - in.undelivered));
  const CostBreakdown balanced = experts_only(rm, in, even_loads(in.num_experts, delivered, nullptr), plan);
  std::vector<char> active(in.num_experts);
  for (int e = 0; e < in.num_experts; ++e) active[e] = in.load[e] > 0 ? 1 : 0;
  const CostBreakdown on_active = experts_only(rm, in, even_loads(in.num_experts, delivered, &active), plan);
  x.reference_s = balanced.ideal_s;
  x.loads_s = loads.ideal_s;
  x.actual_s = run_s + communication_s;
  // Q(A) - Q(balanced): the idle experts' weights and row tiles, both columns of the kernel model.
  x.idle_saving_s = on_active.quantized_s - balanced.quantized_s;
  x.imbalance_s = loads.ideal_s - on_active.ideal_s;
  x.imbalance_tiles_s = (loads.quantized_s - loads.ideal_s) - (on_active.quantized_s - on_active.ideal_s);
  x.padding_s = layout.ideal_s - loads.ideal_s;
  // The tiles, waves and floors balanced loads pay too: T3 - T2 less what the skew moves in them,
  // (Q(loads) - Q(balanced)) - (T1 - reference).
  x.quantization_s = (layout.quantized_s - layout.ideal_s) - ((loads.quantized_s - balanced.quantized_s) -
                                                              (loads.ideal_s - x.reference_s));
  x.micro_batch_s = run_s - layout.quantized_s;
  x.communication_s = balanced_communication_s;
  x.communication_imbalance_s = communication_s - balanced_communication_s;
  if (in.undelivered > 0) {
    x.dropped_work_s =
        experts_only(rm, in, even_loads(in.num_experts, delivered + in.undelivered, nullptr), plan).ideal_s -
        x.reference_s;
  }
  return x;
}

void validate(const LayerCostInput& in) {
  MOESIM_REQUIRE(in.num_experts >= 1, "num_experts must be >= 1, got " << in.num_experts);
  MOESIM_REQUIRE(in.top_k >= 1 && in.top_k <= in.num_experts,
                 "top_k must be in [1, num_experts = " << in.num_experts << "], got " << in.top_k);
  MOESIM_REQUIRE(in.shared_experts >= 0, "shared_experts must be >= 0, got " << in.shared_experts);
  MOESIM_REQUIRE(in.num_tokens >= 0, "num_tokens must be >= 0, got " << in.num_tokens);
  MOESIM_REQUIRE(static_cast<int>(in.load.size()) == in.num_experts,
                 "load has " << in.load.size() << " entries, expected num_experts = " << in.num_experts);
  for (int e = 0; e < in.num_experts; ++e) MOESIM_REQUIRE(in.load[e] >= 0, "load[" << e << "] is negative");
  MOESIM_REQUIRE(in.placement_load.empty() || static_cast<int>(in.placement_load.size()) == in.num_experts,
                 "placement_load has " << in.placement_load.size() << " entries, expected " << in.num_experts);
  MOESIM_REQUIRE(in.capacity >= 0, "capacity must be >= 0, got " << in.capacity);
  MOESIM_REQUIRE(in.layout != Layout::block || in.block_size >= 1, "block layout needs block_size >= 1");
  MOESIM_REQUIRE(in.undelivered >= 0, "undelivered must be >= 0, got " << in.undelivered);
}

}  // namespace

double Erosion::time_per_served_s() const {
  return served > 0 ? actual_s / served : std::numeric_limits<double>::infinity();
}

void add_scaled(Erosion& acc, const Erosion& x, double f) {
  acc.reference_s += f * x.reference_s;
  acc.actual_s += f * x.actual_s;
  acc.loads_s += f * x.loads_s;
  acc.idle_saving_s += f * x.idle_saving_s;
  acc.tile_phase_s += f * x.tile_phase_s;
  acc.imbalance_s += f * x.imbalance_s;
  acc.imbalance_tiles_s += f * x.imbalance_tiles_s;
  acc.padding_s += f * x.padding_s;
  acc.quantization_s += f * x.quantization_s;
  acc.micro_batch_s += f * x.micro_batch_s;
  acc.communication_s += f * x.communication_s;
  acc.communication_imbalance_s += f * x.communication_imbalance_s;
  acc.dropped_work_s += f * x.dropped_work_s;
  acc.delivered += f * x.delivered;
  acc.undelivered += f * x.undelivered;
  acc.served += f * x.served;
}

double efficiency_of(const Erosion& x) {
  return x.actual_s > 0 ? (x.actual_s - imbalance_total_s(x)) / x.actual_s : 1.0;
}

double roofline_efficiency_of(const Erosion& x) {
  return x.loads_s > 0 ? x.reference_s / x.loads_s : 1.0;
}

double imbalance_cost_fraction(const Erosion& x) { return x.actual_s > 0 ? imbalance_cost_s(x) / x.actual_s : 0.0; }

double idle_saving_fraction(const Erosion& x) { return x.actual_s > 0 ? 0.0 - x.idle_saving_s / x.actual_s : 0.0; }

namespace {

// EPLB balanced_packing (see placement.hpp): items `w` [n] onto `num_packs` packs of n / num_packs; fills
// pack [n] and rank [n] (arrival order in the pack). label [n] (spread only): the item's expert.
void balanced_packing(const std::vector<double>& w, int num_packs, const std::vector<int32_t>* label,
                      std::vector<int>& pack, std::vector<int>& rank) {
  const int n = static_cast<int>(w.size());
  const int per_pack = n / num_packs;
  pack.assign(n, 0);
  rank.assign(n, 0);
  if (per_pack == 1) {  // EPLB's identity case: no sort, item i on pack i
    std::iota(pack.begin(), pack.end(), 0);
    return;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return w[a] > w[b]; });
  std::vector<double> pack_w(num_packs, 0.0);
  std::vector<int> pack_n(num_packs, 0);
  std::vector<std::vector<int32_t>> held(label ? num_packs : 0);
  for (int item : order) {
    int best = -1, best_free = -1;  // lightest with room; lightest with room not holding the expert
    for (int m = 0; m < num_packs; ++m) {
      if (pack_n[m] >= per_pack) continue;
      if (best < 0 || pack_w[m] < pack_w[best]) best = m;
      if (label && std::find(held[m].begin(), held[m].end(), (*label)[item]) == held[m].end() &&
          (best_free < 0 || pack_w[m] < pack_w[best_free]))
        best_free = m;
    }
    const int m = best_free >= 0 ? best_free : best;
    pack[item] = m;
    rank[item] = pack_n[m]++;
    pack_w[m] += w[item];
    if (label) held[m].push_back((*label)[item]);
  }
}

// EPLB replicate_experts: slots [num_phy]; the first n are the experts, each extra goes to the expert of
// highest w / count (ties: lower index) among those below `cap` replicas. Fills phy2log and count [n].
void replicate_experts(const std::vector<double>& w, int num_phy, int cap, std::vector<int>& phy2log,
                       std::vector<int32_t>& count) {
  const int n = static_cast<int>(w.size());
  phy2log.resize(num_phy);
  count.assign(n, 1);
  std::iota(phy2log.begin(), phy2log.begin() + n, 0);
  for (int i = n; i < num_phy; ++i) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      if (count[e] >= cap) continue;
      if (best < 0 || w[e] / count[e] > w[best] / count[best]) best = e;
    }
    MOESIM_REQUIRE(best >= 0, "no expert can take another replica (cap " << cap << ")");
    phy2log[i] = best;
    ++count[best];
  }
}

[[noreturn]] void placement_error(const std::string& key, const std::string& expected, const std::string& got) {
  throw ConfigError(key + ": expected " + expected + ", got " + got);
}

}  // namespace

std::vector<double> device_plan_load(const ExpertPlacement& p) {
  std::vector<double> d(p.num_devices, 0.0);
  for (size_t i = 0; i < p.device.size() && i < p.plan_load.size(); ++i) d[p.device[i]] += p.plan_load[i];
  return d;
}

int colocated_replicas(const ExpertPlacement& p) {
  // (expert, device) pairs in order: a run of k > 1 equal pairs is k colocated slots.
  std::vector<std::pair<int32_t, int32_t>> pairs(p.expert.size());
  for (size_t i = 0; i < p.expert.size(); ++i) pairs[i] = {p.expert[i], p.device[i]};
  std::sort(pairs.begin(), pairs.end());
  int n = 0;
  for (size_t i = 0; i < pairs.size();) {
    size_t j = i + 1;
    while (j < pairs.size() && pairs[j] == pairs[i]) ++j;
    if (j - i > 1) n += static_cast<int>(j - i);
    i = j;
  }
  return n;
}

double balancedness_of(const std::vector<double>& v) {
  double mx = 0, sum = 0;
  for (double x : v) {
    mx = std::max(mx, x);
    sum += x;
  }
  return mx > 0 ? sum / static_cast<double>(v.size()) / mx : 1.0;
}

PlacementConfig resolve_placement(const PlacementConfig& placement, const RouterConfig& router) {
  PlacementConfig p = placement;
  if (p.groups == 0) p.groups = router.groups;
  return p;
}

ExpertPlacement rebalance_eplb(const std::vector<double>& w, int num_physical, int num_groups, int num_nodes,
                               int num_devices, bool spread) {
  const int E = static_cast<int>(w.size());
  const int P = num_physical, G = num_groups, N = num_nodes, D = num_devices;
  if (P < E) placement_error("placement.replicas", "a number >= 0", std::to_string(P - E));
  if (P % D != 0) {
    placement_error("placement.devices", "a divisor of model.experts + placement.replicas (" + std::to_string(P) + ")",
                    std::to_string(D));
  }
  if (E % G != 0) {
    placement_error("placement.groups", "a divisor of model.experts (" + std::to_string(E) + ")", std::to_string(G));
  }
  if (G % N != 0) {
    placement_error("placement.nodes", "a divisor of placement.groups (" + std::to_string(G) + ")", std::to_string(N));
  }
  if (D % N != 0) {
    placement_error("placement.nodes", "a divisor of placement.devices (" + std::to_string(D) + ")",
                    std::to_string(N));
  }
  const int group_size = E / G, groups_per_node = G / N, experts_per_node = E / N, slots_per_node = P / N;
  const int devices_per_node = D / N, slots_per_device = P / D;
  if (spread && int64_t{slots_per_node} > int64_t{experts_per_node} * devices_per_node) {
    placement_error("placement.spread_replicas",
                    "false, or at most " + std::to_string(devices_per_node) + " replicas per expert (devices per node)",
                    "true with " + std::to_string(slots_per_node) + " slots for " + std::to_string(experts_per_node) +
                        " experts per node");
  }
  // Step 1: groups onto nodes; mlog2log numbers each node's experts in the order its groups arrived.
  std::vector<double> group_w(G, 0.0);
  for (int e = 0; e < E; ++e) group_w[e / group_size] += w[e];
  std::vector<int> group_pack, group_rank;
  balanced_packing(group_w, N, nullptr, group_pack, group_rank);
  std::vector<int> mlog2log(E);
  for (int e = 0; e < E; ++e) {
    const int g = e / group_size;
    mlog2log[(group_pack[g] * groups_per_node + group_rank[g]) * group_size + e % group_size] = e;
  }
  ExpertPlacement p;
  p.num_devices = D;
  p.num_nodes = N;
  p.replicas.assign(E, 1);
  p.expert.assign(P, 0);
  p.device.assign(P, 0);
  p.node.assign(P, 0);
  p.plan_load.assign(P, 0.0);
  for (int n = 0; n < N; ++n) {
    // Step 2: replicate within the node.
    std::vector<double> wm(experts_per_node);
    for (int j = 0; j < experts_per_node; ++j) wm[j] = w[mlog2log[n * experts_per_node + j]];
    std::vector<int> phy2mlog;
    std::vector<int32_t> count;
    replicate_experts(wm, slots_per_node, spread ? devices_per_node : slots_per_node, phy2mlog, count);
    // Step 3: the node's slots onto its devices.
    std::vector<double> tw(slots_per_node);
    std::vector<int32_t> label(slots_per_node);
    for (int k = 0; k < slots_per_node; ++k) {
      tw[k] = wm[phy2mlog[k]] / count[phy2mlog[k]];
      label[k] = phy2mlog[k];
    }
    std::vector<int> pack, rank;
    balanced_packing(tw, devices_per_node, spread ? &label : nullptr, pack, rank);
    for (int k = 0; k < slots_per_node; ++k) {
      const int slot = n * slots_per_node + pack[k] * slots_per_device + rank[k];
      const int e = mlog2log[n * experts_per_node + phy2mlog[k]];
      p.expert[slot] = e;
      p.device[slot] = n * devices_per_node + pack[k];
      p.node[slot] = n;
      p.plan_load[slot] = tw[k];
    }
    for (int j = 0; j < experts_per_node; ++j) p.replicas[mlog2log[n * experts_per_node + j]] = count[j];
  }
  return p;
}

ExpertPlacement place_experts_real(const std::vector<double>& plan_load, const PlacementConfig& cfg) {
  const int num_experts = static_cast<int>(plan_load.size());
  MOESIM_REQUIRE(num_experts >= 1, "placement needs at least one expert");
  if (cfg.kind == PlacementKind::single) {
    ExpertPlacement p;
    p.replicas.assign(num_experts, 1);
    p.expert.resize(num_experts);
    std::iota(p.expert.begin(), p.expert.end(), 0);
    p.device.assign(num_experts, 0);
    p.node.assign(num_experts, 0);
    p.plan_load = plan_load;
    return p;
  }
  MOESIM_REQUIRE(cfg.devices >= 1, "placement.devices must be >= 1, got " << cfg.devices);
  MOESIM_REQUIRE(cfg.replicas >= 0, "placement.replicas must be >= 0, got " << cfg.replicas);
  MOESIM_REQUIRE(cfg.nodes >= 1, "placement.nodes must be >= 1, got " << cfg.nodes);
  const PlacementPolicy effective = effective_policy(cfg);
  const std::string policy = to_string(effective);
  if (effective == PlacementPolicy::map && !cfg.slot_expert.empty()) {
    // An engine's placement file: slot s holds expert slot_expert[s] on device s / (S / D), as vLLM, SGLang and
    // TensorRT-LLM lay slots over ranks; each replica is planned an equal share of its expert's load.
    const int slots = static_cast<int>(cfg.slot_expert.size());
    if (slots % cfg.devices != 0) {
      placement_error("placement.devices", "a divisor of the placement file's " + std::to_string(slots) + " slots",
                      std::to_string(cfg.devices));
    }
    ExpertPlacement p;
    p.num_devices = cfg.devices;
    p.num_nodes = cfg.devices % cfg.nodes == 0 ? cfg.nodes : 1;
    const int per_device = slots / cfg.devices, per_node = cfg.devices / p.num_nodes;
    p.replicas.assign(num_experts, 0);
    for (int32_t e : cfg.slot_expert) {
      if (e < 0 || e >= num_experts) {
        placement_error("placement.map", "logical experts in [0, " + std::to_string(num_experts - 1) + "]",
                        std::to_string(e));
      }
      ++p.replicas[e];
    }
    for (int e = 0; e < num_experts; ++e)
      if (p.replicas[e] == 0) placement_error("placement.map", "a slot for every expert", "none for expert " + std::to_string(e));
    p.expert = cfg.slot_expert;
    p.device.resize(slots);
    p.node.resize(slots);
    p.plan_load.resize(slots);
    for (int s = 0; s < slots; ++s) {
      p.device[s] = s / per_device;
      p.node[s] = p.device[s] / per_node;
      p.plan_load[s] = plan_load[p.expert[s]] / p.replicas[p.expert[s]];
    }
    return p;
  }
  if (effective == PlacementPolicy::map || effective == PlacementPolicy::round_robin ||
      effective == PlacementPolicy::contiguous) {
    if (cfg.replicas > 0) {
      placement_error("placement.replicas", "0 for placement.policy " + policy +
                                                " (replicas are placed by EPLB: the global or hierarchical policy)",
                      std::to_string(cfg.replicas));
    }
    const bool map = effective == PlacementPolicy::map;
    const bool contiguous = effective == PlacementPolicy::contiguous;
    if (map && static_cast<int>(cfg.map.size()) != num_experts) {
      placement_error("placement.map", std::to_string(num_experts) + " entries, one per expert",
                      std::to_string(cfg.map.size()) + " entries");
    }
    ExpertPlacement p;
    p.num_devices = cfg.devices;
    p.num_nodes = cfg.devices % cfg.nodes == 0 ? cfg.nodes : 1;
    const int per_node = cfg.devices / p.num_nodes;
    p.replicas.assign(num_experts, 1);
    p.expert.resize(num_experts);
    p.device.resize(num_experts);
    p.node.resize(num_experts);
    p.plan_load = plan_load;
    for (int e = 0; e < num_experts; ++e) {
      p.expert[e] = e;
      // contiguous: device d holds experts [d E / D, (d + 1) E / D) (floor), as engines split them without EPLB.
      p.device[e] = map ? cfg.map[e]
                        : contiguous ? static_cast<int32_t>(int64_t{e} * cfg.devices / num_experts)
                                     : e % cfg.devices;
      if (p.device[e] < 0 || p.device[e] >= cfg.devices) {
        placement_error("placement.map[" + std::to_string(e) + "]",
                        "a device in [0, " + std::to_string(cfg.devices - 1) + "]", std::to_string(p.device[e]));
      }
      p.node[e] = p.device[e] / per_node;
    }
    return p;
  }
  if (!cfg.map.empty()) {
    placement_error("placement.map", "no map for placement.policy " + policy,
                    std::to_string(cfg.map.size()) + " entries");
  }
  const bool hierarchical = effective == PlacementPolicy::hierarchical;
  const int groups = hierarchical ? std::max(1, cfg.groups) : 1;
  const int nodes = hierarchical ? cfg.nodes : 1;
  ExpertPlacement p =
      rebalance_eplb(plan_load, num_experts + cfg.replicas, groups, nodes, cfg.devices, cfg.spread_replicas);
  if (!hierarchical && cfg.nodes > 1 && cfg.devices % cfg.nodes == 0) {  // global: nodes only label devices
    p.num_nodes = cfg.nodes;
    for (size_t i = 0; i < p.device.size(); ++i) p.node[i] = p.device[i] / (cfg.devices / cfg.nodes);
  }
  return p;
}

ExpertPlacement place_experts(const std::vector<int64_t>& plan_load, const PlacementConfig& cfg) {
  const std::vector<double> w(plan_load.begin(), plan_load.end());
  ExpertPlacement p = place_experts_real(w, cfg);
  assign_load(p, plan_load);
  return p;
}

void assign_load(ExpertPlacement& placement, const std::vector<int64_t>& load) {
  MOESIM_REQUIRE(load.size() == placement.replicas.size(),
                 "load has " << load.size() << " entries, expected " << placement.replicas.size());
  split_load(placement, load, placement.load);
}

LayerCostInput layer_cost_input(const Experiment& e, const RouterConfig& router, CostedSize size, int64_t num_tokens,
                                std::vector<int64_t> load, int64_t capacity) {
  const bool model = size == CostedSize::model;
  LayerCostInput in;
  in.hidden = model ? e.model.hidden : e.execute.hidden;
  in.ffn = model ? e.model.ffn : e.execute.ffn;
  in.format = model ? expert_format(e.model) : ExpertFormat(e.execute.dtype);  // the executed layer: SwiGLU
  in.num_experts = e.model.experts;
  in.top_k = e.model.top_k;
  in.shared_experts = e.model.shared_experts;
  in.num_tokens = num_tokens;
  in.load = std::move(load);
  in.layout = router.layout;
  in.capacity = capacity;
  in.block_size = router.block_size;
  // Group-limited routing picks a token's experts from router.topk_groups groups; the hierarchical policy
  // packs whole groups onto each of its nodes, so a token's experts span at most that many nodes.
  const PlacementConfig& pc = e.placement;
  const int groups = pc.groups > 0 ? pc.groups : router.groups;
  if (router.gating == Gating::group_limited && pc.kind == PlacementKind::expert_parallel &&
      pc.policy == PlacementPolicy::hierarchical && pc.nodes > 1 && groups % pc.nodes == 0 && groups == router.groups) {
    in.node_limit = router.topk_groups;
  }
  return in;
}

namespace {

// The plans a layer's loads and its counterfactuals run on (expert parallel), made once per layer and kept
// for every batch size of the tile phase: the routing's (from placement_load, else its own loads), the one
// balanced loads of N k would get, and the one the delivered assignments balanced would get (the reference's,
// A's and the communication counterfactual's).
struct Plans {
  ExpertPlacement routing, balanced, delivered;
};

Plans make_plans(const LayerCostInput& in) {
  Plans plans;
  plans.routing = place_experts_real(
      in.placement_load.empty() ? std::vector<double>(in.load.begin(), in.load.end()) : in.placement_load,
      in.placement);
  const BalancedLoads balanced(in.num_tokens * in.top_k, in.num_experts, in.capacity);
  std::vector<int64_t> even(in.num_experts);
  for (int e = 0; e < in.num_experts; ++e) even[e] = balanced(e);
  plans.balanced = place_experts(even, in.placement);
  int64_t delivered = 0;
  for (int64_t l : in.load) delivered += l;
  plans.delivered = place_experts(even_loads(in.num_experts, delivered, nullptr), in.placement);
  return plans;
}

// The layer at the batch `in` describes, on `plans` (expert parallel) or one device (plans == nullptr): every
// field of LayerCost but the tile phase (erosion holds this exact batch). With erosion_only, the balanced
// counterfactual's columns (actual, balanced) and the per-device detail may be left out.
LayerCost cost_at(const HardwareProfile& hw, const ExpertRoofline& rm, const LayerCostInput& in, const Plans* plans,
                  bool erosion_only) {
  const int tp = std::max(1, in.placement.tensor_parallel);
  const int num_experts = in.num_experts;
  const int64_t assignments = in.num_tokens * in.top_k;
  const BalancedLoads balanced(assignments, num_experts, in.capacity);
  // Capacity layout without a capacity: the buffer holds max(load) rows per expert.
  int64_t max_load = 0;
  if (in.layout == Layout::capacity && in.capacity == 0) {
    for (int e = 0; e < num_experts; ++e) max_load = std::max(max_load, in.load[e]);
  }
  const int64_t max_balanced = balanced(0);  // expert 0 is never below another
  const LayoutRule rule_actual{in.layout, in.block_size, in.capacity > 0 ? in.capacity : max_load};
  const LayoutRule rule_balanced{in.layout, in.block_size, in.capacity > 0 ? in.capacity : max_balanced};

  LayerCost out;
  if (plans == nullptr) {
    GroupedCost actual(rm), even(rm);
    int64_t tokens = 0, compute_bound = 0;  // locals: no loop-carried store through `out`
    const int64_t* load = in.load.data();
    {
      GroupedCost acc(rm);  // never leaves this block, so its counters can live in registers
      for (int e = 0; e < num_experts; ++e) {
        const int64_t rows = rule_actual.rows(load[e], 1);
        acc.add(rows);
        compute_bound += rm.compute_bound(rows) ? 1 : 0;
        tokens += load[e];
      }
      actual = acc;
    }
    out.compute_bound_experts = static_cast<double>(compute_bound);
    // Balanced loads take two values: base + 1 for the first `rem` experts, base for the rest.
    even.add(rule_balanced.rows(balanced(0), 1), balanced.rem);
    even.add(rule_balanced.rows(balanced(num_experts - 1), 1), num_experts - balanced.rem);
    for (int s = 0; s < in.shared_experts; ++s) {
      actual.add(in.num_tokens);
      even.add(in.num_tokens);
    }
    const CostBreakdown experts = actual.time();
    out.actual = experts;
    out.balanced = even.time();
    out.device_time_s.assign(1, experts.quantized_s);
    const CostBreakdown reduce = tensor_parallel_reduce(hw, tp, in.num_tokens, in.hidden, in.format.dtype);
    add_to(out.actual, reduce);
    add_to(out.balanced, reduce);
    out.tensor_parallel_reduce_s = reduce.quantized_s;
    out.device_tokens.assign(1, tokens);
    // T1 and Q(loads): the loads as they are (the dropless layout's rows are the loads: no second pass).
    const CostBreakdown loads =
        in.layout == Layout::dropless ? experts : experts_only(rm, in, in.load, nullptr);
    out.erosion = erosion_of(rm, in, tokens, loads, experts, experts.quantized_s, reduce.quantized_s,
                             reduce.quantized_s, nullptr);
    return out;
  }
  ExpertPlacement p = plans->routing;
  assign_load(p, in.load);
  const RunCost a = run_placed(hw, rm, p, rule_actual, in);
  // Each expert-parallel device is a group of T GPUs reducing the rows it holds; the layer waits for the
  // group with the most (shared experts' local tokens included).
  const auto most_rows = [&](const PlacedCost& c) {
    int64_t most = 0;
    for (size_t d = 0; d < c.device_tokens.size(); ++d) {
      const int64_t local = in.num_tokens / static_cast<int64_t>(c.device_tokens.size()) +
                            (static_cast<int64_t>(d) < in.num_tokens % static_cast<int64_t>(c.device_tokens.size()) ? 1 : 0);
      most = std::max(most, c.device_tokens[d] + (in.shared_experts > 0 ? local : 0));
    }
    return most;
  };
  const CostBreakdown reduce = tensor_parallel_reduce(hw, tp, most_rows(a.full), in.hidden, in.format.dtype);
  int64_t delivered = 0;
  for (int64_t l : in.load) delivered += l;
  // The erosion's communication counterfactual: the delivered assignments balanced over the experts (the
  // reference's loads), on the plan they would get, at the layout's rows; with nothing dropped under balanced
  // routing these are the routing's own loads, so communication_imbalance is exactly 0.
  const BalancedLoads even_delivered(delivered, num_experts, 0);
  ExpertPlacement pd = plans->delivered;
  assign_load(pd, even_loads(num_experts, delivered, nullptr));
  const LayoutRule rule_delivered{in.layout, in.block_size, in.capacity > 0 ? in.capacity : even_delivered(0)};
  const RunCost d = run_placed(hw, rm, pd, rule_delivered, in);
  const CostBreakdown reduce_d = tensor_parallel_reduce(hw, tp, most_rows(d.full), in.hidden, in.format.dtype);
  out.actual = {a.experts.ideal_s + a.exposed_ideal_s + reduce.ideal_s,
                a.experts.quantized_s + a.exposed_s + reduce.quantized_s};
  const LayoutRule dropless{Layout::dropless, 1, 0};
  const CostBreakdown loads =
      in.layout == Layout::dropless ? a.full.experts : cost_placed(rm, p, dropless, in).experts;
  out.erosion = erosion_of(rm, in, delivered, loads, a.full.experts, a.experts.quantized_s,
                           a.exposed_s + reduce.quantized_s, d.exposed_s + reduce_d.quantized_s, &plans->delivered);
  if (erosion_only) return out;
  ExpertPlacement pb = plans->balanced;
  std::vector<int64_t> even(num_experts);
  for (int e = 0; e < num_experts; ++e) even[e] = balanced(e);
  assign_load(pb, even);
  const RunCost b = run_placed(hw, rm, pb, rule_balanced, in);
  const CostBreakdown reduce_b = tensor_parallel_reduce(hw, tp, most_rows(b.full), in.hidden, in.format.dtype);
  out.balanced = {b.experts.ideal_s + b.exposed_ideal_s + reduce_b.ideal_s,
                  b.experts.quantized_s + b.exposed_s + reduce_b.quantized_s};
  out.tensor_parallel_reduce_s = reduce.quantized_s;
  out.compute_bound_experts = a.full.compute_bound;
  out.device_time_s = a.full.device_time_s;
  out.device_tokens = a.full.device_tokens;
  out.a2a = a.a2a;
  out.all_to_all_s = a.communication_s;
  out.exposed_communication_s = a.exposed_s;
  out.dispatch_s = a.dispatch_s;
  out.combine_s = a.combine_s;
  out.all_to_all_bytes = a.a2a.bytes;
  out.placement = std::move(p);
  int64_t mx = 0, sum = 0;
  for (int64_t t : out.device_tokens) {
    mx = std::max(mx, t);
    sum += t;
  }
  if (mx > 0) {
    const double mean = static_cast<double>(sum) / static_cast<double>(out.device_tokens.size());
    out.rank_imbalance = static_cast<double>(mx) / mean;
    out.balancedness = mean / static_cast<double>(mx);
  }
  return out;
}

}  // namespace

std::vector<int64_t> scale_loads_to(const std::vector<int64_t>& load, int64_t num_tokens, int64_t to_tokens) {
  MOESIM_REQUIRE(num_tokens > 0 && to_tokens >= 0, "scale_loads_to needs num_tokens > 0 and to_tokens >= 0");
  const double f = static_cast<double>(to_tokens) / static_cast<double>(num_tokens);
  if (load.empty()) return {};
  // Balanced loads (max - min <= 1) stay balanced: the `balanced` gating's split of the scaled total, so that
  // balanced routing is balanced at every batch size of the tile phase.
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  if (*hi - *lo <= 1) {
    const int64_t total = std::llround(static_cast<double>(std::accumulate(load.begin(), load.end(), int64_t{0})) * f);
    return even_loads(static_cast<int>(load.size()), total, nullptr);
  }
  std::vector<int64_t> out(load.size());
  std::vector<double> frac(load.size());
  double total = 0;
  int64_t floor_sum = 0;
  for (size_t e = 0; e < load.size(); ++e) {
    const double x = static_cast<double>(load[e]) * f;
    total += x;
    out[e] = static_cast<int64_t>(std::floor(x));
    frac[e] = x - static_cast<double>(out[e]);
    floor_sum += out[e];
  }
  int64_t rem = std::llround(total) - floor_sum;
  std::vector<size_t> order(load.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return frac[a] > frac[b]; });
  for (size_t i = 0; rem > 0 && i < order.size(); ++i, --rem) ++out[order[i]];
  return out;
}

std::vector<int64_t> tile_phase_batches(const ExpertRoofline& rm, const LayerCostInput& in) {
  const int points = in.tile_phase_points;
  if (points <= 1 || in.num_tokens <= 0 || !rm.k_step_floor) return {};
  // Rows per expert over which a device's quantization repeats: one row tile, or one wave of its GEMM with the
  // fewest column tiles when that is longer (ceil(SMs / columns) row tiles over the device's experts).
  const bool ep = in.placement.kind == PlacementKind::expert_parallel;
  const int64_t slots = in.num_experts + (ep ? in.placement.replicas : 0);
  const double per_device = ep ? static_cast<double>(slots) / std::max(1, in.placement.devices) : static_cast<double>(slots);
  const int64_t columns = std::max<int64_t>(1, std::min(rm.col_tiles_up, rm.col_tiles_down));
  const double wave_rows = static_cast<double>((rm.sm_count + columns - 1) / columns) * rm.tile_m / std::max(1.0, per_device);
  const double window_rows = std::max<double>(rm.tile_m, wave_rows);
  const double half =
      std::min(0.5 * window_rows * in.num_experts / in.top_k, 0.5 * static_cast<double>(in.num_tokens));
  std::vector<int64_t> out(points);
  for (int j = 0; j < points; ++j) {
    const double offset = half * ((2.0 * j + 1.0) / points - 1.0);
    out[j] = std::max<int64_t>(1, in.num_tokens + std::llround(offset));
  }
  return out;
}

LayerCost model_moe_layer(const HardwareProfile& hw, const LayerCostInput& in) {
  validate(in);
  const int tp = std::max(1, in.placement.tensor_parallel);
  const ExpertRoofline rm(hw, in.hidden, (in.ffn + tp - 1) / tp, in.format);
  const bool ep = in.placement.kind != PlacementKind::single;
  Plans plans;
  if (ep) plans = make_plans(in);
  LayerCost out = cost_at(hw, rm, in, ep ? &plans : nullptr, false);
  if (ep) {
    out.device_plan_load = device_plan_load(plans.routing);
    out.predicted_balancedness = balancedness_of(out.device_plan_load);
  }
  out.erosion_exact = out.erosion;
  out.batching_efficiency_exact = efficiency_of(out.erosion_exact);
  out.roofline_efficiency = roofline_efficiency_of(out.erosion_exact);
  // The headline's imbalance parts: each one's share of the layer, averaged over the batch sizes of the tile
  // phase (tile_phase_batches), times this batch's time; the loads scaled, the plans kept.
  const std::vector<int64_t> batches = tile_phase_batches(rm, in);
  if (!batches.empty()) {
    double idle = 0, imbalance = 0, tiles = 0, communication = 0;
    int counted = 0;
    for (int64_t n : batches) {
      LayerCostInput at = in;
      at.num_tokens = n;
      at.load = scale_loads_to(in.load, in.num_tokens, n);
      at.capacity = in.capacity > 0 ? std::max<int64_t>(1, (in.capacity * n + in.num_tokens - 1) / in.num_tokens) : 0;
      at.undelivered = std::llround(static_cast<double>(in.undelivered) * n / static_cast<double>(in.num_tokens));
      const Erosion x = cost_at(hw, rm, at, ep ? &plans : nullptr, true).erosion;
      if (x.actual_s <= 0) continue;
      idle += x.idle_saving_s / x.actual_s;
      imbalance += x.imbalance_s / x.actual_s;
      tiles += x.imbalance_tiles_s / x.actual_s;
      communication += x.communication_imbalance_s / x.actual_s;
      ++counted;
    }
    if (counted > 0) {
      Erosion& h = out.erosion;
      const double actual = h.actual_s, exact = imbalance_total_s(out.erosion_exact);
      h.idle_saving_s = idle / counted * actual;
      h.imbalance_s = imbalance / counted * actual;
      h.imbalance_tiles_s = tiles / counted * actual;
      h.communication_imbalance_s = communication / counted * actual;
      h.tile_phase_s = exact - imbalance_total_s(h);
    }
  }
  out.batching_efficiency = efficiency_of(out.erosion);
  return out;
}

}  // namespace moesim
