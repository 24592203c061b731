// One training step of a Megatron-style MoE model (see train_step.hpp; the formulas: docs/training.md).
#include "src/train/train_step.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/common/counter_rng.hpp"
#include "src/common/error.hpp"
#include "src/cost/all_to_all.hpp"
#include "src/cost/roofline.hpp"
#include "src/cost/training_passes.hpp"
#include "src/train/train_fit.hpp"
#include "src/train/train_flops.hpp"

namespace moesim {
namespace {

// Bytes and factors of the step that come from how Megatron-LM trains (docs/training.md "Constants"):
constexpr double kActBytes = 2;             // bf16 activations, gradients and all-to-all copies
constexpr double kGradReduceBytes = 4;      // fp32 gradients reduced across data parallelism (grad_reduce_in_fp32)
constexpr double kParamGatherBytes = 2;     // bf16 parameters gathered by the distributed optimizer
constexpr double kMainGradBytes = 8;        // the fp32 main gradient read and written per weight per micro-batch
constexpr double kAdamBytesPerParam = 30;   // fp32 master, exp_avg, exp_avg_sq read and written (24), fp32 grad read
                                            // (4), bf16 parameter written (2)
constexpr double kCrossEntropyBytesPerLogit = 20;  // fp32 logits read three times forward (12), the bf16 gradient
                                                   // written and the logits read again backward (8)
constexpr double kFlashBackwardFlops = 2.5; // FlashAttention-2's backward: 5 GEMMs to the forward's 2 (Dao 2023, 3.1)
constexpr uint64_t kStreamTrainDraws = 203; // which routed micro-batch a (group, micro-batch, layer) draws

// Bytes to quantize one value to fp8 (read bf16, write fp8) plus its scale's share.
double cast_bytes(TrainPrecision p) {
  switch (p) {
    case TrainPrecision::bf16: return 0;
    case TrainPrecision::fp8: return 3;
    case TrainPrecision::fp8_blockwise: return 3 + 4.0 / 128;  // one fp32 scale per 128 values
    case TrainPrecision::mxfp8: return 3 + 1.0 / 32;           // one E8M0 scale per 32 values
  }
  return 0;
}

struct Pass {
  double fwd_s = 0, bwd_s = 0;
};

// Everything of one layout that every layer reads.
struct Ctx {
  const HardwareProfile& hw;
  const TrainShape& s;
  const TrainLayout& l;
  ExpertRows rows;
  Dtype gemm_dtype = Dtype::bf16;
  KernelFigures kf_gemm, kf_bf16, kf_attn, kf_mem;
  double peak_bf16 = 0, bw = 0, cast = 0, overlap = 1;
  int tp = 1, cp = 1, ep = 1, etp = 1;
  HardwareProfile ep_hw;  // the profile with the EP group's ranks per node
  double intra_bw = 0, intra_latency = 0;

  Ctx(const HardwareProfile& h, const TrainShape& shape, const TrainLayout& layout, const ExpertRows& r,
      const TrainFigures& fig)
      : hw(h), s(shape), l(layout), rows(r), ep_hw(h) {
    const TrainPrecision p = l.cfg.precision;
    gemm_dtype = p == TrainPrecision::bf16 ? Dtype::bf16 : Dtype::fp8;
    if (!peak_flops_per_s(hw, Dtype::bf16))
      throw ConfigError(hw.name + ": hardware.peak_tflops.bf16: expected a bf16 peak for moesim train (attention and "
                                  "the output layer run in bf16), got none");
    if (!peak_flops_per_s(hw, gemm_dtype))
      throw ConfigError(std::string("train.precision: expected a precision with a dense peak on ") + hw.name + ", got " +
                        to_string(p));
    if (p == TrainPrecision::mxfp8 && !hw.mxfp8)
      throw ConfigError(std::string("train.precision: expected bf16, fp8 or fp8_blockwise on ") + hw.name +
                        " (no MXFP8 tensor cores: hardware.mxfp8 is false), got mxfp8");
    peak_bf16 = *peak_flops_per_s(hw, Dtype::bf16);
    bw = hw.memory_bandwidth_bytes_per_s;
    cast = cast_bytes(p);
    overlap = fig.ep_overlap_fraction;
    kf_gemm = KernelFigures::of(hw);
    kf_gemm.efficiency_flops = p == TrainPrecision::bf16    ? fig.gemm_efficiency_bf16
                               : p == TrainPrecision::mxfp8 ? fig.gemm_efficiency_mxfp8
                                                            : fig.gemm_efficiency_fp8;
    kf_bf16 = KernelFigures::of(hw);
    kf_bf16.efficiency_flops = fig.gemm_efficiency_bf16;
    // The K-step floor (roofline.hpp) is the serving kernels' (vLLM's fused_moe, fitted on its tables): a tile
    // walking K in series at k_step_us per 128. It caps a GPU at 2 x 128^3 FLOPs per SM per K step (about 1000
    // TFLOP/s on an H100, 1100 on a B200), below fp8's peak. Training's cuBLAS and CUTLASS GEMMs pipeline their
    // main loops over thousands of rows; their fitted efficiency carries what they lose, so they take no floor.
    kf_gemm.k_step_s = 0;
    kf_bf16.k_step_s = 0;
    kf_attn = KernelFigures::of(hw);
    kf_attn.efficiency_flops = fig.attention_efficiency;
    kf_mem = KernelFigures::of(hw);
    tp = l.cfg.tp;
    cp = l.cfg.cp;
    ep = l.cfg.ep;
    etp = l.cfg.etp;
    if (hw.devices_per_node > 0) ep_hw.devices_per_node = std::min(ep, std::max(1, hw.devices_per_node / etp));
    intra_bw = hw.link_bandwidth_bytes_per_s;
    intra_latency = hw.link_latency_s;
  }

