// Tests src/cost/placement: layouts (capacity charges idle experts), the balanced counterfactual and
// batching_efficiency, expert-parallel all-to-all bytes and times by hand (one node and two), EPLB
// replication and packing, shared experts, and the errors a profile or placement can raise. Host only.
#include "src/cost/placement.hpp"

#include <gtest/gtest.h>

#include "tests/support/cost_support.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "src/common/error.hpp"

namespace moesim {
namespace {

// The toy accelerator of tests/support/cost_support.hpp (links 100 GB/s, 1 us latency).
HardwareProfile toy(const std::string& extra = "") { return test::toy_profile(extra); }

// hidden 64, ffn 128, fp16 (see roofline_test.cpp: W = 49152 B, 1920 B and 49152 FLOPs per row).
LayerCostInput layer(int num_experts, int top_k, int64_t num_tokens, std::vector<int64_t> load) {
  LayerCostInput in;
  in.hidden = 64;
  in.ffn = 128;
  in.num_experts = num_experts;
  in.top_k = top_k;
  in.format = Dtype::fp16;
  in.num_tokens = num_tokens;
  in.load = std::move(load);
  return in;
}

CostBreakdown grouped(const HardwareProfile& hw, const std::vector<int64_t>& rows) {
  const ExpertRoofline m(hw, 64, 128, Dtype::fp16);
  GroupedCost g(m);
  for (int64_t r : rows) g.add(r);
  return g.time();
}

// The cost tests below pin their devices by hand: round-robin (e % D) without replicas, a map when
// one is given, EPLB's global policy with replicas (tests/cost/placement_policy_test.cpp covers the
// policies themselves).
PlacementConfig expert_parallel(int devices, int replicas = 0, std::vector<int> map = {}) {
  PlacementConfig p;
  p.kind = PlacementKind::expert_parallel;
  p.policy = !map.empty() ? PlacementPolicy::map : replicas > 0 ? PlacementPolicy::global : PlacementPolicy::round_robin;
  p.devices = devices;
  p.replicas = replicas;
  p.map = std::move(map);
  p.a2a_kernel = A2aKernel::simple;  // one copy per assignment at the full link rate: the hand-worked bytes
  return p;
}

TEST(Placement, BalancedLoadsGiveEfficiencyOne) {
  // N = 10, k = 2, E = 8: balanced loads are 20/8 -> [3, 3, 3, 3, 2, 2, 2, 2].
  const LayerCost c = model_moe_layer(toy(), layer(8, 2, 10, {3, 3, 3, 3, 2, 2, 2, 2}));
  EXPECT_EQ(c.batching_efficiency, 1.0);
  EXPECT_EQ(c.actual.quantized_s, c.balanced.quantized_s);
  EXPECT_EQ(c.device_tokens, (std::vector<int64_t>{20}));
  EXPECT_EQ(c.rank_imbalance, 1.0);
  // The same loads in another order are still balanced in time (expert order does not matter).
  const LayerCost d = model_moe_layer(toy(), layer(8, 2, 10, {2, 3, 2, 3, 2, 3, 2, 3}));
  EXPECT_NEAR(d.batching_efficiency, 1.0, 1e-15);
}

TEST(Placement, ConcentratedLoadsBeatBalanceInTheMemoryBoundRegime) {
  // N = 8, k = 2, E = 8: every token on experts 0 and 1 (loads 8, 8) reads 2 experts' weights; the
  // balanced routing (2 each) reads all 8. Memory-bound: (2 W + 16 * 1920) vs (8 W + 16 * 1920).
  const LayerCost c = model_moe_layer(toy(), layer(8, 2, 8, {8, 8, 0, 0, 0, 0, 0, 0}));
  EXPECT_NEAR(c.actual.ideal_s, (2 * 49152.0 + 16 * 1920) / 1e12, 1e-20);
  EXPECT_NEAR(c.balanced.ideal_s, (8 * 49152.0 + 16 * 1920) / 1e12, 1e-20);
  EXPECT_GT(c.batching_efficiency, 1.0);  // idle experts load no weights: the report says so
  EXPECT_EQ(c.compute_bound_experts, 0);
}

TEST(Placement, ComputeBoundSingleDeviceIdealIsLoadIndependent) {
  // Far past the knee the single-device ideal time is sum 2 n P / F whatever the split:
  // 4000 assignments * 49152 / 1e13 either way.
  const LayerCost c = model_moe_layer(toy(), layer(4, 2, 2000, {2500, 1500, 0, 0}));
  EXPECT_NEAR(c.actual.ideal_s, 4000 * 49152.0 / 1e13, 1e-18);
  EXPECT_NEAR(c.balanced.ideal_s, 4000 * 49152.0 / 1e13, 1e-18);
  EXPECT_EQ(c.compute_bound_experts, 2);
}

TEST(Placement, LayoutsSetTheRows) {
  const HardwareProfile hw = toy();
  const std::vector<int64_t> load = {5, 0, 20, 3};
  LayerCostInput in = layer(4, 1, 28, load);
  // dropless: rows = load, idle expert skipped.
  EXPECT_EQ(model_moe_layer(hw, in).actual.quantized_s, grouped(hw, {5, 20, 3}).quantized_s);
  // block 8: [8, 0, 24, 8].
  in.layout = Layout::block;
  in.block_size = 8;
  EXPECT_EQ(model_moe_layer(hw, in).actual.ideal_s, grouped(hw, {8, 24, 8}).ideal_s);
  // capacity C = 20: every expert costs 20 rows, the idle one included.
  in.layout = Layout::capacity;
  in.capacity = 20;
  const LayerCost cap = model_moe_layer(hw, in);
  EXPECT_EQ(cap.actual.quantized_s, grouped(hw, {20, 20, 20, 20}).quantized_s);
  EXPECT_NEAR(cap.actual.ideal_s, std::max((4 * 49152.0 + 80 * 1920) / 1e12, 80 * 49152.0 / 1e13), 1e-20);
  // roofline_efficiency holds the capacity rows out: it compares the loads (3 experts' weights, 28 rows)
  // with the 28 delivered assignments balanced (7 each, 4 experts' weights), both memory-bound.
  EXPECT_NEAR(cap.roofline_efficiency, (4 * 49152.0 + 28 * 1920) / (3 * 49152.0 + 28 * 1920), 1e-12);
  // On the headline both are compute bound on 4 row tiles (1 + 2 + 1 against 1 + 1 + 1 + 1): the idle
  // expert saves nothing, so imbalance costs nothing (imbalance + imbalance_tiles = 0 exactly).
  EXPECT_EQ(cap.erosion_exact.imbalance_s + cap.erosion_exact.imbalance_tiles_s + cap.erosion_exact.idle_saving_s, 0.0);
  EXPECT_EQ(cap.batching_efficiency_exact, 1.0);
  EXPECT_NEAR(cap.erosion.padding_s, cap.actual.ideal_s - (3 * 49152.0 + 28 * 1920) / 1e12, 1e-20);
  // capacity layout without a capacity: the buffer holds max(load) = 20 rows per expert too.
  in.capacity = 0;
  EXPECT_EQ(model_moe_layer(hw, in).actual.quantized_s, cap.actual.quantized_s);
}

TEST(Placement, DenseMlpIsOneExpert) {
  const HardwareProfile hw = toy();
  const ExpertRoofline m(hw, 64, 128, Dtype::fp16);
  const LayerCost c = model_moe_layer(hw, layer(1, 1, 37, {37}));
  EXPECT_EQ(c.actual.quantized_s, expert_time(m, 37).quantized_s);
  EXPECT_EQ(c.batching_efficiency, 1.0);
}

TEST(Placement, SharedExpertsProcessEveryToken) {
  const HardwareProfile hw = toy();
  LayerCostInput in = layer(4, 1, 12, {6, 6, 0, 0});
  in.shared_experts = 2;
  const LayerCost c = model_moe_layer(hw, in);
  EXPECT_EQ(c.actual.quantized_s, grouped(hw, {6, 6, 12, 12}).quantized_s);
  EXPECT_EQ(c.balanced.quantized_s, grouped(hw, {3, 3, 3, 3, 12, 12}).quantized_s);
  EXPECT_EQ(c.device_tokens, (std::vector<int64_t>{12}));  // routed assignments only
  // Expert parallel over 2 devices: each runs the 2 shared experts on its 6 local tokens.
  in.placement = expert_parallel(2);
  const LayerCost ep = model_moe_layer(hw, in);
  EXPECT_EQ(ep.device_time_s[0], grouped(hw, {6, 6, 6}).quantized_s);  // expert 0 (+ expert 2 idle)
  EXPECT_EQ(ep.device_time_s[1], grouped(hw, {6, 6, 6}).quantized_s);  // expert 1 (+ expert 3 idle)
}

TEST(Placement, AllToAllBytesForTwoDevicesByHand) {
  // E = 4 round-robin on 2 devices: experts 0, 2 on device 0 and 1, 3 on device 1.
  // loads [6, 2, 4, 0] -> device loads L = [10, 2]. Tokens start half on each device, so half of each
  // device's assignments come from the other one: device 0 sends L1/2 = 1 row and receives L0/2 = 5;
  // device 1 sends 5 and receives 1. A row is 64 * 2 B = 128 B.
  // Bytes leaving their device: (1 + 5) rows * 128 B = 768 B per phase, 1536 B dispatch + combine.
  // Phase time: max over devices of max(sent, received) = 5 rows = 640 B / 100e9 = 6.4e-9 s, plus
  // 1 us latency; two phases.
  LayerCostInput in = layer(4, 2, 6, {6, 2, 4, 0});
  in.placement = expert_parallel(2);
  const HardwareProfile hw = toy();
  const LayerCost c = model_moe_layer(hw, in);
  EXPECT_EQ(c.device_tokens, (std::vector<int64_t>{10, 2}));
  EXPECT_DOUBLE_EQ(c.all_to_all_bytes, 1536.0);
  EXPECT_NEAR(c.all_to_all_s, 2 * (6.4e-9 + 1e-6), 1e-20);
  EXPECT_NEAR(c.rank_imbalance, 10.0 / 6.0, 1e-15);
  EXPECT_NEAR(c.balancedness, 0.6, 1e-15);
  // Layer time = slowest device + all-to-all; the ideal column has no latency.
  const double dev0 = grouped(hw, {6, 4}).quantized_s, dev1 = grouped(hw, {2}).quantized_s;
  EXPECT_EQ(c.device_time_s, (std::vector<double>{dev0, dev1}));
  EXPECT_NEAR(c.actual.quantized_s, std::max(dev0, dev1) + c.all_to_all_s, 1e-18);
  EXPECT_NEAR(c.actual.ideal_s, std::max(grouped(hw, {6, 4}).ideal_s, grouped(hw, {2}).ideal_s) + 2 * 6.4e-9, 1e-18);
  // A map puts experts 0, 1 on device 1: L = [4, 8].
  in.placement = expert_parallel(2, 0, {1, 1, 0, 0});
  EXPECT_EQ(model_moe_layer(hw, in).device_tokens, (std::vector<int64_t>{4, 8}));
  // One device: nothing crosses a link.
  in.placement = expert_parallel(1);
  EXPECT_EQ(model_moe_layer(hw, in).all_to_all_s, 0.0);
}

TEST(Placement, AllToAllAcrossNodesByHand) {
  // 4 devices in nodes of 2; E = 4 round-robin, loads [8, 4, 4, 0] = device loads; node loads 12, 4.
  // Rows per device (1/4 of each device's assignments come from each device):
  //   d0: sends intra (12-8)/4 = 1, inter 4/4 = 1; receives intra 8*1/4 = 2, inter 8*2/4 = 4
  //   d1: sends intra 2, inter 1; receives intra 1, inter 2
  //   d2: sends intra 0, inter 12/4 = 3; receives intra 1, inter 2
  //   d3: sends intra 1, inter 3; receives 0, 0
  // Link 100 GB/s, inter-node 10 GB/s, 128 B rows: d0 max(2*128/1e11, 4*128/1e10) = 5.12e-8 s is the
  // slowest; rows leaving: 2 + 3 + 3 + 4 = 12 (= 16 * 3/4), 3072 B dispatch + combine.
  LayerCostInput in = layer(4, 1, 16, {8, 4, 4, 0});
  in.placement = expert_parallel(4);
  const LayerCost c = model_moe_layer(toy("devices_per_node: 2\ninter_node_bandwidth_gbs: 10\n"), in);
  EXPECT_DOUBLE_EQ(c.all_to_all_bytes, 3072.0);
  EXPECT_NEAR(c.all_to_all_s, 2 * (5.12e-8 + 1e-6), 1e-20);
  // Without an inter-node figure the profile cannot model two nodes.
  try {
    model_moe_layer(toy("devices_per_node: 2\n"), in);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hardware.inter_node_bandwidth_gbs"), std::string::npos) << e.what();
  }
}

TEST(Placement, ExpertParallelNeedsALink) {
  const HardwareProfile hw =
      parse_hardware_profile("name: nolink\npeak_tflops: {fp16: 10}\nmemory_bandwidth_gbs: 1000\nsm_count: 4\n", "n.yaml");
  LayerCostInput in = layer(4, 1, 8, {2, 2, 2, 2});
  in.placement = expert_parallel(2);
  try {
    model_moe_layer(hw, in);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hardware.link_bandwidth_gbs"), std::string::npos) << e.what();
  }
  in.placement = PlacementConfig{};
  EXPECT_NO_THROW(model_moe_layer(hw, in));
}

TEST(Placement, SkewHurtsExpertParallelInTheComputeBoundRegime) {
  // E = 8 over 8 devices, 16384 assignments: all on expert 0 versus 2048 each. The hot device does 8x
  // the compute and receives 7/8 of everything.
  LayerCostInput in = layer(8, 1, 16384, {16384, 0, 0, 0, 0, 0, 0, 0});
  in.placement = expert_parallel(8);
  const LayerCost c = model_moe_layer(toy(), in);
  EXPECT_LT(c.roofline_efficiency, 0.2);
  EXPECT_LT(c.batching_efficiency, 0.5);  // the launches and the all-to-all both placements pay dilute it
  EXPECT_DOUBLE_EQ(c.rank_imbalance, 8.0);
  EXPECT_DOUBLE_EQ(c.balancedness, 0.125);
}

TEST(Placement, EplbReplicationLowersTheMaxDeviceLoad) {
  // E = 8, D = 4, loads [100, 10 x 7]. Round-robin: device 0 holds experts 0 and 4 = 110.
  const std::vector<int64_t> load = {100, 10, 10, 10, 10, 10, 10, 10};
  const ExpertPlacement rr = place_experts(load, expert_parallel(4));
  std::vector<int64_t> dev(4, 0);
  for (size_t i = 0; i < rr.expert.size(); ++i) dev[rr.device[i]] += rr.load[i];
  EXPECT_EQ(dev, (std::vector<int64_t>{110, 20, 20, 20}));
  // 4 replicas all go to expert 0 (100/1, 100/2 = 50, 33.3, 25 all beat 10): 5 copies of 20.
  // 12 slots, 3 per device. Packing heaviest first onto the lightest device with room:
  // 20s -> d0, d1, d2, d3, d0 (40); 10s -> d1, d2, d3 (30 each), d1, d2, d3 (40 each), d0 (50).
  const ExpertPlacement p = place_experts(load, expert_parallel(4, 4));
  EXPECT_EQ(p.replicas[0], 5);
  EXPECT_EQ(std::count(p.replicas.begin(), p.replicas.end(), 1), 7);
  ASSERT_EQ(p.expert.size(), 12u);
  std::fill(dev.begin(), dev.end(), 0);
  std::vector<int> count(4, 0);
  for (size_t i = 0; i < p.expert.size(); ++i) {
    dev[p.device[i]] += p.load[i];
    ++count[p.device[i]];
    if (p.expert[i] == 0) {
      EXPECT_EQ(p.load[i], 20);
    }
  }
  EXPECT_EQ(dev, (std::vector<int64_t>{50, 40, 40, 40}));
  EXPECT_EQ(count, (std::vector<int>{3, 3, 3, 3}));
  // Through the layer model: lower rank imbalance than round-robin.
  LayerCostInput in = layer(8, 2, 95, load);
  in.placement = expert_parallel(4);
  const double rr_imbalance = model_moe_layer(toy(), in).rank_imbalance;
  in.placement = expert_parallel(4, 4);
  const LayerCost c = model_moe_layer(toy(), in);
  EXPECT_EQ(c.device_tokens, (std::vector<int64_t>{50, 40, 40, 40}));
  EXPECT_LT(c.rank_imbalance, rr_imbalance);
  EXPECT_NEAR(rr_imbalance, 110.0 / 42.5, 1e-12);
}

TEST(Placement, ReplicaLoadSplitAndPlanningLoad) {
  // 7 assignments over 3 replicas: 3, 2, 2 (the first load % r replicas take one more).
  ExpertPlacement p = place_experts({9, 1}, expert_parallel(2, 2));
  EXPECT_EQ(p.replicas, (std::vector<int32_t>{3, 1}));
  assign_load(p, {7, 1});
  std::vector<int64_t> e0;
  for (size_t i = 0; i < p.expert.size(); ++i)
    if (p.expert[i] == 0) e0.push_back(p.load[i]);
  EXPECT_EQ(e0, (std::vector<int64_t>{3, 2, 2}));
  // A stale planning load: replicas follow placement_load, the time follows load.
  LayerCostInput in = layer(2, 1, 8, {1, 7});
  in.placement = expert_parallel(2, 2);
  in.placement_load = {9, 1};  // planned for expert 0 being hot; expert 1 is hot now
  const LayerCost c = model_moe_layer(toy(), in);
  EXPECT_EQ(std::accumulate(c.device_tokens.begin(), c.device_tokens.end(), int64_t{0}), 8);
  EXPECT_EQ(*std::max_element(c.device_tokens.begin(), c.device_tokens.end()), 7);
}

TEST(Placement, MapWithReplicasIsAConfigError) {
  EXPECT_THROW(place_experts({1, 2}, expert_parallel(2, 1, {0, 1})), ConfigError);
}

TEST(Placement, EmptyBatchAndBadInputs) {
  const LayerCost c = model_moe_layer(toy(), layer(3, 2, 0, {0, 0, 0}));
  EXPECT_EQ(c.actual.quantized_s, 0.0);
  EXPECT_EQ(c.balanced.quantized_s, 0.0);
  EXPECT_EQ(c.batching_efficiency, 1.0);
  LayerCostInput in = layer(3, 2, 0, {0, 0, 0});
  in.placement = expert_parallel(2);
  const LayerCost e = model_moe_layer(toy(), in);
  EXPECT_EQ(e.rank_imbalance, 1.0);
  EXPECT_EQ(e.all_to_all_s, 0.0);  // nothing to send: no phase runs
  EXPECT_THROW(model_moe_layer(toy(), layer(3, 2, 4, {1, 1})), PreconditionError);
  EXPECT_THROW(model_moe_layer(toy(), layer(3, 4, 4, {1, 1, 1})), PreconditionError);
  EXPECT_THROW(model_moe_layer(toy(), layer(3, 1, 4, {1, -1, 1})), PreconditionError);
  LayerCostInput bf = layer(2, 1, 4, {2, 2});
  bf.format = Dtype::bf16;  // the toy profile has no bf16 peak
  EXPECT_THROW(model_moe_layer(toy(), bf), ConfigError);
}

// docs/cost-model.md "Erosion: a worked example": E = 4, k = 1, N = 400, capacity 120 (factor 1.2), demand
// [200, 100, 60, 40] kept as [120, 100, 60, 40] (80 dropped), on 2 devices (experts 0 and 2 on device 0).
// Per row 49152 FLOPs (4.9152 ns at 10 TFLOP/s) and 1920 B; W = 49152 B per expert (49.152 ns at 1 TB/s).
TEST(Erosion, WorkedExampleByHand) {
  LayerCostInput in = layer(4, 1, 400, {120, 100, 60, 40});
  in.layout = Layout::capacity;
  in.capacity = 120;
  in.undelivered = undelivered_assignments(80, 80, 1);
  in.placement = expert_parallel(2);
  const LayerCost c = model_moe_layer(toy(), in);
  const Erosion& x = c.erosion_exact;  // this batch exactly (the headline averages the tile phase)
  const double ns = 1e-9;
  // Every expert is active: nothing is idle, so nothing is saved.
  EXPECT_EQ(x.idle_saving_s, 0.0);
  // reference: 320 delivered, 80 per expert, 160 rows per device: compute 160 x 4.9152 ns beats memory
  // (2 W + 160 x 1920 B) / BW = 405.504 ns.
  EXPECT_NEAR(x.reference_s, 786.432 * ns, 1e-18);
  // T1: device 0 holds 120 + 60 = 180 rows: 884.736 ns; imbalance = 20 rows x 4.9152 ns.
  EXPECT_NEAR(x.imbalance_s, 98.304 * ns, 1e-18);
  EXPECT_NEAR(c.roofline_efficiency, 160.0 / 180.0, 1e-12);
  // imbalance_tiles: the loads on 16-row tiles, dropless: device 0 has 8 + 4 = 12 row tiles, up 192 tiles =
  // 48 waves x 13.1072 ns, down 48 = 12 x 26.2144 ns: 943.7184 ns (over 443.904 ns of memory) + 6 us of
  // launches = 6943.7184 ns; balanced, 80 rows an expert: 10 row tiles, 786.432 + 6000 = 6786.432 ns. The
  // 157.2864 ns between them less the roofline's 98.304 ns: 58.9824 ns.
  EXPECT_NEAR(x.imbalance_tiles_s, 58.9824 * ns, 1e-18);
  // T2: capacity rows, 120 per expert, 240 per device: 1179.648 ns.
  EXPECT_NEAR(x.padding_s, 294.912 * ns, 1e-18);
  // T3: 8 row tiles of 16 per expert, 16 per device; up: 16 x 16 column tiles = 256 over 4 SMs = 64 waves of
  // 2 x 16 x 16 x 4 x 64 / F = 13.1072 ns; down: 16 x 4 = 64 tiles, 16 waves of 26.2144 ns; 1258.2912 ns of
  // compute over 559.104 ns of memory, plus the layer's 6 launches of 1 us: 7258.2912 ns; less what the skew
  // adds in tiles (imbalance_tiles).
  EXPECT_NEAR(x.quantization_s, (7258.2912 - 1179.648 - 58.9824) * ns, 1e-18);
  // all-to-all (the simple kernel): device 0 sends (320 - 180) / 2 = 70 rows and receives 180 / 2 = 90;
  // device 1 the mirror. 90 rows x 128 B / 100 GB/s = 115.2 ns per phase, two phases, plus 2 x 1 us
  // latency: 2230.4 ns. The same 320 assignments balanced (80 per expert, 160 per device) move 80 rows:
  // 2 x (102.4 + 1000) = 2204.8 ns, the communication part; the skew of the receives adds 25.6 ns.
  EXPECT_NEAR(c.all_to_all_s, 2230.4 * ns, 1e-18);
  EXPECT_NEAR(x.communication_s, 2204.8 * ns, 1e-18);
  EXPECT_NEAR(x.communication_imbalance_s, 25.6 * ns, 1e-18);
  EXPECT_EQ(x.micro_batch_s, 0.0);
  EXPECT_NEAR(x.actual_s, 9488.6912 * ns, 1e-18);
  EXPECT_EQ(x.actual_s, c.actual.quantized_s);
  EXPECT_NEAR(x.reference_s + x.imbalance_s + x.imbalance_tiles_s + x.padding_s + x.quantization_s + x.communication_s +
                  x.communication_imbalance_s,
              x.actual_s, 1e-21);
  EXPECT_NEAR(c.batching_efficiency_exact, (9488.6912 - 98.304 - 58.9824 - 25.6) / 9488.6912, 1e-12);
  // The headline's parts add up as well, the tile phase holding this batch's difference from their expectation.
  const Erosion& h = c.erosion;
  EXPECT_NEAR(h.reference_s + h.idle_saving_s + h.imbalance_s + h.imbalance_tiles_s + h.tile_phase_s + h.padding_s +
                  h.quantization_s + h.communication_s + h.communication_imbalance_s,
              h.actual_s, 1e-18);
  EXPECT_NEAR(imbalance_total_s(h) + h.tile_phase_s, imbalance_total_s(x), 1e-18);
  // dropped work: 400 balanced (200 rows per device, 983.04 ns) minus the reference.
  EXPECT_NEAR(x.dropped_work_s, 196.608 * ns, 1e-18);
  EXPECT_EQ(x.served, 320);
  EXPECT_NEAR(x.time_per_served_s(), 9488.6912 * ns / 320, 1e-21);
}

TEST(Erosion, UndeliveredCountsDropsOrUnroutedTokens) {
  EXPECT_EQ(undelivered_assignments(10, 3, 2), 10);  // token choice: the 3 unrouted tokens' 6 are among the 10
  EXPECT_EQ(undelivered_assignments(0, 13, 2), 26);  // expert choice: no drop, 13 tokens owed 2 each
  EXPECT_EQ(undelivered_assignments(0, 0, 8), 0);
}

TEST(Erosion, BalancedRoutingHasNoImbalance) {
  // The `balanced` gating's loads (floor/ceil of N k / E, the first N k mod E one more), on one device and
  // on every expert-parallel placement, with and without replicas and layouts: imbalance_s is exactly 0.
  const HardwareProfile hw = toy();
  for (int64_t n : {1, 5, 37, 400, 4100}) {
    for (int devices : {1, 2, 4}) {
      for (int replicas : {0, 2, 4}) {
        for (Layout layout : {Layout::dropless, Layout::block, Layout::capacity}) {
          const int E = 8, k = 2;
          if ((E + replicas) % devices != 0) continue;  // EPLB needs D to divide E + R
          std::vector<int64_t> load(E);
          for (int e = 0; e < E; ++e) load[e] = n * k / E + (e < n * k % E ? 1 : 0);
          LayerCostInput in = layer(E, k, n, load);
          in.layout = layout;
          in.block_size = 16;
          if (devices > 1) in.placement = expert_parallel(devices, replicas);
          SCOPED_TRACE(::testing::Message() << "n " << n << " devices " << devices << " replicas " << replicas);
          const LayerCost c = model_moe_layer(hw, in);
          EXPECT_EQ(c.erosion.imbalance_s, 0.0);
          EXPECT_EQ(c.batching_efficiency, 1.0);
          EXPECT_EQ(c.erosion.dropped_work_s, 0.0);
        }
      }
    }
  }
}

TEST(Erosion, TileBoundariesAreNotImbalance) {
  // 8 experts on 8 devices, one skewed load shape at 4096 and 4100 tokens (k = 2): the quantized time jumps
  // where the hot expert crosses a tile boundary, the imbalance part moves only with the tokens.
  const std::vector<double> share = {0.19, 0.16, 0.14, 0.13, 0.11, 0.10, 0.09, 0.08};
  const HardwareProfile hw = parse_hardware_profile(
      "name: gpu\npeak_tflops: {bf16: 989}\nmemory_bandwidth_gbs: 3350\nsm_count: 132\ntile_m: 128\ntile_n: 128\n"
      "launch_overhead_us: 4\nlink_bandwidth_gbs: 450\nlink_latency_us: 2\n",
      "gpu.yaml");
  // Mixtral's layer on 8 devices (one expert each) for n tokens and the given loads.
  auto layer_of = [&](int64_t n, std::vector<int64_t> load) {
    LayerCostInput in;
    in.hidden = 4096;
    in.ffn = 14336;
    in.num_experts = 8;
    in.top_k = 2;
    in.format = Dtype::bf16;
    in.num_tokens = n;
    in.load = std::move(load);
    in.placement = expert_parallel(8);
    return model_moe_layer(hw, in);
  };
  auto run = [&](int64_t n) {
    std::vector<int64_t> load;
    int64_t left = 2 * n;
    for (int e = 0; e < 8; ++e) {
      const int64_t l = e == 7 ? left : static_cast<int64_t>(share[e] * 2 * n);
      load.push_back(l);
      left -= l;
    }
    return layer_of(n, load);
  };
  const LayerCost a = run(4096), b = run(4100);
  EXPECT_LT(std::fabs(b.erosion.imbalance_s / a.erosion.imbalance_s - 1), 0.03);
  EXPECT_LT(std::fabs(b.roofline_efficiency / a.roofline_efficiency - 1), 0.03);
  EXPECT_GT(a.erosion.imbalance_s, 0);
  // Balanced loads at 4096 and 4100 tokens: the step from 1024 to 1025 rows per expert (a ninth 128-row
  // tile) is paid by the balanced counterfactual too, so no part of it is imbalance.
  auto balanced = [&](int64_t n) {
    std::vector<int64_t> load;
    for (int e = 0; e < 8; ++e) load.push_back(2 * n / 8 + (e < (2 * n) % 8 ? 1 : 0));
    return layer_of(n, load);
  };
  const LayerCost c = balanced(4096), d = balanced(4100);
  EXPECT_GT(d.actual.quantized_s - c.actual.quantized_s, 0.05 * c.actual.quantized_s) << "the tile step is there";
  for (const LayerCost* x : {&c, &d}) {
    EXPECT_EQ(x->erosion.imbalance_s, 0.0);
    EXPECT_EQ(x->erosion.imbalance_tiles_s, 0.0);
    EXPECT_EQ(x->batching_efficiency, 1.0);
  }
}

TEST(Erosion, ImbalanceTilesByHand) {
  // Toy device (16 x 16 tiles, 4 SMs), 2 experts, k = 1, 32 tokens: loads {20, 12} against balanced {16, 16}.
  // Balanced: 2 row tiles of 16; up 32 tiles = 8 waves x 13.1072 ns, down 8 tiles = 2 x 26.2144 ns: 157.2864 ns
  // of compute under the memory (2 W + 32 x 1920 B) = 159.744 ns; + 6 launches: 6159.744 ns. The loads: 20 rows
  // take 2 row tiles, 3 in all; up 48 tiles = 12 waves, down 12 = 3: 235.9296 ns, compute bound: 6235.9296 ns.
  // Both ideal times are the memory's 159.744 ns, so the roofline imbalance is 0 and all 76.1856 ns the skew
  // adds are imbalance_tiles; quantization keeps what balanced loads pay too, the 6 us of launches.
  const LayerCost c = model_moe_layer(toy(), layer(2, 1, 32, {20, 12}));
  const Erosion& x = c.erosion_exact;
  const double ns = 1e-9;
  EXPECT_NEAR(x.reference_s, 159.744 * ns, 1e-20);
  EXPECT_NEAR(x.imbalance_s, 0.0, 1e-21);
  EXPECT_NEAR(x.imbalance_tiles_s, 76.1856 * ns, 1e-18);
  EXPECT_NEAR(x.quantization_s, 6000 * ns, 1e-17);
  EXPECT_NEAR(x.actual_s, 6235.9296 * ns, 1e-17);
  EXPECT_NEAR(c.batching_efficiency_exact, 6159.744 / 6235.9296, 1e-12);
  EXPECT_EQ(c.roofline_efficiency, 1.0);
}

TEST(Erosion, TilePhaseExpectationByHand) {
  // The same layer, loads {20, 12} at N = 32 on the toy device, averaged over 4 batch sizes. The window: one
  // row tile of 16 rows an expert (a wave of the narrower GEMM, 4 column tiles on 4 SMs, is one row tile over
  // 2 experts: 8 rows, shorter), h = min(16 x 2 / 2, 32 / 2) = 16 tokens, so N' = 32 + 16 ((2 j + 1) / 4 - 1) =
  // 20, 28, 36, 44. Loads scale by N' / 32 with the remainder to the largest fraction (ties: expert 0):
  //   N' 20: {13, 7} against {10, 10}: 2 row tiles each, both 157.2864 ns of compute: tiles part 0;
  //   N' 28: {18, 10}: 3 row tiles (235.9296 ns) against {14, 14}: 2 (157.2864 ns): +78.6432 ns of 6235.9296;
  //   N' 36: {23, 13}: 3 row tiles against {18, 18}: 4 (314.5728 ns): -78.6432 ns of 6235.9296;
  //   N' 44: {28, 16}: 3 against {22, 22}: 4: -78.6432 ns of 6235.9296.
  // Every point's roofline is the same for both (memory bound up to 28, compute bound past 32 rows), and no
  // expert is idle, so the tiles part is all of it: mean share -78.6432 / (4 x 6235.9296), times this batch's
  // 6235.9296 ns: -19.6608 ns. This exact batch pays +76.1856 ns (ImbalanceTilesByHand): tile_phase 95.8464 ns.
  LayerCostInput in = layer(2, 1, 32, {20, 12});
  in.tile_phase_points = 4;
  EXPECT_EQ(tile_phase_batches(ExpertRoofline(toy(), 64, 128, Dtype::fp16), in),
            (std::vector<int64_t>{20, 28, 36, 44}));
  EXPECT_EQ(scale_loads_to({20, 12}, 32, 20), (std::vector<int64_t>{13, 7}));
  EXPECT_EQ(scale_loads_to({20, 12}, 32, 44), (std::vector<int64_t>{28, 16}));
  EXPECT_EQ(scale_loads_to({16, 16}, 32, 36), (std::vector<int64_t>{18, 18}));  // balanced stays balanced
  EXPECT_EQ(scale_loads_to({5, 5, 4}, 14, 21), (std::vector<int64_t>{7, 7, 7}));
  const LayerCost c = model_moe_layer(toy(), in);
  const double ns = 1e-9;
  EXPECT_NEAR(c.erosion.imbalance_tiles_s, -19.6608 * ns, 1e-18);
  EXPECT_NEAR(c.erosion.imbalance_s, 0.0, 1e-21);
  EXPECT_EQ(c.erosion.idle_saving_s, 0.0);
  EXPECT_NEAR(c.erosion.tile_phase_s, 95.8464 * ns, 1e-18);
  EXPECT_NEAR(c.erosion_exact.imbalance_tiles_s, 76.1856 * ns, 1e-18);
  EXPECT_NEAR(c.batching_efficiency, (6235.9296 + 19.6608) / 6235.9296, 1e-12);
  EXPECT_NEAR(c.batching_efficiency_exact, 6159.744 / 6235.9296, 1e-12);
  // One point: the exact batch alone.
  in.tile_phase_points = 1;
  EXPECT_EQ(model_moe_layer(toy(), in).erosion.tile_phase_s, 0.0);
}

TEST(Erosion, SavingAndCostApartByHand) {
  // 4 experts of the toy layer on one device, k = 1, this exact batch (no tile phase). W = 49.152 ns to read,
  // A = 1.92 ns a row, 78.6432 ns of compute a 16-row tile (up: 16 column tiles = 4 waves of 13.1072 ns; down:
  // 4 tiles, 1 wave of 26.2144 ns), 6 us of launches.
  const double ns = 1e-9;
  {
    // N = 8, loads {5, 3, 0, 0}: two experts idle. Reference {2, 2, 2, 2}: 4 W + 8 A = 211.968 ns; A = {4, 4, 0, 0}:
    // 2 W + 8 A = 113.664 ns, as are the loads. The kernel: balanced 4 row tiles, 314.5728 ns of compute; A and
    // the loads 2, 157.2864 ns. Skew saves the 2 idle experts' weights and tiles, 157.2864 ns, and costs nothing.
    LayerCostInput in = layer(4, 1, 8, {5, 3, 0, 0});
    in.tile_phase_points = 1;
    const LayerCost c = model_moe_layer(toy(), in);
    const Erosion& x = c.erosion;
    EXPECT_NEAR(x.reference_s, 211.968 * ns, 1e-20);
    EXPECT_NEAR(x.idle_saving_s, -157.2864 * ns, 1e-18);
    EXPECT_NEAR(x.imbalance_s, 0.0, 1e-21);
    EXPECT_NEAR(x.imbalance_tiles_s, 0.0, 1e-21);
    EXPECT_NEAR(x.actual_s, 6157.2864 * ns, 1e-17);
    EXPECT_NEAR(idle_saving_fraction(x), 157.2864 / 6157.2864, 1e-12);
    EXPECT_EQ(imbalance_cost_fraction(x), 0.0);
  }
  {
    // N = 20, loads {17, 3, 0, 0}. Reference {5, 5, 5, 5}: 4 W + 20 A = 235.008 ns; A = {10, 10, 0, 0} and the loads:
    // 2 W + 20 A = 136.704 ns (memory bound: 20 rows compute 98.304 ns). The kernel: balanced 4 row tiles
    // (314.5728 ns), A 2 (157.2864 ns), the loads 2 + 1 = 3 (235.9296 ns). Saving Q(A) - Q(balanced) =
    // -157.2864 ns; the straggler on the roofline 0; the skew's extra row tile (Q(loads) - T1) - (Q(A) - A) =
    // 99.2256 - 20.5824 = 78.6432 ns. Net -78.6432 ns; the layer 6235.9296 ns.
    LayerCostInput in = layer(4, 1, 20, {17, 3, 0, 0});
    in.tile_phase_points = 1;
    const LayerCost c = model_moe_layer(toy(), in);
    const Erosion& x = c.erosion;
    EXPECT_NEAR(x.reference_s, 235.008 * ns, 1e-20);
    EXPECT_NEAR(x.idle_saving_s, -157.2864 * ns, 1e-18);
    EXPECT_NEAR(x.imbalance_s, 0.0, 1e-21);
    EXPECT_NEAR(x.imbalance_tiles_s, 78.6432 * ns, 1e-18);
    EXPECT_NEAR(imbalance_total_s(x), -78.6432 * ns, 1e-18);
    EXPECT_NEAR(x.actual_s, 6235.9296 * ns, 1e-17);
    EXPECT_NEAR(imbalance_cost_fraction(x), 78.6432 / 6235.9296, 1e-12);
    EXPECT_NEAR(idle_saving_fraction(x), 157.2864 / 6235.9296, 1e-12);
    EXPECT_NEAR(c.batching_efficiency, (6235.9296 + 78.6432) / 6235.9296, 1e-12);
  }
}

TEST(Placement, RandomLoadsKeepInvariants) {
  // Invariants on random loads: device tokens sum to the loads, replicas sum to E + R, every device
  // holds at most ceil((E + R) / D) slots (exactly (E + R) / D under EPLB), ideal <= quantized <= calibrated (efficiencies <= 1).
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  const HardwareProfile hw = toy("efficiency_flops: 0.7\nefficiency_bw: 0.9\n");
  for (int trial = 0; trial < 100; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 13), D = 1 + static_cast<int>(rng() % 6);
    // Replicas only where EPLB allows them: D divides E + R (R in [0, 5) otherwise 0, round-robin).
    int R = static_cast<int>(rng() % 5);
    if ((E + R) % D != 0) R = 0;
    std::vector<int64_t> load(E);
    for (auto& l : load) l = static_cast<int64_t>(rng() % 300);
    const int64_t total = std::accumulate(load.begin(), load.end(), int64_t{0});
    LayerCostInput in = layer(E, 1, total, load);
    in.layout = static_cast<Layout>(rng() % 3);
    in.block_size = 1 + static_cast<int>(rng() % 64);
    in.placement = expert_parallel(D, R);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " trial " << trial << " E " << E << " D " << D << " R " << R);
    const LayerCost c = model_moe_layer(hw, in);
    EXPECT_EQ(std::accumulate(c.device_tokens.begin(), c.device_tokens.end(), int64_t{0}), total);
    EXPECT_LE(c.actual.ideal_s, c.actual.quantized_s);
    EXPECT_GE(c.rank_imbalance, 1.0);
    // The erosion parts add up to actual - reference, and the layout and tiles only add time.
    for (const Erosion* e : {&c.erosion, &c.erosion_exact}) {
      const Erosion& x = *e;
      EXPECT_EQ(x.actual_s, c.actual.quantized_s);
      EXPECT_NEAR(x.idle_saving_s + x.imbalance_s + x.imbalance_tiles_s + x.tile_phase_s + x.padding_s +
                      x.quantization_s + x.micro_batch_s + x.communication_s + x.communication_imbalance_s,
                  x.actual_s - x.reference_s, 1e-12 * x.actual_s);
    }
    const Erosion& x = c.erosion;
    EXPECT_GE(x.padding_s, 0);
    EXPECT_GE(x.quantization_s, 0);
    EXPECT_GE(x.communication_s, 0);
    EXPECT_EQ(x.delivered, static_cast<double>(total));
    const ExpertPlacement p = place_experts(load, in.placement);
    EXPECT_EQ(std::accumulate(p.replicas.begin(), p.replicas.end(), 0), E + R);
    std::vector<int> count(D, 0);
    for (int32_t d : p.device) ++count[d];
    EXPECT_LE(*std::max_element(count.begin(), count.end()), (E + R + D - 1) / D);
  }
}

}  // namespace
}  // namespace moesim
