// Tests src/train/train_step and train_flops against numbers worked by hand: the forward and backward FLOPs of one
// MoE layer (and their time through the kernel model), Megatron-LM's FLOP count of small GQA and MLA models, the
// 1F1B and interleaved bubbles, and the erosion of a 2-rank step whose busiest rank carries 1.5x the mean; then
// the erosion's parts adding up to the step's difference on real shapes, and forced balance eroding nothing.
// Host only.
#include "src/train/train_step.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/cost/roofline.hpp"
#include "src/cost/training_passes.hpp"
#include "src/train/train_flops.hpp"
#include "src/train/train_routing.hpp"

namespace moesim {
namespace {

// A compute-bound toy: F = 1 TFLOP/s bf16, a memory so fast that its terms are below 1e-12 s, one SM with
// 128 x 128 tiles (whole tiles give exactly 2 M N K / F), no launch cost, no K-step floor; a 1 GB/s link inside
// one 2-GPU node, no latency.
HardwareProfile toy() {
  return parse_hardware_profile(
      "name: toy\npeak_tflops: {bf16: 1}\nmemory_bandwidth_gbs: 1000000000\nsm_count: 1\ntile_m: 128\ntile_n: 128\n"
      "launch_overhead_us: 0\nk_step_us: 0\nefficiency_flops: 1\nefficiency_bw: 1\nlink_bandwidth_gbs: 1\n"
      "link_latency_us: 0\ndevices_per_node: 2\ninter_node_bandwidth_gbs: 1\n",
      "toy.yaml");
}

TrainFigures ideal() {
  TrainFigures f;
  f.gemm_efficiency_bf16 = f.gemm_efficiency_fp8 = f.gemm_efficiency_mxfp8 = f.attention_efficiency = 1;
  f.layer_overhead_s = 0;
  return f;
}

// hidden 128, expert ffn 128 (SwiGLU: P = 3 x 128 x 128 = 49152 weights), 2 experts, top-1, one MoE layer,
// one head of 128, vocabulary 128.
Experiment two_rank_experiment() {
  Experiment e;
  e.model.hidden = 128;
  e.model.ffn = 128;
  e.model.experts = 2;
  e.model.top_k = 1;
  e.model.layers = 1;
  e.model.heads = 1;
  e.model.kv_heads = 1;
  e.model.head_dim = 128;
  e.model.vocab = 128;
  e.train.gpus = 2;
  e.train.ep = 2;
  e.train.seq_len = 1024;
  e.train.global_batch = 4;
  e.train.micro_batch = 1;
  e.train.dispatcher = Dispatcher::alltoall;
  e.workload.source = WorkloadSource::synthetic;
  return e;
}

TrainLoads exact(const std::vector<int64_t>& load, int64_t tokens, int top_k) {
  TrainLoads l;
  l.samples.push_back({load, load});
  l.tokens = tokens;
  l.top_k = top_k;
  l.description = "exact";
  return l;
}

TEST(TrainFlops, MoeLayerForwardAndBackwardByHand) {
  // One MoE layer of hidden 4, expert ffn 6, top-2, SwiGLU: per token forward 2 x top_k x 3 x hidden x ffn =
  // 2 x 2 x 3 x 4 x 6 = 288 FLOPs; the backward's data and weight gradients twice that, 576; a step 864.
  TrainShape s;
  s.hidden = 4;
  s.moe_ffn = 6;
  s.top_k = 2;
  s.gated = true;
  EXPECT_DOUBLE_EQ(moe_layer_expert_forward_flops_per_token(s), 288.0);
  s.gated = false;  // two matrices: 2 x 2 x 2 x 4 x 6 = 192
  EXPECT_DOUBLE_EQ(moe_layer_expert_forward_flops_per_token(s), 192.0);
}

TEST(TrainFlops, ExpertTimeForwardAndBackwardByHand) {
  // 1536 rows through one expert of hidden 128, ffn 128 on the toy: the up GEMM [1536, 128] x [128, 256] and the
  // down GEMM [1536, 128] x [128, 128] are 2 x 1536 x (256 x 128 + 128 x 128) = 150994944 FLOPs, 150.994944 us at
  // 1 TFLOP/s in whole tiles; the backward twice that.
  const HardwareProfile hw = toy();
  const ExpertRoofline rm(hw, 128, 128, ExpertFormat(Dtype::bf16));
  GroupedCost g(rm);
  g.add(1536);
  const KernelTerms fwd = g.terms(KernelScope::experts);
  KernelFigures f = KernelFigures::of(hw);
  EXPECT_NEAR(kernel_time_s(fwd, f), 150.994944e-6, 1e-12);
  EXPECT_NEAR(kernel_time_s(backward_terms(fwd, 0.0), f), 2 * 150.994944e-6, 1e-12);
  const KernelTerms b = backward_terms(fwd, 1e-6);
  EXPECT_DOUBLE_EQ(b.compute_s, 2 * fwd.compute_s);
  EXPECT_DOUBLE_EQ(b.memory_s, 2 * fwd.memory_s + 1e-6);
  EXPECT_EQ(b.kernels, 2 * fwd.kernels);
}

TEST(TrainFlops, MegatronCountOfASmallGqaModelByHand) {
  // hidden 4, 2 heads and 1 kv head of 2, dense ffn 8, expert ffn 6, top-2, 3 layers of which 2 MoE, vocab 10
  // (padded to 128), seq 8, SwiGLU. Per token, 6 x:
  //   MLP  4 x (8 x 3 x 1 + 6 x 2 x 3 x 2) = 4 x 96 = 384            -> 2304
  //   attention, per layer: 4 x (4 + 2 x 2) + 4 x 8 / 2 x 2 + 4 x 4 = 80 -> 480 x 3 layers = 1440
  //   logits 4 x 128                                                   -> 3072
  // = 6816 FLOPs per token.
  ModelConfig m;
  m.hidden = 4;
  m.heads = 2;
  m.kv_heads = 1;
  m.head_dim = 2;
  m.dense_ffn = 8;
  m.ffn = 6;
  m.experts = 4;
  m.top_k = 2;
  m.layers = 3;
  m.moe_layers = 2;
  m.vocab = 10;
  EXPECT_DOUBLE_EQ(megatron_flops_per_token(train_shape(m), 8, 1), 6816.0);
  EXPECT_EQ(megatron_padded_vocab(10, 1), 128);
  EXPECT_EQ(megatron_padded_vocab(151936, 2), 152064);  // Qwen3's vocabulary at TP 2: a multiple of 256
}

TEST(TrainFlops, MegatronCountOfASmallMlaModelByHand) {
  // MLA: hidden 4, 2 heads, qk 2, rope 1, v 3, q_lora 3, kv_lora 2, seq 8, 2 MoE layers + 1 MTP layer, expert ffn
  // 6, top-2, 1 shared expert, vocab 128. Per layer, 6 x [q 3 (4 + 2 x 3 + 1) = 33, kv 2 (4 + 2 x 5 + 1) = 30,
  // rope 4 x 1 = 4, out 2 x 3 x 4 = 24, core 8 x 2 x 3 / 2 = 24 + 8 x 2 x 3 / 2 = 24] = 6 x 139 = 834 x 3 = 2502;
  // MLP 6 x 4 x (6 x 2 x 3 x 3 + 6 x 3 x 3) = 3888; MTP 6 x (3 x 4 + 2 x 16) = 264; logits 6 x 4 x 128 x 2 = 6144.
  ModelConfig m;
  m.hidden = 4;
  m.heads = 2;
  m.head_dim = 2;
  m.attention = AttentionKind::mla;
  m.qk_rope_head_dim = 1;
  m.v_head_dim = 3;
  m.q_lora_rank = 3;
  m.kv_lora_rank = 2;
  m.ffn = 6;
  m.experts = 4;
  m.top_k = 2;
  m.shared_experts = 1;
  m.layers = 2;
  m.mtp_layers = 1;
  m.vocab = 128;
  EXPECT_DOUBLE_EQ(megatron_flops_per_token(train_shape(m), 8, 1), 2502.0 + 3888.0 + 264.0 + 6144.0);
}

TEST(TrainPipeline, BubblesByHand) {
  // 1F1B, 4 stages of 1 s, 8 micro-batches: (m + pp - 1) t = 11 s; interleaved with 2 virtual stages:
  // (m + (pp - 1) / vpp) t = 9.5 s; one stage at 2 s paces the rest: 8 x 2 + (1 + 1 + 1) / 1 = 19 s.
  EXPECT_DOUBLE_EQ(pipeline_time_s({1, 1, 1, 1}, 8, 1), 11.0);
  EXPECT_DOUBLE_EQ(pipeline_time_s({1, 1, 1, 1}, 8, 2), 9.5);
  EXPECT_DOUBLE_EQ(pipeline_time_s({1, 2, 1, 1}, 8, 1), 19.0);
  EXPECT_DOUBLE_EQ(pipeline_time_s({3}, 5, 1), 15.0);  // no pipeline: m t
}

TEST(TrainPipeline, StepIsTheScheduleOfItsStages) {
  // Four stages of two layers each: the step is m max(t) + (sum(t) - max(t)) / vpp of its own stage times, plus
  // the exposed data-parallel communication and the optimizer; its bubble is the second term.
  Experiment e = two_rank_experiment();
  e.model.layers = 8;
  e.train.gpus = 8;
  e.train.pp = 4;
  e.train.global_batch = 16;
  const HardwareProfile hw = toy();
  const TrainShape shape = train_shape(e.model);
  for (int vpp : {1, 2}) {
    e.train.vpp = vpp;
    const TrainLayout layout = train_layout(e.train, shape, hw.devices_per_node);
    ASSERT_EQ(layout.micro_batches, 8);
    const TrainLoads even = exact({1024, 1024}, 2048, 1);
    const TrainStep st = model_train_step(hw, shape, layout, ExpertRows{}, even, even, ideal());
    ASSERT_EQ(st.stages_s.size(), 4u);
    const double sum = st.stages_s[0] + st.stages_s[1] + st.stages_s[2] + st.stages_s[3];
    EXPECT_NEAR(st.pipeline_s + st.bubble_s, 8 * st.stage_s + (sum - st.stage_s) / vpp, 1e-15);
    EXPECT_DOUBLE_EQ(st.waits_s, 0.0);  // one sample: nothing varies
    EXPECT_NEAR(st.step_s, st.pipeline_s + st.bubble_s + st.dp_exposed_s + st.optimizer_s, 1e-15);
  }
}

TEST(TrainErosion, TwoRankStepWithAKnownOverloadByHand) {
  // 2 EP ranks, one expert each, top-1, 1024 tokens a rank: 2048 assignments, 1024 a rank on the mean. A rank
  // overload of 1.5 puts 1536 on rank 0 and 512 on rank 1; the reference is exactly balanced (1024 each).
  // Experts, per layer and micro-batch, forward + backward = 3 x 2 rows P / F, P = 3 x 128 x 128 = 49152:
  //   the busiest rank: 3 x 2 x (1536 - 1024) x 49152 / 1e12 = 150.994944 us more.
  // The all-to-all (alltoall: one copy per assignment on another rank, 256 B of bf16 hidden, 1 GB/s): a rank
  // sends half of the other's assignments and receives half of its own; the busiest link moves
  //   max(768, 256) = 768 copies against 512 balanced: 256 x 256 B / 1e9 = 65.536 us more per phase,
  //   x 2 phases (dispatch, combine) x 2 passes (forward, backward) = 262.144 us more.
  // m = 4 sequences / (1 x dp 2) = 2 micro-batches, one stage, one MoE layer: the step is 2 x (150.994944 +
  // 262.144) us = 826.277888 us slower, all of it imbalance: expert compute 301.989888 us, all-to-all 524.288 us.
  const HardwareProfile hw = toy();
  Experiment e = two_rank_experiment();
  e.train.routing = *parse_train_routing("rank_overload:1.5");
  const TrainShape shape = train_shape(e.model);
  const TrainLayout layout = train_layout(e.train, shape, hw.devices_per_node);
  ASSERT_EQ(layout.micro_batches, 2);
  ASSERT_EQ(layout.group_tokens, 2048);
  TrainRouter router(e);
  const TrainLoads overloaded = router.loads(e.train.routing, layout);
  ASSERT_EQ(overloaded.samples.size(), 1u);
  EXPECT_EQ(overloaded.samples[0].demand, (std::vector<int64_t>{1536, 512}));
  const TrainLoads balanced = exact({1024, 1024}, 2048, 1);
  const TrainStep st = model_train_step(hw, shape, layout, ExpertRows{}, overloaded, balanced, ideal());
  const TrainErosion& x = st.erosion;
  EXPECT_NEAR(x.expert_compute_s, 2 * 150.994944e-6, 1e-10);
  EXPECT_NEAR(x.all_to_all_s, 2 * 262.144e-6, 1e-10);
  EXPECT_NEAR(x.waits_s, 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(x.drops_s, 0.0);
  EXPECT_DOUBLE_EQ(x.padding_s, 0.0);
  EXPECT_NEAR(x.actual_s - x.reference_s, 826.277888e-6, 1e-10);
  EXPECT_NEAR(x.sum_s(), x.actual_s - x.reference_s, 1e-15);
  EXPECT_DOUBLE_EQ(st.rank_overload, 1.5);
  // The same step with the overload's own loads as the reference erodes nothing.
  const TrainStep same = model_train_step(hw, shape, layout, ExpertRows{}, overloaded, overloaded, ideal());
  EXPECT_DOUBLE_EQ(same.erosion.actual_s, same.erosion.reference_s);
  EXPECT_DOUBLE_EQ(same.erosion.sum_s(), 0.0);
}

TEST(TrainErosion, CapacityDropsAndPaddingByHand) {
  // The overloaded ranks of the test above with a capacity of 1280 rows per expert: rank 0 keeps 1280 of 1536
  // (256 dropped, -256 rows: -75.497472 us per layer and micro-batch), and under the capacity layout rank 1 pads
  // 512 to 1280 while rank 0 computes 1280: the busiest rank's rows stay 1280, no padding on it (0 us); the
  // all-to-all moves the kept 1280 + 512: max(640, 256) = 640 copies against 512: 128 x 256 B / 1 GB/s = 32.768 us
  // a phase, x 4 = 131.072 us.
  const HardwareProfile hw = toy();
  Experiment e = two_rank_experiment();
  const TrainShape shape = train_shape(e.model);
  const TrainLayout layout = train_layout(e.train, shape, hw.devices_per_node);
  TrainLoads capped = exact({1536, 512}, 2048, 1);
  capped.samples[0].kept = {1280, 512};
  capped.capacity = 1280;
  const TrainLoads balanced = exact({1024, 1024}, 2048, 1);
  const TrainStep st = model_train_step(hw, shape, layout, ExpertRows{Layout::capacity, 64}, capped, balanced, ideal());
  const TrainErosion& x = st.erosion;
  EXPECT_NEAR(x.expert_compute_s, 2 * 150.994944e-6, 1e-10);
  EXPECT_NEAR(x.drops_s, -2 * 75.497472e-6, 1e-10);
  EXPECT_NEAR(x.padding_s, 0.0, 1e-12);
  EXPECT_NEAR(x.all_to_all_s, 2 * 131.072e-6, 1e-10);
  EXPECT_NEAR(x.sum_s(), x.actual_s - x.reference_s, 1e-15);
  EXPECT_NEAR(st.drop_rate, 256.0 / 2048, 1e-15);
  EXPECT_NEAR(st.padding_share, (1280.0 - 512) / 1792, 1e-15);
}

}  // namespace
}  // namespace moesim