  // The bandwidth and latency of a group whose GPUs span `extent` consecutive ranks: the scale-up link within a
  // node, the NIC across nodes.
  std::pair<double, double> link(int64_t extent, const char* what) const {
    const bool across = hw.devices_per_node > 0 && extent > hw.devices_per_node;
    const double b = across ? hw.inter_node_bandwidth_bytes_per_s : hw.link_bandwidth_bytes_per_s;
    if (b <= 0)
      throw ConfigError(hw.name + (across ? ": hardware.inter_node_bandwidth_gbs" : ": hardware.link_bandwidth_gbs") +
                        ": expected a positive number for the " + what + " of moesim train, got none");
    return {b, across ? hw.inter_node_latency_s : hw.link_latency_s};
  }

  // A dense GEMM [m, k] x [k, n] as the kernel model costs it: the up GEMM of a grouped launch of one non-gated
  // expert of hidden k and width n with m rows (roofline.hpp), forward and its backward (training_passes.hpp).
  Pass gemm(int64_t m, int64_t n, int64_t k, bool bf16_only = false) const {
    if (m <= 0 || n <= 0 || k <= 0) return {};
    const Dtype d = bf16_only ? Dtype::bf16 : gemm_dtype;
    const KernelFigures& f = bf16_only ? kf_bf16 : kf_gemm;
    const ExpertRoofline rm(hw, k, n, ExpertFormat(d, WeightDtype::same, false));
    GroupedCost g(rm);
    g.add(m);
    const KernelTerms t = g.terms(KernelScope::up_gemm);
    const double accumulate = static_cast<double>(n) * static_cast<double>(k) * kMainGradBytes / bw;
    return {kernel_time_s(t, f), kernel_time_s(backward_terms(t, accumulate), f)};
  }

  // A SwiGLU (or two-matrix) MLP of width `ffn` on m rows: the up and down GEMMs of one expert (roofline.hpp).
  Pass mlp(int64_t m, int64_t ffn) const {
    if (m <= 0 || ffn <= 0) return {};
    const ExpertRoofline rm(hw, s.hidden, ffn, ExpertFormat(gemm_dtype, WeightDtype::same, s.gated));
    GroupedCost g(rm);
    g.add(m);
    KernelTerms t = g.terms(KernelScope::up_gemm);
    const KernelTerms d = g.terms(KernelScope::down_gemm);
    t.memory_s += d.memory_s;
    t.compute_s += d.compute_s;
    t.ideal_compute_s += d.ideal_compute_s;
    t.k_steps += d.k_steps;
    t.kernels += d.kernels;
    const double accumulate = rm.weight_bytes / bytes_per_weight(ExpertFormat(gemm_dtype)) * kMainGradBytes / bw;
    return {kernel_time_s(t, kf_gemm), kernel_time_s(backward_terms(t, accumulate), kf_gemm)};
  }

  // Memory-bound kernels moving `values` bf16 values in `kernels` launches (the kernel model, memory term only).
  double elementwise(double values, int kernels) const {
    KernelTerms t;
    t.memory_s = values * kActBytes / bw;
    t.kernels = kernels;
    return kernel_time_s(t, kf_mem);
  }
  // fp8 quantization of GEMM inputs of `values` values: one cast forward (the input), three backward (the
  // output gradient for dgrad; the input and the gradient transposed for wgrad). 0 in bf16.
  Pass casts(double values, int gemms) const {
    if (cast <= 0 || values <= 0) return {};
    KernelTerms t;
    t.memory_s = values * cast / bw;
    t.kernels = gemms;
    const double one = kernel_time_s(t, kf_mem);
    return {one, 3 * one};
  }

