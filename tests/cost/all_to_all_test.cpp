// Tests src/cost/all_to_all: the per-token hit probabilities (random with and without a node limit, and
// the spread pattern) against enumeration, the copies of each kernel worked by hand on 2 nodes x 2 GPUs with
// de-duplication visible, each phase's time, the busiest receiver setting the phase, the fp8 copy's bytes,
// two-batch overlap, and the erosion's communication parts (adding up, exactly 0 under balanced loads).
// Host only.
#include "src/cost/all_to_all.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "src/common/error.hpp"
#include "src/cost/placement.hpp"
#include "tests/support/cost_support.hpp"

namespace moesim {
namespace {

// 4 devices of 4 assignments each (E = 8, two experts a device, k = 2, N = 8: two tokens a device).
A2aTraffic two_by_two(A2aFanout fanout = A2aFanout::random) {
  A2aTraffic t;
  t.device_assignments = {4, 4, 4, 4};
  t.num_tokens = 8;
  t.top_k = 2;
  t.num_experts = 8;
  t.fanout = fanout;
  t.dispatch_bytes = 128;  // hidden 64 in fp16
  t.combine_bytes = 128;
  return t;
}

TEST(AllToAll, CopyBytesCountFp8Scales) {
  // DeepEP tests/test_low_latency.py: hidden + hidden / 128 x 4 + 16 bytes a dispatched fp8 copy; bf16 2 hidden.
  EXPECT_DOUBLE_EQ(a2a_copy_bytes(A2aDtype::fp8, Dtype::bf16, 7168), 7168 + 56 * 4 + 16);
  EXPECT_DOUBLE_EQ(a2a_copy_bytes(A2aDtype::bf16, Dtype::fp8, 7168), 14336);
  EXPECT_DOUBLE_EQ(a2a_copy_bytes(A2aDtype::model, Dtype::fp8, 7168), 7168);
  EXPECT_DOUBLE_EQ(a2a_copy_bytes(A2aDtype::fp32, Dtype::bf16, 10), 40);
  EXPECT_DOUBLE_EQ(a2a_copy_bytes(A2aDtype::fp8, Dtype::bf16, 64), 64 + 4 + 16);  // one partial scale block
}

TEST(AllToAll, HitProbabilitiesMatchEnumeration) {
  // 2 of 8 experts (28 pairs): a device's two experts are missed by C(6, 2) = 15 pairs, a node's four by
  // C(4, 2) = 6.
  const A2aHits h = a2a_hits(two_by_two(), 2);
  for (double p : h.device) EXPECT_NEAR(p, 13.0 / 28.0, 1e-15);
  for (double p : h.node) EXPECT_NEAR(p, 22.0 / 28.0, 1e-15);
  // A node limit of 2 over 4 nodes of 2 devices (E = 16, k = 2): a token's 2 nodes are a uniform pair (its
  // node among them with chance 1/2), then its 2 experts come from their 8: the node is missed by C(4, 2)
  // = 6 of C(8, 2) = 28 pairs.
  A2aTraffic t;
  t.device_assignments = {4, 4, 4, 4, 4, 4, 4, 4};
  t.num_tokens = 16;
  t.top_k = 2;
  t.num_experts = 16;
  t.node_limit = 2;
  const A2aHits limited = a2a_hits(t, 2);
  for (double p : limited.node) EXPECT_NEAR(p, 0.5 * 22.0 / 28.0, 1e-15);
  // A device holds 2 of the 8: missed by C(6, 2) = 15 of 28.
  for (double p : limited.device) EXPECT_NEAR(p, 0.5 * 13.0 / 28.0, 1e-15);
  // Spread (TensorRT-LLM's perfect router): k = 8 on 8 devices hits all of them; on 16, token j takes
  // devices 8 (j mod 2) .. 8 (j mod 2) + 7: every device and node (of 8) half the tokens.
  t.device_assignments.assign(8, 8);
  t.top_k = 8;
  t.fanout = A2aFanout::spread;
  for (double p : a2a_hits(t, 8).device) EXPECT_DOUBLE_EQ(p, 1.0);
  t.device_assignments.assign(16, 4);
  const A2aHits spread16 = a2a_hits(t, 8);
  for (double p : spread16.device) EXPECT_DOUBLE_EQ(p, 0.5);
  for (double p : spread16.node) EXPECT_DOUBLE_EQ(p, 0.5);
}

TEST(AllToAll, KernelCopiesByHandOnTwoNodesOfTwo) {
  const A2aTraffic t = two_by_two();
  // simple and low_latency: one copy per assignment; each device's 4 assignments come 1 from each device:
  // 1 from its node-mate (scale-up), 2 from the other node (scale-out), and it sends as much.
  for (A2aKernel k : {A2aKernel::simple, A2aKernel::low_latency}) {
    const A2aCopies c = a2a_copies(k, t, 2);
    for (int d = 0; d < 4; ++d) {
      EXPECT_DOUBLE_EQ(c.scale_up_sent[d], 1.0);
      EXPECT_DOUBLE_EQ(c.scale_up_received[d], 1.0);
      EXPECT_DOUBLE_EQ(c.scale_out_sent[d], 2.0);
      EXPECT_DOUBLE_EQ(c.scale_out_received[d], 2.0);
    }
  }
  // normal: a token's 2 experts sit on 13/7 devices and 11/7 nodes on average (4 x 13/28, 2 x 22/28), not
  // 2: de-duplicated. Each device's 2 tokens cross the NIC once per node they touch, its own included:
  // 2 x 2 x 11/14 = 22/7, and each device receives as much (2 sources of its local index x 2 tokens x
  // 11/14). Over scale-up, device d receives the copies of the 2 sources of the other local index, direct
  // from its mate or forwarded: 2 x 2 x 13/28 = 13/7, and forwards / sends its own local index's 4 tokens
  // to its mate: 4 x 13/28.
  const A2aCopies n = a2a_copies(A2aKernel::normal, t, 2);
  for (int d = 0; d < 4; ++d) {
    EXPECT_NEAR(n.scale_up_received[d], 13.0 / 7.0, 1e-14);
    EXPECT_NEAR(n.scale_up_sent[d], 13.0 / 7.0, 1e-14);
    EXPECT_NEAR(n.scale_out_sent[d], 22.0 / 7.0, 1e-14);
    EXPECT_NEAR(n.scale_out_received[d], 22.0 / 7.0, 1e-14);
  }
  // One node: normal sends one copy per (token, other device): device d receives from 3 sources x 2
  // tokens x h_d, h_d = 1 - C(6, 2) / C(8, 2) = 13/28.
  const A2aCopies one = a2a_copies(A2aKernel::normal, t, 4);
  for (int d = 0; d < 4; ++d) {
    EXPECT_NEAR(one.scale_up_received[d], 6 * 13.0 / 28.0, 1e-14);
    EXPECT_EQ(one.scale_out_sent[d], 0.0);
  }
}

TEST(AllToAll, PhaseTimesByHand) {
  // Links 100 GB/s scale-up (1 us), 10 GB/s scale-out (2 us); kernel figures set by hand.
  const HardwareProfile hw = test::toy_profile(
      "devices_per_node: 2\ninter_node_bandwidth_gbs: 10\ninter_node_latency_us: 2\n"
      "a2a_normal_dispatch_us: 3\na2a_normal_combine_us: 4\na2a_normal_scale_up_efficiency: 0.5\n"
      "a2a_normal_scale_out_efficiency: 0.8\na2a_low_latency_dispatch_us: 5\na2a_low_latency_combine_us: 6\n"
      "a2a_low_latency_scale_up_efficiency: 0.5\na2a_low_latency_scale_out_efficiency: 0.8\n");
  const A2aTraffic t = two_by_two();
  // normal: scale-up 13/7 x 128 B / 50 GB/s = 4.754e-9 s, scale-out 22/7 x 128 B / 8 GB/s = 5.029e-8 s
  // (slower: it sets the phase); latency 1 + 2 us (the NIC hop, then NVLink); floors 3 and 4 us.
  const A2aCost n = all_to_all(hw, A2aKernel::normal, t);
  const double out_s = 22.0 / 7.0 * 128 / 8e9;
  EXPECT_EQ(n.nodes, 2);
  EXPECT_NEAR(n.dispatch.transfer_s, out_s, 1e-21);
  EXPECT_NEAR(n.dispatch.scale_up_s, 13.0 / 7.0 * 128 / 5e10, 1e-21);
  EXPECT_NEAR(n.dispatch.time_s, 3e-6 + 3e-6 + out_s, 1e-18);
  EXPECT_NEAR(n.combine.time_s, 4e-6 + 3e-6 + out_s, 1e-18);
  EXPECT_NEAR(n.ideal_s(), 2 * out_s, 1e-21);
  // Every device sends 13/7 + 22/7 = 5 copies a phase.
  EXPECT_NEAR(n.bytes, 4 * 5.0 * 256, 1e-9);
  // low_latency: 2 copies over the NIC at 8 GB/s = 3.2e-8 s; latency max(1, 2) us; floors 5 and 6 us.
  const A2aCost ll = all_to_all(hw, A2aKernel::low_latency, t);
  EXPECT_NEAR(ll.dispatch.time_s, 5e-6 + 2e-6 + 3.2e-8, 1e-18);
  EXPECT_NEAR(ll.combine.time_s, 6e-6 + 2e-6 + 3.2e-8, 1e-18);
  // simple: full link rates, no floor, the link latency: 2 x 128 B / 10 GB/s + 1 us.
  const A2aCost s = all_to_all(hw, A2aKernel::simple, t);
  EXPECT_NEAR(s.dispatch.time_s, 1e-6 + 2.56e-8, 1e-18);
  EXPECT_NEAR(s.time_s(), 2 * (1e-6 + 2.56e-8), 1e-18);
  // Nothing to move, or one device: no phase runs.
  A2aTraffic idle = t;
  idle.device_assignments = {0, 0, 0, 0};
  EXPECT_EQ(all_to_all(hw, A2aKernel::normal, idle).time_s(), 0.0);
  idle.device_assignments = {8};
  EXPECT_EQ(all_to_all(hw, A2aKernel::normal, idle).time_s(), 0.0);
}

TEST(AllToAll, BusiestReceiverSetsThePhase) {
  // One node of 4, one expert a device, k = 1, N = 12: loads [9, 1, 1, 1] put 3/4 of the assignments (3x
  // its share) on device 0, which receives 9 x 3/4 = 6.75 copies; balanced [3, 3, 3, 3] moves 2.25 a device.
  const HardwareProfile hw = test::toy_profile();
  A2aTraffic t;
  t.device_assignments = {9, 1, 1, 1};
  t.num_tokens = 12;
  t.top_k = 1;
  t.num_experts = 4;
  t.dispatch_bytes = t.combine_bytes = 100;
  A2aTraffic even = t;
  even.device_assignments = {3, 3, 3, 3};
  for (A2aKernel k : {A2aKernel::simple, A2aKernel::normal, A2aKernel::low_latency}) {
    const A2aCost skewed = all_to_all(hw, k, t), balanced = all_to_all(hw, k, even);
    EXPECT_EQ(skewed.dispatch.busiest_device, 0) << to_string(k);
    EXPECT_NEAR(skewed.dispatch.bytes_received, 675.0, 1e-9) << to_string(k);
    EXPECT_NEAR(skewed.dispatch.transfer_s, 3 * balanced.dispatch.transfer_s, 1e-20) << to_string(k);
    // Combine sends the copies back: device 0 now sends them.
    EXPECT_NEAR(skewed.combine.bytes_sent, 675.0, 1e-9) << to_string(k);
  }
}

TEST(AllToAll, ProfilesWithoutTheLinksAreRefused) {
  const HardwareProfile no_nic = test::toy_profile("devices_per_node: 2\n");
  try {
    all_to_all(no_nic, A2aKernel::normal, two_by_two());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hardware.inter_node_bandwidth_gbs"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a2a_devices_per_node(test::toy_profile(), 4), 4);  // no devices_per_node: one domain
}

LayerCostInput two_device_layer(std::vector<int64_t> load, int64_t tokens) {
  LayerCostInput in;
  in.hidden = 64;
  in.ffn = 128;
  in.num_experts = 2;
  in.top_k = 1;
  in.format = Dtype::fp16;
  in.num_tokens = tokens;
  in.load = std::move(load);
  in.placement.kind = PlacementKind::expert_parallel;
  in.placement.policy = PlacementPolicy::round_robin;
  in.placement.devices = 2;
  in.placement.a2a_kernel = A2aKernel::simple;
  return in;
}

// The toy accelerator with a 10 us link latency, so that communication outlasts the experts.
HardwareProfile slow_link() {
  HardwareProfile hw = test::toy_profile();
  hw.link_latency_s = 10e-6;
  return hw;
}

CostBreakdown grouped(const HardwareProfile& hw, std::initializer_list<int64_t> rows) {
  const ExpertRoofline m(hw, 64, 128, Dtype::fp16);
  GroupedCost g(m);
  for (int64_t r : rows) g.add(r);
  return g.time();
}

TEST(AllToAll, TwoBatchOverlapByHand) {
  // 2 experts on 2 devices, k = 1, N = 4, loads [2, 2]; link latency 10 us so that communication outlasts
  // the experts. Each micro-batch: 2 tokens, one row an expert, each device sends and receives 1/2 copy
  // (128 B at 100 GB/s = 6.4e-10 s) a phase: 2 x (10 us + 6.4e-10 s). Compute: both micro-batches' experts,
  // 2 x t({1}); the layer waits for max(0, communication - compute).
  const HardwareProfile hw = slow_link();
  LayerCostInput in = two_device_layer({2, 2}, 4);
  in.placement.overlap = A2aOverlap::two_batch;
  const LayerCost c = model_moe_layer(hw, in);
  const double compute = 2 * grouped(hw, {1}).quantized_s;
  const double communication = 2 * 2 * (10e-6 + 6.4e-10);
  EXPECT_NEAR(c.all_to_all_s, communication, 1e-18);
  EXPECT_NEAR(c.exposed_communication_s, communication - compute, 1e-18);
  EXPECT_NEAR(c.actual.quantized_s, communication, 1e-18);  // compute + exposed
  // The erosion: the split costs the experts 2 t({1}) - t({2}); the exposed communication is balanced.
  EXPECT_NEAR(c.erosion.micro_batch_s, compute - grouped(hw, {2}).quantized_s, 1e-18);
  EXPECT_NEAR(c.erosion.communication_s, communication - compute, 1e-18);
  EXPECT_EQ(c.erosion.communication_imbalance_s, 0.0);
  // Attention hides 5 us more.
  in.overlap_compute_s = 5e-6;
  EXPECT_NEAR(model_moe_layer(hw, in).exposed_communication_s, communication - compute - 5e-6, 1e-18);
  // Without overlap: the whole batch's experts, then its all-to-all (1 copy a device a phase).
  in.placement.overlap = A2aOverlap::none;
  const LayerCost none = model_moe_layer(hw, in);
  EXPECT_NEAR(none.actual.quantized_s, grouped(hw, {2}).quantized_s + 2 * (10e-6 + 1.28e-9), 1e-18);
  EXPECT_EQ(none.erosion.micro_batch_s, 0.0);
}

TEST(AllToAll, CommunicationImbalanceIsTheSkewOfTheReceives) {
  const HardwareProfile hw = slow_link();
  for (A2aKernel k : {A2aKernel::simple, A2aKernel::normal, A2aKernel::low_latency}) {
    for (A2aOverlap o : {A2aOverlap::none, A2aOverlap::two_batch}) {
      LayerCostInput in = two_device_layer({6, 2}, 8);
      in.placement.a2a_kernel = k;
      in.placement.overlap = o;
      const LayerCost skewed = model_moe_layer(hw, in);
      const Erosion& x = skewed.erosion;
      const double parts = x.reference_s + x.idle_saving_s + x.imbalance_s + x.imbalance_tiles_s + x.tile_phase_s +
                           x.padding_s + x.quantization_s + x.micro_batch_s + x.communication_s +
                           x.communication_imbalance_s;
      EXPECT_NEAR(parts, skewed.actual.quantized_s, 1e-15) << to_string(k) << " " << to_string(o);
      EXPECT_NEAR(x.actual_s, skewed.actual.quantized_s, 1e-18);
      if (o == A2aOverlap::none) EXPECT_GT(x.communication_imbalance_s, 0.0) << to_string(k);
      EXPECT_NEAR(skewed.batching_efficiency, (x.actual_s - imbalance_total_s(x)) / x.actual_s, 1e-15);
      in.load = {4, 4};
      const Erosion even = model_moe_layer(hw, in).erosion;
      EXPECT_EQ(even.communication_imbalance_s, 0.0) << to_string(k) << " " << to_string(o);
      EXPECT_EQ(even.imbalance_s, 0.0);
      EXPECT_EQ(even.imbalance_tiles_s, 0.0);
    }
  }
}

}  // namespace
}  // namespace moesim
