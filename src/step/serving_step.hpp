// One serving step of an expert-parallel decoder as its ranks run it (docs/serving.md): every rank's attention
// core on its own sequences (MHA/GQA, or DeepSeek's MLA on its compressed KV cache), its dense GEMMs (the
// attention's projections, the shared experts, the router, the dense layers, the LM head), its local experts'
// rows under the placement (src/cost/placement.hpp), and the dispatch and combine (src/cost/all_to_all.hpp). The
// layer waits for the slowest rank at each all-to-all. With two-batch overlap the layer runs as a compute stream
// and a communication stream, SGLang's four stages a layer. Multi-token prediction sets the tokens a step. The
// step's erosion against balanced routing and balanced attention is attributed by cause and adds up exactly.
// Pure arithmetic on given loads; host only. Covered by tests/step/serving_step_test.cpp (worked by hand).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/placement.hpp"
#include "src/step/attention_ranks.hpp"

namespace moesim {

enum class StepPhase { decode, prefill };

// The SMs DeepEP's normal (high-throughput) kernels take while they run: the Buffer's default num_sms, 20, as the
// DeepSeek-V3 report (arXiv:2412.19437, section 3.2.2) dedicates 20 of the H800's 132 SMs to communication.
constexpr int kCommSms = 20;
const char* to_string(StepPhase p);

// The step figures beyond the hardware profile's (ServingFit, fitted by `moesim validate --published` on the
// step tables; docs/serving.md "Validation"): the kernels of a layer the model does not list one by one (norms,
// residual adds, RoPE, the router's top-k, quantization of activations, the all-to-all's layout kernels), each a
// launch and its pass over the layer's activations, and the fraction of the bf16 peak the attention core reaches.
struct StepFigures {
  double other_kernels = 0;         // kernels per layer and micro-batch beyond those costed
  double attention_efficiency = 1;  // of the bf16 peak FLOP/s and of the bandwidth, the attention core
  // What a kernel launch costs in a decode step, as a share of the profile's launch_overhead: the engines replay
  // decode steps as captured CUDA graphs (SGLang's --cuda-graph-bs, vLLM's and TensorRT-LLM's graphs), which issue
  // the kernels without the host's per-launch cost; prefill launches them one by one.
  double decode_launch_share = 1;
  static StepFigures fitted();      // ServingFit's shipped figures
};

// One layer's time on the compute stream of each rank, before the all-to-all's barrier (pre: attention core,
// its projections, the other kernels) and after the dispatch (post: the local experts and the shared experts),
// for one micro-batch; and the two all-to-all phases of that micro-batch (the busiest device's transfer).
struct LayerStreams {
  std::vector<double> pre_s, post_s;  // [ranks]
  double dispatch_s = 0, combine_s = 0;
  // The kernels' fixed floors (a2a_figures), and whether they are low-latency kernels whose receive is a hook
  // the compute stream calls later (DeepEP's low-latency mode under two-batch overlap).
  double dispatch_floor_s = 0, combine_floor_s = 0;
  bool hooked = false;
};

// The per-layer breakdown as the published ones name it (SGLang's and DeepSeek's profiles): the mean rank's
// kernels on the compute stream, summed over the micro-batches, and what the layer takes.
//   layer = attention + dense + experts + other + compute_wait (the compute stream idle: exposed communication
//           and the waits for the slowest rank at each all-to-all).
// dispatch and combine are the communication kernels as a profile shows them: without overlap each phase's transfer
// plus the wait inside it for the slowest rank's data (sync), the compute stream's wait exactly; under two-batch
// overlap, kernels that block on their stream span their two stages, and hooked low-latency kernels show their
// floors and the part of the transfer the paired compute leaves exposed.
struct LayerBreakdown {
  double attention_s = 0, dense_s = 0, experts_s = 0, other_s = 0;
  double dispatch_s = 0, combine_s = 0;
  double sync_s = 0;          // waits for the slowest rank at the barriers (inside dispatch and combine)
  double compute_wait_s = 0;  // layer - the compute stream's kernels
  double compute_s = 0;       // the compute stream's kernels (attention + dense + experts + other)
  double communication_s = 0; // the communication stream's transfers (no waits)
  double layer_s = 0;
};

// The layer from its streams (docs/serving.md "Two streams"), m micro-batches of `streams` each:
//  none:      layer = max_r pre_r + D + max_r post_r + C;
//  two_batch: the four stages of SGLang's two-batch overlap, each one micro-batch's compute beside the other's
//             communication: layer = max(P, D) + max(Q, D) + max(Q, C) + max(P, C), P = max_r pre_r and
//             Q = max_r post_r of one micro-batch (a stage ends when its slower side does).
// `other_s` is the mean rank's share of pre_s that is `other` (for the breakdown), attention/dense/experts the
// mean rank's per micro-batch, as given.
struct LayerParts {
  double attention_s = 0, dense_pre_s = 0, dense_post_s = 0, experts_s = 0, other_s = 0;  // mean rank, one micro-batch
};
LayerBreakdown layer_breakdown(const LayerStreams& streams, const LayerParts& parts, A2aOverlap overlap);

// The step's erosion against its balanced counterfactual, each part what the step loses to one cause with the
// causes before it removed (in this order), so that the parts add up to step - ideal exactly:
//   attention_imbalance = step - step with every rank's attention the ranks' mean;
//   skew_compute        = that - the same with each device's experts as balanced loads run them;
//   skew_communication  = that - the same with balanced loads' dispatch and combine (the balanced step);
//   overlap             = the balanced step - ideal: communication not hidden and the streams' bubbles;
//   ideal               = the balanced step with each MoE layer max(compute stream, communication stream).
struct StepErosion {
  double attention_imbalance_s = 0, skew_compute_s = 0, skew_communication_s = 0, overlap_s = 0;
  double ideal_s = 0, actual_s = 0;
};

// What a step runs: the model, the placement, the sequences and the loads.
struct ServingStepInput {
  HardwareProfile hw;
  ModelConfig model;
  StepPhase phase = StepPhase::decode;
  // The MoE layer as the cost model takes it: placement (kind expert_parallel over the EP devices, or single),
  // formats, layout; its num_tokens, load and placement_load are set per draw. shared_experts is costed here with
  // the dense GEMMs, not in the layer.
  LayerCostInput moe;
  // Draws of the whole step's per-expert loads [experts] (every rank's tokens), each with the loads its plan is
  // made from (empty: the draw's own plan rule, as placement.hpp makes it). Every MoE layer's time is the mean
  // over the draws.
  std::vector<std::vector<int64_t>> loads, plan_loads;
  // The step's sequences, spread over attention_dp ranks by request_balance; the heads split over attention_tp.
  std::vector<StepSequence> sequences;
  int attention_dp = 1, attention_tp = 1;
  RequestBalance request_balance = RequestBalance::round_robin;
  // Each sequence's rank when the caller placed them (prefill filling each rank's token budget); empty: spread by
  // request_balance.
  std::vector<int> sequence_rank;
  // The ranks' shares as given (a share per attention rank; moesim serve's balanced-attention counterfactual gives
  // every rank the mean); when not empty, sequences and sequence_rank are not read.
  std::vector<RankShare> shares;
  int mtp_draft = 0;        // draft tokens a request verifies each step
  double mtp_accept = 0;    // the chance each draft token is accepted, given the ones before it were
  int devices_per_node = 8; // GPUs a node (tokens/s per node)
  double kv_bytes = 2;      // a KV cache value's bytes, as the attention core reads it (bf16 2, fp8 1)
  StepFigures figures = StepFigures::fitted();
};

struct ServingStep {
  LayerBreakdown moe_layer;        // one MoE layer, the mean over the draws
  LayerBreakdown balanced_layer;   // the same with balanced routing and balanced attention
  double dense_layer_s = 0;        // one dense layer (attention, its projections, the dense MLP, other)
  double head_s = 0;               // the LM head on the step's last tokens (the slowest rank)
  double mtp_s = 0;                // the MTP module's draft passes (a layer and the head, per draft token)
  double step_s = 0;
  double balanced_step_s = 0;      // the same step with balanced routing and balanced attention
  int64_t tokens_per_rank = 0;     // tokens each rank runs through the layers this step (the mean)
  double tokens_per_request = 1;   // output tokens a request gains a step: 1 + a + a^2 + ... (mtp_draft terms)
  double output_tokens_per_step = 0;  // every rank's requests x tokens_per_request (decode)
  double tpot_s = 0;               // step / tokens_per_request (decode)
  double output_tokens_per_s_per_gpu = 0, input_tokens_per_s_per_gpu = 0;
  double tokens_per_s_per_node = 0;   // output (decode) or input (prefill) tokens/s per GPU x devices_per_node
  // The attention cores over the ranks (this model's, MLA included): each rank's, the slowest (both columns), the
  // mean, the wait and the balance ratio.
  RankAttention attention;
  double balancedness = 1;         // mean / max routed assignments per device, the mean over the draws
  StepErosion erosion;
  int gpus = 1;
};

// Models one step. Throws ConfigError when the shape or the profile cannot carry it (naming the key).
ServingStep model_serving_step(const ServingStepInput& in);

// Tokens a request gains per step with `draft` draft tokens each accepted with chance `accept` (given the ones
// before it): 1 + accept + accept^2 + ... + accept^draft, as serving engines count accepted lengths.
double mtp_tokens_per_request(int draft, double accept);

}  // namespace moesim
