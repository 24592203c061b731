// One optimizer step of Megatron-style MoE training on a hardware profile (`moesim train`; docs/training.md):
// every layer's forward and backward on the slowest pipeline stage, the expert-parallel all-to-alls and what
// overlaps them, the pipeline schedule's bubble, the data-parallel gradient reduce-scatter and parameter
// all-gather, the optimizer, and the step's erosion against a forced-balance counterfactual by cause.
// Every GEMM (dense, grouped experts, attention core) is the kernel model (src/cost/roofline.hpp kernel_time_s,
// its backward src/cost/training_passes.hpp); every all-to-all is src/cost/all_to_all.hpp. The training figures
// (TrainFit) are fitted by `moesim validate --published` on the training tables (docs/training.md "Validation").
// Deterministic: micro-batches draw their routed samples from counter_rng. Host only.
// Covered by tests/train/train_step_test.cpp (worked by hand: a layer's FLOPs, the 1F1B bubble, a 2-rank erosion).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/train/train_input.hpp"
#include "src/train/train_routing.hpp"

namespace moesim {

// The training figures the step applies beyond the hardware profile's (TrainFit, train_fit.hpp): the achieved
// fraction of the dense peak of a training GEMM (Transformer Engine's cuBLAS and grouped GEMMs) in bf16, in
// software-scaled fp8 (per tensor or per block) and in MXFP8; the fraction of the bf16 peak the fused attention
// kernel reaches; a fixed time per layer and micro-batch (forward and backward) beyond its kernels: the
// launches and synchronisations of the many small kernels of a Megatron-Core layer that the kernel model does not
// list one by one; and the share of the all-to-all that train.ep_overlap hides under another micro-batch's
// compute, at most (the schedule's warm-up and cool-down micro-batches, and the SMs the communication kernels
// take, hide less than all of it).
struct TrainFigures {
  double gemm_efficiency_bf16 = 1, gemm_efficiency_fp8 = 1, gemm_efficiency_mxfp8 = 1;
  double attention_efficiency = 1;
  double layer_overhead_s = 0;
  double ep_overlap_fraction = 1;
  static TrainFigures fitted();  // TrainFit's shipped figures
};

// How the experts' rows are laid out (router.layout, router.block_size): dropless rows are the kept
// assignments; block rows round each expert up to a multiple of block_size; capacity rows are max(C, kept)
// for every expert (Megatron-Core's --moe-pad-expert-input-to-capacity).
struct ExpertRows {
  Layout layout = Layout::dropless;
  int block_size = 64;
};

// The parts of a step's time. Compute parts run on the compute stream; communication parts on their own
// streams, of which `exposed` is what the compute waits for.
enum class TrainPart {
  attention_gemm,   // QKV (or MLA's projections) and the output projection
  attention_core,   // the fused attention kernel (bf16), forward, backward and any recomputation
  mlp,              // the dense layers' MLP and the shared experts
  experts,          // the routed experts' grouped GEMMs, their activation and fp8 casts, on the busiest EP rank
  elementwise,      // norms, residual adds, RoPE, the router, permutation, fp8 casts of the dense GEMMs' inputs
  lm_head,          // embedding, final norm, output layer, cross-entropy (and the MTP layers' heads)
  tp_comm,          // sequence-parallel all-gathers and reduce-scatters
  cp_comm,          // context-parallel ring exchanges of keys and values
  ep_a2a,           // expert-parallel dispatch and combine, forward and backward
  pp_p2p,           // pipeline sends of activations and gradients
  overhead,         // the fixed time of each layer's forward and backward (TrainFigures::layer_overhead_s)
  count
};
constexpr int kTrainParts = static_cast<int>(TrainPart::count);
// Inline: the reports (src/report, which reads this header as plain data) name the parts too.
inline const char* to_string(TrainPart p) {
  switch (p) {
    case TrainPart::attention_gemm: return "attention_gemm";
    case TrainPart::attention_core: return "attention_core";
    case TrainPart::mlp: return "mlp";
    case TrainPart::experts: return "experts";
    case TrainPart::elementwise: return "elementwise";
    case TrainPart::lm_head: return "lm_head";
    case TrainPart::tp_comm: return "tp_comm";
    case TrainPart::cp_comm: return "cp_comm";
    case TrainPart::ep_a2a: return "ep_a2a";
    case TrainPart::pp_p2p: return "pp_p2p";
    case TrainPart::overhead: return "overhead";
    case TrainPart::count: break;
  }
  return "?";
}
inline bool is_communication(TrainPart p) {
  return p == TrainPart::tp_comm || p == TrainPart::cp_comm || p == TrainPart::ep_a2a || p == TrainPart::pp_p2p;
}

// Seconds of one pass through some layers, per part.
struct PartTimes {
  double busy[kTrainParts] = {};     // stream busy time
  double exposed[kTrainParts] = {};  // on the critical path (compute parts: busy)
  double critical_s() const;         // the sum of exposed
  void add(const PartTimes& o, double f = 1.0);
  void add_compute(TrainPart p, double s) {
    busy[static_cast<int>(p)] += s;
    exposed[static_cast<int>(p)] += s;
  }
  void add_comm(TrainPart p, double busy_s, double exposed_s) {
    busy[static_cast<int>(p)] += busy_s;
    exposed[static_cast<int>(p)] += exposed_s;
  }
  double compute_s() const;  // the compute parts' busy time
};

// The step's erosion against the forced-balance counterfactual (docs/training.md "Erosion"): reference_s is the
// step with the reference loads (forced balance, dropless, its own micro-batch draws), actual_s the step as
// modeled; the parts sum to actual - reference exactly, each the change its cause makes:
//   expert_compute_s - the busiest rank's expert GEMMs with the demanded (dropless) rows against the reference's;
//   drops_s          - the kept rows against the demanded ones (<= 0: dropped work is time not spent, never speed);
//   padding_s        - the layout's rows (capacity, block) against the kept ones;
//   all_to_all_s     - the all-to-all the step waits for, the kept loads' against the reference's (overlap
//                      included: under ep_overlap a slower expert phase hides more of it);
//   waits_s          - pipeline and data-parallel waits on the slowest rank: micro-batches whose draws make one
//                      stage or one expert data-parallel group slower than its mean, and the data-parallel
//                      communication exposed past the slowest stage's passes.
// Per MoE layer and micro-batch the first four are exact differences of the layer's time. On the pipeline they are
// taken in that order: from the reference's mean stage times, each cause's change of every stage is added in turn
// and the part is what it adds to the schedule (pipeline_time_s), so that a change of the slowest stage falls on
// the cause that makes it.
struct TrainErosion {
  double reference_s = 0, actual_s = 0;
  double expert_compute_s = 0, drops_s = 0, padding_s = 0, all_to_all_s = 0, waits_s = 0;
  double sum_s() const { return expert_compute_s + drops_s + padding_s + all_to_all_s + waits_s; }
};

struct TrainStep {
  TrainLayout layout;
  std::string routing;          // TrainLoads::description
  std::string reference;        // the reference's description
  double step_s = 0;
  double tokens_per_s_per_gpu = 0;
  double model_flops_per_token = 0;  // Megatron-LM's convention (train_flops.hpp)
  double tflops_per_gpu = 0;    // model TFLOP/s per GPU
  double mfu = 0;               // tflops_per_gpu / the profile's dense bf16 peak
  // The step: m x the slowest stage's micro-batch + bubble + waits + exposed DP communication + optimizer.
  double stage_s = 0;           // the slowest stage's mean time per micro-batch (forward and backward)
  int slowest_stage = 0;
  double pipeline_s = 0;        // m x stage_s
  double bubble_s = 0;          // (sum of the stages' times - the slowest's) / vpp
  double waits_s = 0;           // the drawn micro-batches' pipeline and expert-data-parallel waits
  double dp_busy_s = 0, dp_exposed_s = 0;  // gradient reduce-scatter and parameter all-gather
  double optimizer_s = 0;
  std::vector<double> stages_s;  // [pp] each stage's mean time per micro-batch
  PartTimes stage_parts;         // the slowest stage's mean micro-batch, per part
  TrainErosion erosion;
  // The routing as the step met it (means over the drawn micro-batches).
  double rank_overload = 1;      // max / mean kept assignments per EP rank
  double drop_rate = 0;          // dropped / demanded assignments
  double padding_share = 0;      // padded rows / kept rows
  double a2a_forward_s = 0;      // one MoE layer's forward dispatch + combine
  double experts_forward_s = 0;  // one MoE layer's forward experts on the busiest rank
  int simulated_groups = 1;      // expert-data-parallel groups whose draws were simulated (at most kMaxSimulatedGroups)
  int64_t simulated_micro_batches = 0;  // micro-batches simulated per group (the rest scaled)
};

// The simulation's bounds: the waits are the slowest of at most kMaxSimulatedGroups expert-data-parallel groups,
// each over at most kMaxSimulatedMicroBatches micro-batches (their mean scaled to the step's m), so that a step of
// any size models in milliseconds.
constexpr int kMaxSimulatedGroups = 8;
constexpr int64_t kMaxSimulatedMicroBatches = 512;

// The step of `layout` with `actual` loads against `reference` loads (both of the same layout's groups).
// Throws ConfigError naming the key when the profile cannot run it (no peak for the precision, mxfp8 without
// hardware.mxfp8, communication across nodes without hardware.inter_node_bandwidth_gbs).
TrainStep model_train_step(const HardwareProfile& hw, const TrainShape& shape, const TrainLayout& layout,
                           const ExpertRows& rows, const TrainLoads& actual, const TrainLoads& reference,
                           const TrainFigures& figures);

// The pipeline schedule's time for per-micro-batch stage times t [pp] (forward and backward of one micro-batch
// through all of the stage's virtual stages) and m micro-batches: m max(t) + (sum(t) - max(t)) / vpp. Uniform
// stages give (m + (pp - 1) / vpp) t: 1F1B's bubble (pp - 1) t (Narayanan et al. 2021, "Efficient Large-Scale
// Language Model Training on GPU Clusters Using Megatron-LM", section 2.2.1) and the interleaved schedule's
// (pp - 1) t / vpp (section 2.2.2).
double pipeline_time_s(const std::vector<double>& stage_s, int64_t micro_batches, int vpp);

}  // namespace moesim