  // A ring collective (all-gather or reduce-scatter) of a tensor of `bytes` over n GPUs spanning `extent` ranks.
  double ring(double bytes, int64_t n, int64_t extent, const char* what) const {
    if (n <= 1 || bytes <= 0) return 0;
    const auto [b, lat] = link(extent, what);
    return static_cast<double>(n - 1) / static_cast<double>(n) * bytes / b + lat;
  }
};

// The attention half of a layer (and its norm and residual), per micro-batch on one GPU.
struct AttentionCost {
  PartTimes fwd, bwd;
  double core_fwd_s = 0;
};

AttentionCost attention_cost(const Ctx& c) {
  const TrainShape& s = c.s;
  const int64_t T = c.l.attention_tokens, Tl = c.l.local_tokens, h = s.hidden;
  const int tp = c.tp;
  const int64_t heads = s.heads / tp;
  AttentionCost a;
  double gemm_fwd = 0, gemm_bwd = 0, cast_values = 0;
  int gemms = 0;
  double d_qk = s.head_dim, d_v = s.head_dim, rope_values = 0, kv_values = 0;
  auto add = [&](Pass p, int64_t in_values) {
    gemm_fwd += p.fwd_s;
    gemm_bwd += p.bwd_s;
    cast_values += static_cast<double>(in_values) * T;
    ++gemms;
  };
  if (s.attention == AttentionKind::mla) {
    d_qk = s.head_dim + s.qk_rope_head_dim;
    d_v = s.v_head_dim;
    if (s.q_lora_rank > 0) {
      add(c.gemm(T, s.q_lora_rank, h), h);  // the down projections are not split over tensor parallelism
      add(c.gemm(T, heads * static_cast<int64_t>(d_qk), s.q_lora_rank), s.q_lora_rank);
    } else {
      add(c.gemm(T, heads * static_cast<int64_t>(d_qk), h), h);
    }
    add(c.gemm(T, s.kv_lora_rank + s.qk_rope_head_dim, h), h);
    add(c.gemm(T, heads * (s.head_dim + s.v_head_dim), s.kv_lora_rank), s.kv_lora_rank);
    add(c.gemm(T, h, heads * s.v_head_dim), heads * s.v_head_dim);
    rope_values = 2.0 * (heads + 1) * s.qk_rope_head_dim;
    kv_values = heads * (d_qk + d_v);
  } else {
    const int64_t kv_local = s.kv_heads >= tp ? s.kv_heads / tp : 1;
    add(c.gemm(T, (heads + 2 * kv_local) * s.head_dim, h), h);
    add(c.gemm(T, h, heads * s.head_dim), heads * s.head_dim);
    rope_values = 2.0 * (heads + kv_local) * s.head_dim;
    kv_values = 2.0 * kv_local * s.head_dim;
  }
  a.fwd.add_compute(TrainPart::attention_gemm, gemm_fwd);
  a.bwd.add_compute(TrainPart::attention_gemm, gemm_bwd);
  // The fused attention: (d_qk + d_v) seq FLOPs per token and head (causal: each query attends to seq / 2 keys on
  // average, 2 FLOPs per multiply-add, QK^T and PV); q, k, v read and o written once; bf16.
  KernelTerms core;
  const double flops = static_cast<double>(T) * heads * (d_qk + d_v) * static_cast<double>(c.l.cfg.seq_len);
  core.compute_s = core.ideal_compute_s = flops / c.peak_bf16;
  core.memory_s = static_cast<double>(T) * heads * 2.0 * (d_qk + d_v) * kActBytes / c.bw;
  core.kernels = 1;
  a.core_fwd_s = kernel_time_s(core, c.kf_attn);
  KernelTerms core_b = core;
  core_b.compute_s *= kFlashBackwardFlops;
  core_b.ideal_compute_s *= kFlashBackwardFlops;
  core_b.memory_s *= 2;
  core_b.kernels = 2;
  const double core_bwd = kernel_time_s(core_b, c.kf_attn);
  a.fwd.add_compute(TrainPart::attention_core, a.core_fwd_s);
  a.bwd.add_compute(TrainPart::attention_core, core_bwd);
  // Norm (2 h), residual add (3 h) on the sequence-parallel tokens; RoPE on q and k; MLA's two low-rank norms.
  double values = 5.0 * h * Tl + rope_values * T;
  int kernels = 3;
  if (s.attention == AttentionKind::mla) {
    values += 2.0 * (s.q_lora_rank + s.kv_lora_rank) * T;
    kernels += 2;
  }
  const Pass cast = c.casts(cast_values, gemms);
  a.fwd.add_compute(TrainPart::elementwise, c.elementwise(values, kernels) + cast.fwd_s);
  a.bwd.add_compute(TrainPart::elementwise, c.elementwise(2 * values, 2 * kernels) + cast.bwd_s);
  // Sequence parallelism: an all-gather before the QKV projection and a reduce-scatter after the output
  // projection, forward; the two swapped, backward. With the overlap, each hides under the attention's GEMMs.
  if (tp > 1) {
    const double one = c.ring(static_cast<double>(T) * h * kActBytes, tp, tp, "tensor-parallel collectives");
    const double comm = 2 * one;
    const bool ov = c.l.cfg.tp_comm_overlap;
    a.fwd.add_comm(TrainPart::tp_comm, comm, ov ? std::max(0.0, comm - gemm_fwd) : comm);
    a.bwd.add_comm(TrainPart::tp_comm, comm, ov ? std::max(0.0, comm - gemm_bwd) : comm);
  }
  // Context parallelism: the ring passes each rank's keys and values cp - 1 times forward, and their gradients
  // too backward, under the fused attention.
  if (c.cp > 1) {
    const double bytes = static_cast<double>(c.cp - 1) * T * kv_values * kActBytes;
    const auto [b, lat] = c.link(int64_t{c.tp} * c.cp, "context-parallel ring");
    const double f = bytes / b + (c.cp - 1) * lat;
    a.fwd.add_comm(TrainPart::cp_comm, f, std::max(0.0, f - a.core_fwd_s));
    a.bwd.add_comm(TrainPart::cp_comm, 2 * f, std::max(0.0, 2 * f - core_bwd));
  }
  return a;
}

// A tensor-parallel MLP of width `ffn` (a dense layer's, or the shared experts'), with its activation, casts and
// sequence-parallel collectives; `with_norm` adds the pre-MLP norm and residual add of a dense layer.
void add_mlp(const Ctx& c, int64_t ffn, bool with_norm, PartTimes& fwd, PartTimes& bwd) {
  if (ffn <= 0) return;
  const int64_t T = c.l.attention_tokens, h = c.s.hidden;
  const int64_t f_local = (ffn + c.tp - 1) / c.tp;
  const Pass p = c.mlp(T, f_local);
  fwd.add_compute(TrainPart::mlp, p.fwd_s);
  bwd.add_compute(TrainPart::mlp, p.bwd_s);
  const double act = (c.s.gated ? 3.0 : 2.0) * f_local * T;  // the activation reads u and writes ffn
  const double norm = with_norm ? 5.0 * h * c.l.local_tokens : 0;
  const int kernels = with_norm ? 3 : 1;
  const Pass cast = c.casts(static_cast<double>(T) * (h + f_local), 2);
  fwd.add_compute(TrainPart::elementwise, c.elementwise(act + norm, kernels) + cast.fwd_s);
  bwd.add_compute(TrainPart::elementwise, c.elementwise(2 * (act + norm), 2 * kernels) + cast.bwd_s);
  if (c.tp > 1) {
    const double comm = 2 * c.ring(static_cast<double>(T) * h * kActBytes, c.tp, c.tp, "tensor-parallel collectives");
    const bool ov = c.l.cfg.tp_comm_overlap;
    fwd.add_comm(TrainPart::tp_comm, comm, ov ? std::max(0.0, comm - p.fwd_s) : comm);
    bwd.add_comm(TrainPart::tp_comm, comm, ov ? std::max(0.0, comm - p.bwd_s) : comm);
  }
}

// The MoE layer's parts that do not depend on the loads: the pre-MLP norm and residual, the router, the local
// side of the permutation, the shared experts.
void add_moe_fixed(const Ctx& c, PartTimes& fwd, PartTimes& bwd) {
  const int64_t Tl = c.l.local_tokens, h = c.s.hidden;
  const Pass router = c.gemm(Tl, c.s.experts, h, true);
  // Norm and residual (5 h), the router's scores, top-k and probabilities (fp32: 4 E values of 2 bytes), the
  // tokens read for dispatch and written back at combine (2 h).
  const double values = 5.0 * h * Tl + 4.0 * c.s.experts * Tl + 2.0 * h * Tl;
  fwd.add_compute(TrainPart::elementwise, router.fwd_s + c.elementwise(values, 6));
  bwd.add_compute(TrainPart::elementwise, router.bwd_s + c.elementwise(2 * values, 12));
  add_mlp(c, int64_t{c.s.shared_experts} * c.s.moe_ffn, false, fwd, bwd);
}

// One micro-batch's routed experts and all-to-all in one MoE layer, from its loads.
struct MoeDraw {
  double experts_demand_s = 0, experts_kept_s = 0, experts_rows_s = 0;  // the busiest rank, every pass
  double experts_forward_s = 0;  // the busiest rank's forward at the layout's rows
  double a2a_s = 0;              // dispatch + combine over every pass
  double a2a_forward_s = 0;
  double rank_overload = 1;
  double dropped = 0, demanded = 0, padded = 0, kept = 0;
};

// Whether the backward pass runs each MoE layer's forward again (recompute moe or full).
bool recomputes_moe(const Ctx& c) {
  return c.l.cfg.recompute == Recompute::full || c.l.cfg.recompute == Recompute::moe;
}

// The busiest rank's experts at `rows` [experts]: forward, backward (and the forward again under full
// recomputation), with their fp8 casts.
std::pair<double, double> experts_time(const Ctx& c, const ExpertRoofline& rm, const std::vector<int64_t>& rows) {
  const int per_rank = c.s.experts / c.ep;
  const int passes_fwd = recomputes_moe(c) ? 2 : 1;
  const double accumulate = static_cast<double>(per_rank) * rm.weight_bytes /
                            bytes_per_weight(ExpertFormat(c.gemm_dtype)) * kMainGradBytes / c.bw;
  double most = 0, most_fwd = 0;
  for (int r = 0; r < c.ep; ++r) {
    GroupedCost g(rm);
    int64_t rank_rows = 0;
    for (int j = 0; j < per_rank; ++j) {
      g.add(rows[static_cast<size_t>(r) * per_rank + j]);
      rank_rows += rows[static_cast<size_t>(r) * per_rank + j];
    }
    const KernelTerms t = g.terms(KernelScope::experts);
    const Pass cast = c.casts(static_cast<double>(rank_rows) * (c.s.hidden + rm.ffn), 2);
    const double fwd = kernel_time_s(t, c.kf_gemm) + cast.fwd_s;
    const double bwd = kernel_time_s(backward_terms(t, accumulate), c.kf_gemm) + cast.bwd_s;
    const double total = passes_fwd * fwd + bwd;
    if (total > most) {
      most = total;
      most_fwd = fwd;
    }
  }
  return {most, most_fwd};
}

MoeDraw moe_draw(const Ctx& c, const ExpertRoofline& rm, const TrainLoads& loads, const MicroBatchLoads& mb,
                 Layout layout) {
  MoeDraw d;
  const int E = c.s.experts;
  std::vector<int64_t> rows(mb.kept);
  for (int e = 0; e < E; ++e) {
    if (layout == Layout::block) {
      const int64_t b = std::max(1, c.rows.block_size);
      rows[e] = (mb.kept[e] + b - 1) / b * b;
    } else if (layout == Layout::capacity) {
      rows[e] = std::max(loads.capacity > 0 ? loads.capacity : *std::max_element(mb.kept.begin(), mb.kept.end()),
                         mb.kept[e]);
    }
    d.demanded += static_cast<double>(mb.demand[e]);
    d.kept += static_cast<double>(mb.kept[e]);
    d.padded += static_cast<double>(rows[e] - mb.kept[e]);
  }
  d.dropped = d.demanded - d.kept;
  d.experts_demand_s = experts_time(c, rm, mb.demand).first;
  d.experts_kept_s = mb.kept == mb.demand ? d.experts_demand_s : experts_time(c, rm, mb.kept).first;
  const auto [rows_s, rows_fwd] = experts_time(c, rm, rows);
  d.experts_rows_s = rows_s;
  d.experts_forward_s = rows_fwd;
  // Per-rank assignments (kept) and the all-to-all that moves them.
  const int per_rank = E / c.ep;
  std::vector<int64_t> rank(c.ep, 0);
  for (int e = 0; e < E; ++e) rank[e / per_rank] += mb.kept[e];
  int64_t mx = 0, sum = 0;
  for (int64_t r : rank) {
    mx = std::max(mx, r);
    sum += r;
  }
  if (sum > 0) d.rank_overload = static_cast<double>(mx) * c.ep / static_cast<double>(sum);
  if (c.ep > 1) {
    A2aTraffic t;
    t.device_assignments = rank;
    t.num_tokens = loads.tokens;
    t.top_k = loads.top_k;
    t.num_experts = E;
    t.node_limit = loads.node_limit;
    t.fanout = A2aFanout::random;
    t.dispatch_bytes = t.combine_bytes = a2a_copy_bytes(A2aDtype::bf16, Dtype::bf16, c.s.hidden);
    const A2aKernel kernel = c.l.cfg.dispatcher == Dispatcher::alltoall ? A2aKernel::simple : A2aKernel::normal;
    const A2aCost a = all_to_all(c.ep_hw, kernel, t);
    const int passes = recomputes_moe(c) ? 3 : 2;
    d.a2a_forward_s = a.time_s();
    d.a2a_s = passes * a.time_s();
  }
  return d;
}

// The all-to-all a layer waits for: all of it, or under ep_overlap what the layer's compute (another
// micro-batch's, of the same layer) does not hide: ep_overlap_fraction of the shorter of the two.
double exposed_a2a(const Ctx& c, double a2a_s, double compute_s) {
  return c.l.cfg.ep_overlap ? a2a_s - c.overlap * std::min(a2a_s, compute_s) : a2a_s;
}

// Parameters a GPU of a stage holds: those its data-parallel group reduces (attention, dense MLPs, shared experts,
// router, embedding and output layer) and its experts (reduced over expert data parallelism).
struct StageParams {
  double dense = 0, experts = 0;
};

StageParams stage_params(const Ctx& c, const StageLayers& st) {
  const TrainShape& s = c.s;
  const double h = static_cast<double>(s.hidden);
  const double f = s.gated ? 3.0 : 2.0;
  double attn = 0;
  if (s.attention == AttentionKind::mla) {
    const double nh = s.heads;
    attn = (s.q_lora_rank > 0 ? h * s.q_lora_rank + s.q_lora_rank * nh * (s.head_dim + s.qk_rope_head_dim) / c.tp
                              : h * nh * (s.head_dim + s.qk_rope_head_dim) / c.tp) +
           h * (s.kv_lora_rank + s.qk_rope_head_dim) + s.kv_lora_rank * nh * (s.head_dim + s.v_head_dim) / c.tp +
           nh * s.v_head_dim * h / c.tp;
  } else {
    attn = h * (static_cast<double>(s.heads) + 2.0 * s.kv_heads) * s.head_dim / c.tp +
           static_cast<double>(s.heads) * s.head_dim * h / c.tp;
  }
  const int moe = st.moe + st.mtp;
  StageParams p;
  p.dense = attn * st.layers() + h * static_cast<double>(s.dense_ffn) * f / c.tp * st.dense +
            (h * static_cast<double>(s.moe_ffn) * f * s.shared_experts / c.tp + h * s.experts) * moe;
  const double vocab = static_cast<double>(megatron_padded_vocab(s.vocab, c.tp)) / c.tp * h;
  if (st.embedding) p.dense += vocab;
  if (st.lm_head) p.dense += vocab;
  if (st.mtp > 0) p.dense += 2 * h * h / c.tp * st.mtp;
  p.experts = static_cast<double>(s.experts / c.ep) * h * static_cast<double>(s.moe_ffn / c.etp) * f * moe;
  return p;
}

struct DrawSet {
  std::vector<MoeDraw> draws;
  std::vector<double> layer_s;   // per draw: experts at the layout's rows + the exposed all-to-all
  double mean_layer_s = 0;
  double mean_expert_demand = 0, mean_drops = 0, mean_padding = 0, mean_exposed = 0;
  double mean_rows = 0, mean_a2a = 0, mean_exposed_busy = 0;
};

// The draws of `loads` at the layout's rows (the reference: dropless rows).
DrawSet draw_set(const Ctx& c, const ExpertRoofline& rm, const TrainLoads& loads, double fixed_compute_s,
                 Layout layout) {
  DrawSet ds;
  MOESIM_REQUIRE(!loads.samples.empty(), "a training step needs at least one routed micro-batch");
  for (const MicroBatchLoads& mb : loads.samples) {
    MOESIM_REQUIRE(static_cast<int>(mb.demand.size()) == c.s.experts && mb.kept.size() == mb.demand.size(),
                   "loads have " << mb.demand.size() << " experts, expected " << c.s.experts);
    const MoeDraw d = moe_draw(c, rm, loads, mb, layout);
    const double exposed = exposed_a2a(c, d.a2a_s, fixed_compute_s + d.experts_rows_s);
    ds.draws.push_back(d);
    ds.layer_s.push_back(d.experts_rows_s + exposed);
    const double n = static_cast<double>(loads.samples.size());
    ds.mean_layer_s += (d.experts_rows_s + exposed) / n;
    ds.mean_expert_demand += d.experts_demand_s / n;
    ds.mean_drops += (d.experts_kept_s - d.experts_demand_s) / n;
    ds.mean_padding += (d.experts_rows_s - d.experts_kept_s) / n;
    ds.mean_exposed += exposed / n;
    ds.mean_rows += d.experts_rows_s / n;
    ds.mean_a2a += d.a2a_s / n;
  }
  return ds;
}

// The pipeline of one routing: each stage's mean micro-batch, and the waits its draws add.
struct Pipeline {
  std::vector<double> stage_s;
  double mean_s = 0;   // pipeline_time_s of the means
  double waits_s = 0;  // the drawn micro-batches' pipeline and expert-data-parallel waits (>= 0)
  int groups = 1;
  int64_t simulated = 0;
};

Pipeline pipeline_of(const Ctx& c, const std::vector<StageLayers>& stages, const std::vector<double>& base_s,
                     const DrawSet& ds, uint64_t seed) {
  Pipeline p;
  const int pp = static_cast<int>(stages.size());
  const int64_t m = c.l.micro_batches;
  const int vpp = c.l.cfg.vpp;
  for (int s = 0; s < pp; ++s) p.stage_s.push_back(base_s[s] + (stages[s].moe + stages[s].mtp) * ds.mean_layer_s);
  p.mean_s = pipeline_time_s(p.stage_s, m, vpp);
  const int slowest = static_cast<int>(std::max_element(p.stage_s.begin(), p.stage_s.end()) - p.stage_s.begin());
  const int R = static_cast<int>(ds.layer_s.size());
  p.groups = std::min(c.l.edp, kMaxSimulatedGroups);
  p.simulated = std::min(m, kMaxSimulatedMicroBatches);
  bool varies = false;
  for (double v : ds.layer_s) varies = varies || v != ds.layer_s.front();
  if (!varies || (pp == 1 && p.groups == 1)) return p;
  // Each (group, micro-batch, stage, layer) draws one routed micro-batch. A micro-batch waits for its slowest
  // stage (1F1B's steady state runs at the pace of the slowest stage's current micro-batch); the step waits for
  // the slowest expert-data-parallel group (its gradients are reduced with the others').
  std::vector<double> group_sum(p.groups, 0.0);
  double stage_wait = 0;
  std::vector<double> t(pp);
  for (int g = 0; g < p.groups; ++g) {
    for (int64_t mu = 0; mu < p.simulated; ++mu) {
      double mx = 0;
      for (int s = 0; s < pp; ++s) {
        double v = base_s[s];
        const int layers = stages[s].moe + stages[s].mtp;
        for (int l = 0; l < layers; ++l) {
          const uint64_t key = ((static_cast<uint64_t>(g) * 1000003u + static_cast<uint64_t>(mu)) * 4099u +
                                static_cast<uint64_t>(s)) * 65537u + static_cast<uint64_t>(l);
          v += ds.layer_s[counter_below(seed, kStreamTrainDraws, key, static_cast<uint64_t>(R))];
        }
        t[s] = v;
        mx = std::max(mx, v);
      }
      stage_wait += mx - t[slowest];
      group_sum[g] += mx;
    }
  }
  const double per_mb = stage_wait / (static_cast<double>(p.groups) * static_cast<double>(p.simulated));
  double mean_group = 0, max_group = 0;
  for (double v : group_sum) {
    mean_group += v / p.groups;
    max_group = std::max(max_group, v);
  }
  // Over the m micro-batches the stage waits add up (m x their mean); the spread between groups grows as the
  // square root of the micro-batches summed (their draws are independent).
  const double scale = std::sqrt(static_cast<double>(m) / static_cast<double>(p.simulated));
  p.waits_s = static_cast<double>(m) * per_mb + scale * (max_group - mean_group);
  return p;
}

}  // namespace

TrainFigures TrainFigures::fitted() {
  TrainFigures f;
  f.gemm_efficiency_bf16 = TrainFit::gemm_efficiency_bf16;
  f.gemm_efficiency_fp8 = TrainFit::gemm_efficiency_fp8;
  f.gemm_efficiency_mxfp8 = TrainFit::gemm_efficiency_mxfp8;
  f.attention_efficiency = TrainFit::attention_efficiency;
  f.layer_overhead_s = TrainFit::layer_overhead_us * 1e-6;
  f.ep_overlap_fraction = TrainFit::ep_overlap_fraction;
  return f;
}

double PartTimes::critical_s() const {
  double s = 0;
  for (double v : exposed) s += v;
  return s;
}

double PartTimes::compute_s() const {
  double s = 0;
  for (int i = 0; i < kTrainParts; ++i)
    if (!is_communication(static_cast<TrainPart>(i))) s += busy[i];
  return s;
}

void PartTimes::add(const PartTimes& o, double f) {
  for (int i = 0; i < kTrainParts; ++i) {
    busy[i] += f * o.busy[i];
    exposed[i] += f * o.exposed[i];
  }
}

double pipeline_time_s(const std::vector<double>& stage_s, int64_t micro_batches, int vpp) {
  if (stage_s.empty()) return 0;
  double sum = 0, mx = 0;
  for (double t : stage_s) {
    sum += t;
    mx = std::max(mx, t);
  }
  return static_cast<double>(micro_batches) * mx + (sum - mx) / std::max(1, vpp);
}

TrainStep model_train_step(const HardwareProfile& hw, const TrainShape& shape, const TrainLayout& layout,
                           const ExpertRows& rows, const TrainLoads& actual, const TrainLoads& reference,
                           const TrainFigures& figures) {
  const Ctx c(hw, shape, layout, rows, figures);
  const std::vector<StageLayers> stages = stage_layers(shape, layout);
  const int pp = layout.cfg.pp;
  const int64_t m = layout.micro_batches;
  const bool full = layout.cfg.recompute == Recompute::full;

  // The layer kinds, one micro-batch each (forward, backward, recomputation).
  const AttentionCost attn = attention_cost(c);
  PartTimes attention = attn.fwd;
  attention.add(attn.bwd);
  attention.add_compute(TrainPart::overhead, figures.layer_overhead_s);
  if (full) attention.add(attn.fwd);
  if (layout.cfg.recompute == Recompute::selective) attention.add_compute(TrainPart::attention_core, attn.core_fwd_s);
  PartTimes dense_f, dense_b;
  add_mlp(c, shape.dense_ffn, true, dense_f, dense_b);
  PartTimes dense = dense_f;
  dense.add(dense_b);
  if (full) dense.add(dense_f);
  PartTimes moe_f, moe_b;
  add_moe_fixed(c, moe_f, moe_b);
  PartTimes moe_fixed = moe_f;
  moe_fixed.add(moe_b);
  if (full || layout.cfg.recompute == Recompute::moe) moe_fixed.add(moe_f);
  // The output layer (bf16, as Transformer Engine keeps it) with its final norm, all-gather and vocab-parallel
  // cross-entropy; the embedding's lookup and gradient; an MTP layer's projection of [h, embedding] to h.
  const int64_t T = layout.attention_tokens;
  const int64_t vocab_local = megatron_padded_vocab(shape.vocab, c.tp) / c.tp;
  PartTimes head;
  {
    const Pass g = c.gemm(T, vocab_local, shape.hidden, true);
    const double ce = static_cast<double>(T) * vocab_local * kCrossEntropyBytesPerLogit / c.bw;
    KernelTerms ce_terms;
    ce_terms.memory_s = ce;
    ce_terms.kernels = 4;
    head.add_compute(TrainPart::lm_head, g.fwd_s + g.bwd_s + kernel_time_s(ce_terms, c.kf_mem) +
                                             c.elementwise(2.0 * 2 * shape.hidden * layout.local_tokens, 2));
    if (c.tp > 1) {
      const double comm = 2 * c.ring(static_cast<double>(T) * shape.hidden * kActBytes, c.tp, c.tp, "output layer");
      head.add_comm(TrainPart::tp_comm, comm, comm);
    }
  }
  PartTimes embedding;
  embedding.add_compute(TrainPart::lm_head, c.elementwise(5.0 * shape.hidden * T, 2));
  PartTimes mtp_extra = head;
  {
    const Pass g = c.gemm(T, shape.hidden, 2 * shape.hidden);
    mtp_extra.add_compute(TrainPart::lm_head, g.fwd_s + g.bwd_s + c.elementwise(4.0 * 2 * shape.hidden * T, 4));
  }
  // Pipeline sends: a micro-batch's activations forward and their gradients backward, each GPU its
  // sequence-parallel share, to the neighbouring stage gpus / pp ranks away.
  PartTimes p2p;
  if (pp > 1) {
    const auto [b, lat] = c.link(layout.cfg.gpus / pp + 1, "pipeline sends");
    const double one = static_cast<double>(layout.local_tokens) * shape.hidden * kActBytes / b + lat;
    p2p.add_comm(TrainPart::pp_p2p, 2 * one, 2 * one);
  }

  // Each stage's parts without the loads' (the routed experts and the all-to-all).
  std::vector<PartTimes> base_parts(pp);
  std::vector<double> base_s(pp);
  for (int s = 0; s < pp; ++s) {
    PartTimes& b = base_parts[s];
    const StageLayers& st = stages[s];
    b.add(attention, st.layers());
    b.add(dense, st.dense);
    b.add(moe_fixed, st.moe + st.mtp);
    if (st.embedding) b.add(embedding);
    if (st.lm_head) b.add(head);
    b.add(mtp_extra, st.mtp);
    b.add(p2p);
    base_s[s] = b.critical_s();
  }
  // The compute a MoE layer's all-to-all can hide under (ep_overlap): the layer's own, but the experts.
  PartTimes moe_layer = attention;
  moe_layer.add(moe_fixed);
  const double fixed_compute = moe_layer.compute_s();

  const ExpertRoofline rm(hw, shape.hidden, shape.moe_ffn / layout.cfg.etp,
                          ExpertFormat(c.gemm_dtype, WeightDtype::same, shape.gated));
  const DrawSet act = draw_set(c, rm, actual, fixed_compute, rows.layout);
  const bool same = rows.layout == Layout::dropless && actual.capacity == reference.capacity &&
                    actual.node_limit == reference.node_limit && actual.samples.size() == reference.samples.size() &&
                    std::equal(actual.samples.begin(), actual.samples.end(), reference.samples.begin(),
                               [](const MicroBatchLoads& a, const MicroBatchLoads& b) {
                                 return a.demand == b.demand && a.kept == b.kept;
                               });
  const DrawSet ref = same ? act : draw_set(c, rm, reference, fixed_compute, Layout::dropless);
  // Expert tensor parallelism: the rows' all-gather and reduce-scatter over etp GPUs, forward and backward.
  double etp_comm = 0;
  if (layout.cfg.etp > 1) {
    const double rows_bytes = static_cast<double>(layout.local_tokens) * shape.top_k * shape.hidden * kActBytes *
                              layout.cfg.etp;
    etp_comm = (recomputes_moe(c) ? 3 : 2) * 2 *
               c.ring(rows_bytes, layout.cfg.etp, layout.cfg.etp, "expert tensor-parallel collectives");
    for (int s = 0; s < pp; ++s) {
      base_parts[s].add_comm(TrainPart::tp_comm, etp_comm * (stages[s].moe + stages[s].mtp),
                             etp_comm * (stages[s].moe + stages[s].mtp));
      base_s[s] = base_parts[s].critical_s();
    }
  }
  const Pipeline pa = pipeline_of(c, stages, base_s, act, 0x7472a1ull);
  const Pipeline pr = same ? pa : pipeline_of(c, stages, base_s, ref, 0x7472a1ull);

  // Data-parallel communication and the optimizer, per stage; the step waits for the slowest.
  const bool dp_overlap = layout.cfg.dp_overlap;
  const int64_t stage_gpus = layout.cfg.gpus / pp;
  auto dp_of = [&](const Pipeline& p, double& busy, double& exposed, double& optimizer) {
    busy = exposed = optimizer = 0;
    for (int s = 0; s < pp; ++s) {
      const StageParams sp = stage_params(c, stages[s]);
      const int64_t dense_group = int64_t{layout.dp} * layout.cfg.cp;
      const double rs = c.ring(sp.dense * kGradReduceBytes, dense_group, stage_gpus, "data-parallel collectives") +
                        c.ring(sp.experts * kGradReduceBytes, layout.edp, stage_gpus, "data-parallel collectives");
      const double ag = c.ring(sp.dense * kParamGatherBytes, dense_group, stage_gpus, "data-parallel collectives") +
                        c.ring(sp.experts * kParamGatherBytes, layout.edp, stage_gpus, "data-parallel collectives");
      // The last micro-batch's backward (two thirds of its time: the backward's FLOPs are twice the forward's)
      // hides the reduce-scatter; the next step's first forward (a third) the all-gather.
      const double t = p.stage_s[s];
      const double e = dp_overlap ? std::max(0.0, rs - 2.0 * t / 3.0) + std::max(0.0, ag - t / 3.0) : rs + ag;
      busy = std::max(busy, rs + ag);
      exposed = std::max(exposed, e);
      KernelTerms adam;
      adam.memory_s = (sp.dense / static_cast<double>(dense_group) + sp.experts / layout.edp) * kAdamBytesPerParam / c.bw;
      adam.kernels = 2;
      optimizer = std::max(optimizer, kernel_time_s(adam, c.kf_mem));
    }
  };
  TrainStep out;
  out.layout = layout;
  out.routing = actual.description;
  out.reference = reference.description;
  double dp_busy_r = 0, dp_exposed_r = 0, opt_r = 0;
  dp_of(pa, out.dp_busy_s, out.dp_exposed_s, out.optimizer_s);
  dp_of(pr, dp_busy_r, dp_exposed_r, opt_r);
  out.stages_s = pa.stage_s;
  out.slowest_stage = static_cast<int>(std::max_element(pa.stage_s.begin(), pa.stage_s.end()) - pa.stage_s.begin());
  out.stage_s = pa.stage_s[out.slowest_stage];
  out.pipeline_s = static_cast<double>(m) * out.stage_s;
  out.bubble_s = pa.mean_s - out.pipeline_s;
  out.waits_s = pa.waits_s;
  out.simulated_groups = pa.groups;
  out.simulated_micro_batches = pa.simulated;
  out.step_s = pa.mean_s + pa.waits_s + out.dp_exposed_s + out.optimizer_s;
  // The slowest stage's parts: its fixed parts and its MoE layers' mean experts and all-to-all.
  out.stage_parts = base_parts[out.slowest_stage];
  const int moe_slowest = stages[out.slowest_stage].moe + stages[out.slowest_stage].mtp;
  out.stage_parts.add_compute(TrainPart::experts, moe_slowest * act.mean_rows);
  out.stage_parts.add_comm(TrainPart::ep_a2a, moe_slowest * act.mean_a2a, moe_slowest * act.mean_exposed);

  const double tokens = static_cast<double>(layout.cfg.global_batch) * static_cast<double>(layout.cfg.seq_len);
  out.tokens_per_s_per_gpu = tokens / (out.step_s * layout.cfg.gpus);
  out.model_flops_per_token = megatron_flops_per_token(shape, layout.cfg.seq_len, c.tp);
  out.tflops_per_gpu = out.model_flops_per_token * out.tokens_per_s_per_gpu * 1e-12;
  out.mfu = out.tflops_per_gpu * 1e12 / c.peak_bf16;

  double demanded = 0, dropped = 0, padded = 0, kept = 0;
  out.rank_overload = 0;
  for (const MoeDraw& d : act.draws) {
    demanded += d.demanded;
    dropped += d.dropped;
    padded += d.padded;
    kept += d.kept;
    const double n = static_cast<double>(act.draws.size());
    out.rank_overload += d.rank_overload / n;
    out.a2a_forward_s += d.a2a_forward_s / n;
    out.experts_forward_s += d.experts_forward_s / n;
  }
  out.drop_rate = demanded > 0 ? dropped / demanded : 0;
  out.padding_share = kept > 0 ? padded / kept : 0;

  // The erosion. The mean pipelines' difference, cause by cause in a fixed order: the reference's stage times,
  // then each stage's MoE layers moved by the expert compute, the drops, the padding and the all-to-all in turn, the
  // schedule (pipeline_time_s) taken after each; each part is what its cause adds to the schedule given those
  // before it, so that a change of the slowest stage falls on the cause that makes it. The rest is waits.
  TrainErosion& x = out.erosion;
  x.actual_s = out.step_s;
  x.reference_s = pr.mean_s + pr.waits_s + dp_exposed_r + opt_r;
  const int vpp = layout.cfg.vpp;
  std::vector<double> t = pr.stage_s;
  double before = pipeline_time_s(t, m, vpp);
  auto add_cause = [&](double per_layer) {
    for (int s = 0; s < pp; ++s) t[s] += (stages[s].moe + stages[s].mtp) * per_layer;
    const double after = pipeline_time_s(t, m, vpp);
    const double part = after - before;
    before = after;
    return part;
  };
  x.expert_compute_s = add_cause(act.mean_expert_demand - ref.mean_rows);
  x.drops_s = add_cause(act.mean_drops);
  x.padding_s = add_cause(act.mean_padding);
  x.all_to_all_s = add_cause(act.mean_exposed - ref.mean_exposed);
  // Waits: the drawn micro-batches' (the actual's against the reference's), and the data-parallel communication
  // exposed past the slowest stage's passes. The chain above ends on the actual's mean pipeline (up to rounding:
  // the same stage times summed in another order), which the step counts from.
  x.waits_s = (pa.waits_s - pr.waits_s) + (out.dp_exposed_s - dp_exposed_r) + (out.optimizer_s - opt_r) +
              (pa.mean_s - before);
  return out;
}

}  // namespace moesim
