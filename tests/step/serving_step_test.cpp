// Tests src/step/serving_step worked by hand: the layer's barrier and the two streams (communication outlasting
// compute, and hidden under it; hooked low-latency kernels), multi-token prediction's tokens a step, and a 2-rank
// step with uneven requests (the balance ratio, the attention wait, the erosion adding up). Host only.
#include "src/step/serving_step.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "src/common/error.hpp"

namespace moesim {
namespace {

TEST(ServingStep, LayerWithoutOverlapWaitsForTheSlowestRankAtEachBarrier) {
  // Ranks' pre-dispatch compute 1 and 3, post 2 and 2; dispatch 1, combine 1:
  // layer = max pre 3 + 1 + max post 2 + 1 = 7; the mean rank computes 2 + 2 = 4 and waits 3: the two transfers
  // and 1 at the dispatch's barrier.
  LayerStreams s;
  s.pre_s = {1, 3};
  s.post_s = {2, 2};
  s.dispatch_s = 1;
  s.combine_s = 1;
  LayerParts p;
  p.attention_s = 1.5;
  p.dense_pre_s = 0.5;
  p.experts_s = 2;
  const LayerBreakdown b = layer_breakdown(s, p, A2aOverlap::none);
  EXPECT_DOUBLE_EQ(b.layer_s, 7);
  EXPECT_DOUBLE_EQ(b.compute_s, 4);
  EXPECT_DOUBLE_EQ(b.compute_wait_s, 3);
  EXPECT_DOUBLE_EQ(b.sync_s, 1);
  EXPECT_DOUBLE_EQ(b.dispatch_s, 2);  // its transfer and the barrier's wait
  EXPECT_DOUBLE_EQ(b.combine_s, 1);
  EXPECT_DOUBLE_EQ(b.dispatch_s + b.combine_s, b.compute_wait_s);
  EXPECT_DOUBLE_EQ(b.attention_s, 1.5);
  EXPECT_DOUBLE_EQ(b.experts_s, 2);
}

TEST(ServingStep, TwoStreamsWhenCommunicationOutlastsCompute) {
  // One micro-batch's pre 1 and post 1 on every rank; dispatch 3, combine 2. Stages: max(1, 3) + max(1, 3) +
  // max(1, 2) + max(1, 2) = 10; the compute stream runs 2 x (1 + 1) = 4 and idles 6; the communication stream
  // transfers 2 x (3 + 2) = 10 and never idles.
  LayerStreams s;
  s.pre_s = {1, 1};
  s.post_s = {1, 1};
  s.dispatch_s = 3;
  s.combine_s = 2;
  const LayerBreakdown b = layer_breakdown(s, LayerParts{}, A2aOverlap::two_batch);
  EXPECT_DOUBLE_EQ(b.layer_s, 10);
  EXPECT_DOUBLE_EQ(b.compute_s, 4);
  EXPECT_DOUBLE_EQ(b.compute_wait_s, 6);
  EXPECT_DOUBLE_EQ(b.communication_s, 10);
  // Blocking kernels span their stages: dispatch 3 + 3, combine 2 + 2.
  EXPECT_DOUBLE_EQ(b.dispatch_s, 6);
  EXPECT_DOUBLE_EQ(b.combine_s, 4);
}

TEST(ServingStep, TwoStreamsWhenComputeHidesCommunication) {
  // Pre 1, post 2; dispatch 0.5, combine 0.75: every stage is its compute, layer = 1 + 2 + 2 + 1 = 6 = the compute
  // stream's 2 x 3, no wait. Without overlap the same layer is 1 + 0.5 + 2 + 0.75 = 4.25 of one batch's compute...
  LayerStreams s;
  s.pre_s = {1, 1};
  s.post_s = {2, 2};
  s.dispatch_s = 0.5;
  s.combine_s = 0.75;
  const LayerBreakdown b = layer_breakdown(s, LayerParts{}, A2aOverlap::two_batch);
  EXPECT_DOUBLE_EQ(b.layer_s, 6);
  EXPECT_DOUBLE_EQ(b.compute_wait_s, 0);
  // ...hooked low-latency kernels show only their floors when the transfer hides: 2 x 0.1 and 2 x 0.2.
  s.hooked = true;
  s.dispatch_floor_s = 0.1;
  s.combine_floor_s = 0.2;
  const LayerBreakdown h = layer_breakdown(s, LayerParts{}, A2aOverlap::two_batch);
  EXPECT_DOUBLE_EQ(h.dispatch_s, 0.2);
  EXPECT_DOUBLE_EQ(h.combine_s, 0.4);
  // A dispatch of 3 under pre 1 and post 2 leaves 2 + 1 exposed: 0.2 + 3.
  s.dispatch_s = 3;
  EXPECT_DOUBLE_EQ(layer_breakdown(s, LayerParts{}, A2aOverlap::two_batch).dispatch_s, 3.2);
}

TEST(ServingStep, MultiTokenPredictionTokensAStep) {
  EXPECT_DOUBLE_EQ(mtp_tokens_per_request(0, 0.9), 1.0);
  EXPECT_DOUBLE_EQ(mtp_tokens_per_request(1, 0.6), 1.6);           // DeepSeek's 1.6 tokens a step
  EXPECT_DOUBLE_EQ(mtp_tokens_per_request(2, 0.5), 1.75);          // 1 + 0.5 + 0.25
  EXPECT_DOUBLE_EQ(mtp_tokens_per_request(3, 1.0), 4.0);
}

// 1 TB/s, 100 TFLOP/s bf16 and fp8, no launch or K-step floor; a 100 GB/s link between 2 GPUs of one node.
HardwareProfile toy() {
  HardwareProfile hw;
  hw.name = "toy";
  hw.memory_bandwidth_bytes_per_s = 1e12;
  hw.peak_bf16_flops_per_s = 1e14;
  hw.peak_fp8_flops_per_s = 1e14;
  hw.sm_count = 4;
  hw.launch_overhead_s = 0;
  hw.k_step_s = 0;
  hw.efficiency_bw = hw.efficiency_flops = 1;
  hw.link_bandwidth_bytes_per_s = 1e11;
  hw.devices_per_node = 2;
  return hw;
}

ServingStepInput two_rank_step(RequestBalance balance) {
  ServingStepInput in;
  in.hw = toy();
  in.model.hidden = 64;
  in.model.ffn = 64;
  in.model.experts = 4;
  in.model.top_k = 1;
  in.model.layers = 2;
  in.model.moe_layers = 2;
  in.model.heads = 4;
  in.model.kv_heads = 2;
  in.model.head_dim = 64;
  in.model.vocab = 128;
  in.moe.hidden = 64;
  in.moe.ffn = 64;
  in.moe.num_experts = 4;
  in.moe.top_k = 1;
  in.moe.placement.kind = PlacementKind::expert_parallel;
  in.moe.placement.devices = 2;
  in.moe.placement.policy = PlacementPolicy::contiguous;
  in.loads = {{1, 1, 1, 0}};
  // Contexts 2000, 1000 and 1000, one query token each.
  in.sequences = {{2000, 1, 2000}, {1000, 1, 1000}, {1000, 1, 1000}};
  in.attention_dp = 2;
  in.request_balance = balance;
  in.figures.other_kernels = 0;
  in.figures.attention_efficiency = 1;
  return in;
}

TEST(ServingStep, TwoRanksWithUnevenRequestsByHand) {
  // Round robin: rank 0 holds sequences 0 and 2 (3000 KV tokens), rank 1 sequence 1 (1000): balance ratio
  // mean 2000 / max 3000. The attention core is memory-bound: the cache 2 kv_heads x 64 x 2 (K, V) x 2 bytes =
  // 512 bytes a token, plus each query's q and output 4 heads x 64 x 2 x 2 = 1024 bytes: rank 0 reads
  // 3000 x 512 + 2 x 1024 = 1,538,048 bytes (1.538048 us at 1 TB/s), rank 1 1000 x 512 + 1024 = 513,024
  // (0.513024 us); the FLOPs (4 x 64 x 4 a position and head: 3.07 MFLOP at most) take 0.03 us. The slowest rank
  // waits 1.538048 - 1.025536 = 0.512512 us over the mean.
  const ServingStep rr = model_serving_step(two_rank_step(RequestBalance::round_robin));
  EXPECT_NEAR(rr.attention.balance_ratio, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(rr.attention.wait_s, 0.512512e-6, 1e-12);
  // The slowest rank's pre-dispatch compute is late at the barrier: at least the attention's wait.
  EXPECT_GE(rr.moe_layer.sync_s, rr.attention.wait_s - 1e-15);
  EXPECT_GT(rr.erosion.attention_imbalance_s, 0);
  const StepErosion& x = rr.erosion;
  EXPECT_NEAR(x.attention_imbalance_s + x.skew_compute_s + x.skew_communication_s + x.overlap_s,
              x.actual_s - x.ideal_s, 1e-15);
  EXPECT_DOUBLE_EQ(x.actual_s, rr.step_s);
  // By KV tokens: 2000 on rank 0, 1000 + 1000 on rank 1: ratio 1; rank 1's second query adds 1024 bytes
  // (0.001024 us), half of it over the mean.
  const ServingStep kv = model_serving_step(two_rank_step(RequestBalance::kv_tokens));
  EXPECT_DOUBLE_EQ(kv.attention.balance_ratio, 1.0);
  EXPECT_NEAR(kv.attention.wait_s, 0.000512e-6, 1e-13);
  EXPECT_LT(kv.step_s, rr.step_s);
  // Decode without MTP: one token a request a step, TPOT the step, 3 tokens over 2 GPUs a step.
  EXPECT_DOUBLE_EQ(rr.tpot_s, rr.step_s);
  EXPECT_NEAR(rr.output_tokens_per_s_per_gpu, 1.5 / rr.step_s, 1e-9);
}

TEST(ServingStep, RefusesAttentionRanksThatDoNotCoverTheGpus) {
  ServingStepInput in = two_rank_step(RequestBalance::round_robin);
  in.attention_dp = 3;
  EXPECT_THROW(model_serving_step(in), ConfigError);
}

}  // namespace
}  // namespace moesim
