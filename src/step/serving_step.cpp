// One serving step as its ranks run it (see serving_step.hpp).
#include "src/step/serving_step.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/common/error.hpp"
#include "src/cost/roofline.hpp"
#include "src/step/serving_fit.hpp"

namespace moesim {

const char* to_string(StepPhase p) { return p == StepPhase::decode ? "decode" : "prefill"; }

StepFigures StepFigures::fitted() {
  StepFigures f;
  f.other_kernels = ServingFit::other_kernels;
  f.attention_efficiency = ServingFit::attention_efficiency;
  f.decode_launch_share = ServingFit::decode_launch_share;
  return f;
}

double mtp_tokens_per_request(int draft, double accept) {
  double tokens = 1, p = 1;
  for (int i = 0; i < draft; ++i) {
    p *= accept;
    tokens += p;
  }
  return tokens;
}

namespace {

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double max_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

}  // namespace

LayerBreakdown layer_breakdown(const LayerStreams& s, const LayerParts& parts, A2aOverlap overlap) {
  const double pre_max = max_of(s.pre_s), pre_mean = mean_of(s.pre_s);
  const double post_max = max_of(s.post_s), post_mean = mean_of(s.post_s);
  const double m = overlap == A2aOverlap::two_batch ? 2.0 : 1.0;
  LayerBreakdown b;
  b.attention_s = m * parts.attention_s;
  b.dense_s = m * (parts.dense_pre_s + parts.dense_post_s);
  b.experts_s = m * parts.experts_s;
  b.other_s = m * parts.other_s;
  const double wait_pre = pre_max - pre_mean, wait_post = post_max - post_mean;
  b.sync_s = m * (wait_pre + wait_post);
  b.dispatch_s = m * (s.dispatch_s + wait_pre);
  b.combine_s = m * (s.combine_s + wait_post);
  const double stage[4] = {std::max(pre_max, s.dispatch_s), std::max(post_max, s.dispatch_s),
                           std::max(post_max, s.combine_s), std::max(pre_max, s.combine_s)};
  if (overlap == A2aOverlap::two_batch && s.hooked) {
    // Low-latency kernels with a receive hook: the kernel issues its sends and returns; the receive, after the
    // other micro-batch's compute, waits only for what that compute did not cover.
    b.dispatch_s = 2 * s.dispatch_floor_s + std::max(0.0, s.dispatch_s - pre_max) + std::max(0.0, s.dispatch_s - post_max);
    b.combine_s = 2 * s.combine_floor_s + std::max(0.0, s.combine_s - post_max) + std::max(0.0, s.combine_s - pre_max);
  } else if (overlap == A2aOverlap::two_batch) {
    // Kernels that block on the communication stream: each phase spans its stages (its transfer, the barrier and
    // the wait for the paired compute before the next can start).
    b.dispatch_s = stage[0] + stage[1];
    b.combine_s = stage[2] + stage[3];
  }
  b.compute_s = m * (pre_mean + post_mean);
  b.communication_s = m * (s.dispatch_s + s.combine_s);
  if (overlap == A2aOverlap::two_batch) {
    b.layer_s = stage[0] + stage[1] + stage[2] + stage[3];
  } else {
    b.layer_s = pre_max + s.dispatch_s + post_max + s.combine_s;
  }
  b.compute_wait_s = b.layer_s - b.compute_s;
  return b;
}

namespace {

void add_scaled(LayerBreakdown& acc, const LayerBreakdown& x, double f) {
  acc.attention_s += f * x.attention_s;
  acc.dense_s += f * x.dense_s;
  acc.experts_s += f * x.experts_s;
  acc.other_s += f * x.other_s;
  acc.dispatch_s += f * x.dispatch_s;
  acc.combine_s += f * x.combine_s;
  acc.sync_s += f * x.sync_s;
  acc.compute_wait_s += f * x.compute_wait_s;
  acc.compute_s += f * x.compute_s;
  acc.communication_s += f * x.communication_s;
  acc.layer_s += f * x.layer_s;
}

// The kernels of one step on one rank, at the model's real size.
class RankKernels {
 public:
  explicit RankKernels(const ServingStepInput& in)
      : hw_(in.hw), m_(in.model), tp_(in.attention_tp), fig_(in.figures), kf_(KernelFigures::of(in.hw)),
        kv_bytes_(in.kv_bytes) {
    if (m_.heads % tp_ != 0)
      throw ConfigError("attention_tp: expected a divisor of model.heads (" + std::to_string(m_.heads) + "), got " +
                        std::to_string(tp_));
    if (m_.attention == AttentionKind::mla && (m_.kv_lora_rank <= 0 || m_.qk_rope_head_dim <= 0))
      throw ConfigError("model.kv_lora_rank: expected model.kv_lora_rank and model.qk_rope_head_dim > 0 with "
                        "model.attention mla");
    bf16_flops_ = require_peak_flops_per_s(hw_, Dtype::bf16);
    dense_ = kf_;
    dense_.k_step_s = 0;
    heads_ = m_.heads / tp_;
    kv_heads_ = std::max(1, m_.kv_heads / tp_);
    v_dim_ = m_.v_head_dim > 0 ? m_.v_head_dim : m_.head_dim;
  }

  // A dense GEMM [rows, k] x [k, n] in `d` as the kernel model costs it (one non-gated expert's up GEMM), without the
  // K-step floor: a dense GEMM of few output tiles splits K over the idle SMs (cuBLAS, CUTLASS and DeepGEMM do;
  // moesim train costs its dense GEMMs so too), so its K loop is not one tile's serial walk.
  double gemm(int64_t rows, int64_t k, int64_t n, Dtype d) const {
    if (rows <= 0 || k <= 0 || n <= 0) return 0;
    const ExpertRoofline rm(hw_, k, n, ExpertFormat(d, WeightDtype::same, false));
    GroupedCost g(rm);
    g.add(rows);
    return kernel_time_s(g.terms(KernelScope::up_gemm), dense_);
  }
  // A SwiGLU (or two-matrix) MLP of width `ffn` on `rows` rows: one expert's launch sequence.
  double mlp(int64_t rows, int64_t ffn) const {
    if (rows <= 0 || ffn <= 0) return 0;
    const ExpertRoofline rm(hw_, m_.hidden, ffn, ExpertFormat(m_.dtype, WeightDtype::same, m_.gated_experts));
    GroupedCost g(rm);
    g.add(rows);
    return kernel_time_s(g.terms(KernelScope::experts), dense_);
  }

  // The attention's projections for `rows` tokens (the model's dtype). MLA in decode absorbs the key and value
  // up-projections into the query and the output per head (FlashMLA's layout); in prefill it expands them.
  double projections(int64_t rows, StepPhase phase) const {
    const Dtype d = m_.dtype;
    const int64_t h = m_.hidden;
    if (m_.attention == AttentionKind::gqa)
      return gemm(rows, h, static_cast<int64_t>(heads_ + 2 * kv_heads_) * m_.head_dim, d) +
             gemm(rows, static_cast<int64_t>(heads_) * m_.head_dim, h, d);
    const int64_t qk = m_.head_dim + m_.qk_rope_head_dim;
    double t = m_.q_lora_rank > 0 ? gemm(rows, h, m_.q_lora_rank, d) + gemm(rows, m_.q_lora_rank, heads_ * qk, d)
                                  : gemm(rows, h, heads_ * qk, d);
    t += gemm(rows, h, m_.kv_lora_rank + m_.qk_rope_head_dim, d);
    if (phase == StepPhase::decode)
      t += gemm(rows, m_.head_dim, static_cast<int64_t>(heads_) * m_.kv_lora_rank, d) +
           gemm(rows, m_.kv_lora_rank, static_cast<int64_t>(heads_) * v_dim_, d);
    else
      t += gemm(rows, m_.kv_lora_rank, static_cast<int64_t>(heads_) * (m_.head_dim + v_dim_), d);
    return t + gemm(rows, static_cast<int64_t>(heads_) * v_dim_, h, d);
  }

  // The attention core on one rank's share (bf16; the KV cache kv_bytes a value), one launch:
  //   MLA decode: the latent cache read once per sequence, (kv_lora + rope) x kv_bytes a token; per attended
  //     (query, key) pair and head 2 (kv_lora + rope) + 2 kv_lora FLOPs (scores on the latent, values from it);
  //   MLA prefill: the expanded heads, 2 (qk + rope) + 2 v FLOPs a pair and head; q, k, v and the output once;
  //   GQA: the cache (2 kv_heads head_dim x kv_bytes a token) in decode; 4 head_dim FLOPs a pair and head.
  // at the profile's bandwidth and bf16 peak times attention_efficiency.
  double core(const RankShare& s, StepPhase phase) const {
    if (s.sequences <= 0) return 0;
    if (phase == StepPhase::prefill && s.decode_sequences > 0 && s.decode_sequences < s.sequences) {
      // A mixed step: the decoding sequences on the decode kernel (their KV cache read), the chunks on the prefill
      // kernel; two launches.
      RankShare d, p = s;
      d.sequences = s.decode_sequences;
      d.query_tokens = s.decode_query_tokens;
      d.context_tokens = s.decode_context_tokens;
      d.attended_positions = s.decode_attended_positions;
      p.sequences -= d.sequences;
      p.query_tokens -= d.query_tokens;
      p.context_tokens -= d.context_tokens;
      p.attended_positions -= d.attended_positions;
      p.decode_sequences = p.decode_context_tokens = p.decode_query_tokens = p.decode_attended_positions = 0;
      return core(d, StepPhase::decode) + core(p, StepPhase::prefill);
    }
    const double pairs = static_cast<double>(s.attended_positions);
    const double q = static_cast<double>(s.query_tokens);
    double bytes = 0, flops = 0;
    if (m_.attention == AttentionKind::mla) {
      const double latent = m_.kv_lora_rank + m_.qk_rope_head_dim;
      if (phase == StepPhase::decode) {
        bytes = static_cast<double>(s.context_tokens) * latent * kv_bytes_ + q * heads_ * (latent + m_.kv_lora_rank) * 2;
        flops = pairs * heads_ * 2.0 * (latent + m_.kv_lora_rank);
      } else {
        const double qk = m_.head_dim + m_.qk_rope_head_dim;
        bytes = q * heads_ * (2 * qk + 2 * v_dim_) * 2;
        flops = pairs * heads_ * 2.0 * (qk + v_dim_);
      }
    } else {
      const double kv = 2.0 * kv_heads_ * m_.head_dim * kv_bytes_;
      bytes = (phase == StepPhase::decode ? static_cast<double>(s.context_tokens) * kv : q * kv) +
              q * heads_ * m_.head_dim * 2 * 2;
      flops = pairs * heads_ * 4.0 * m_.head_dim;
    }
    const double e = fig_.attention_efficiency;
    return kf_.launch_s + combine_terms(bytes / (hw_.memory_bandwidth_bytes_per_s * e), flops / (bf16_flops_ * e),
                                        kf_.overlap);
  }

  // The kernels the model does not list (StepFigures::other_kernels), each a launch and one read and one write
  // of the rows' activations (bf16).
  double other(int64_t rows) const {
    if (rows <= 0) return 0;
    const double pass = 2.0 * static_cast<double>(rows) * static_cast<double>(m_.hidden) * 2.0 /
                        (hw_.memory_bandwidth_bytes_per_s * kf_.efficiency_bw);
    return fig_.other_kernels * (kf_.launch_s + pass);
  }

  double router(int64_t rows, int experts) const { return gemm(rows, m_.hidden, experts, Dtype::bf16); }
  double head(int64_t rows) const { return gemm(rows, m_.hidden, (m_.vocab + tp_ - 1) / tp_, Dtype::bf16); }

 private:
  const HardwareProfile& hw_;
  const ModelConfig& m_;
  int tp_;
  StepFigures fig_;
  KernelFigures kf_, dense_;
  double kv_bytes_ = 2;
  double bf16_flops_ = 0;
  int heads_ = 1, kv_heads_ = 1;
  int64_t v_dim_ = 0;
};

// Each rank's share of a micro-batch of m: sequences split, the rank's tokens and positions divided.
RankShare micro_share(const RankShare& s, int m) {
  if (m == 1) return s;
  RankShare r;
  r.sequences = (s.sequences + m - 1) / m;
  r.context_tokens = s.context_tokens / m;
  r.query_tokens = (s.query_tokens + m - 1) / m;
  r.attended_positions = s.attended_positions / m;
  return r;
}

struct MoeLayerResult {
  LayerBreakdown actual;     // routing's loads, the ranks' attention
  LayerBreakdown even_attn;  // routing's loads, every rank's attention at the mean
  LayerBreakdown even_comp;  // + each device's experts as balanced loads run them
  LayerBreakdown balanced;   // + balanced loads' dispatch and combine
  double balancedness = 1;
};

class StepModel {
 public:
  explicit StepModel(const ServingStepInput& in) : in_(in), k_(in) {
    const PlacementConfig& pc = in.moe.placement;
    devices_ = pc.kind == PlacementKind::expert_parallel ? pc.devices * std::max(1, pc.tensor_parallel) : 1;
    if (in.attention_dp * in.attention_tp != devices_)
      throw ConfigError("attention_dp: expected attention_dp x attention_tp = the expert-parallel GPUs (" +
                        std::to_string(devices_) + "), got " + std::to_string(in.attention_dp) + " x " +
                        std::to_string(in.attention_tp));
    if (in.loads.empty()) throw ConfigError("loads: expected at least one routed draw of the step, got none");
    m_ = in.moe.placement.overlap == A2aOverlap::two_batch ? 2 : 1;
  }

  // One MoE layer for ranks' shares `shares` (the attention ranks), with `scale` of the draws' tokens.
  MoeLayerResult moe_layer(const std::vector<RankShare>& shares, int64_t tokens) const {
    const int ranks = static_cast<int>(shares.size());
    std::vector<double> pre(static_cast<size_t>(devices_)), attn(static_cast<size_t>(devices_));
    std::vector<double> dense_pre(static_cast<size_t>(devices_)), dense_post(static_cast<size_t>(devices_));
    std::vector<double> other(static_cast<size_t>(devices_));
    const int tp = in_.attention_tp;
    const double slow = compute_slowdown();
    for (int d = 0; d < devices_; ++d) {
      const RankShare s = micro_share(shares[static_cast<size_t>(d / tp % ranks)], m_);
      const int64_t rows = s.query_tokens;
      attn[d] = slow * k_.core(s, in_.phase);
      dense_pre[d] = slow * (k_.projections(rows, in_.phase) + k_.router(rows, in_.model.experts));
      other[d] = slow * k_.other(rows);
      dense_post[d] = slow * k_.mlp(rows, static_cast<int64_t>(in_.model.shared_experts) * in_.model.ffn);
      pre[d] = attn[d] + dense_pre[d] + other[d];
    }
    std::vector<double> pre_even(pre.size(), mean_of(pre));

    const int64_t mb_tokens = (tokens + m_ - 1) / m_;
    const A2aFigures floors = devices_ > 1 ? a2a_figures(in_.hw, in_.moe.placement.a2a_kernel) : A2aFigures{};
    MoeLayerResult r;
    const double w = 1.0 / static_cast<double>(in_.loads.size());
    r.balancedness = 0;
    LayerCost bal;
    {
      LayerCostInput li = in_.moe;
      li.num_tokens = mb_tokens;
      li.load = even_loads(li.num_experts, mb_tokens * li.top_k);
      li.placement_load.clear();
      li.shared_experts = 0;
      li.tile_phase_points = 1;
      li.placement.overlap = A2aOverlap::none;
      bal = model_moe_layer(in_.hw, li);
    }
    for (size_t i = 0; i < in_.loads.size(); ++i) {
      const std::vector<int64_t>& full = in_.loads[i];
      const int64_t full_tokens = std::accumulate(full.begin(), full.end(), int64_t{0}) / std::max(1, in_.moe.top_k);
      LayerCostInput li = in_.moe;
      li.num_tokens = mb_tokens;
      li.load = full_tokens == mb_tokens ? full : scale_loads_to(full, std::max<int64_t>(1, full_tokens), mb_tokens);
      li.placement_load.clear();
      if (i < in_.plan_loads.size() && !in_.plan_loads[i].empty())
        li.placement_load.assign(in_.plan_loads[i].begin(), in_.plan_loads[i].end());
      li.shared_experts = 0;
      li.tile_phase_points = 1;
      li.placement.overlap = A2aOverlap::none;
      const LayerCost lc = model_moe_layer(in_.hw, li);
      r.balancedness += w * lc.balancedness;

      LayerStreams s;
      s.pre_s = pre;
      s.dispatch_s = lc.dispatch_s;
      s.combine_s = lc.combine_s;
      s.dispatch_floor_s = floors.dispatch_floor_s;
      s.combine_floor_s = floors.combine_floor_s;
      s.hooked = in_.moe.placement.a2a_kernel == A2aKernel::low_latency;
      s.post_s.resize(pre.size());
      LayerParts parts;
      parts.attention_s = mean_of(attn);
      parts.dense_pre_s = mean_of(dense_pre);
      parts.dense_post_s = mean_of(dense_post);
      parts.other_s = mean_of(other);
      std::vector<double> experts(pre.size());
      for (int d = 0; d < devices_; ++d) {
        experts[d] = slow * device_experts_s(lc, d);
        s.post_s[d] = experts[d] + dense_post[d];
      }
      parts.experts_s = mean_of(experts);
      const A2aOverlap ov = in_.moe.placement.overlap;
      add_scaled(r.actual, layer_breakdown(s, parts, ov), w);
      s.pre_s = pre_even;
      add_scaled(r.even_attn, layer_breakdown(s, parts, ov), w);
      std::vector<double> bexperts(pre.size());
      for (int d = 0; d < devices_; ++d) {
        bexperts[d] = slow * device_experts_s(bal, d);
        s.post_s[d] = bexperts[d] + dense_post[d];
      }
      LayerParts bparts = parts;
      bparts.experts_s = mean_of(bexperts);
      add_scaled(r.even_comp, layer_breakdown(s, bparts, ov), w);
      s.dispatch_s = bal.dispatch_s;
      s.combine_s = bal.combine_s;
      add_scaled(r.balanced, layer_breakdown(s, bparts, ov), w);
    }
    return r;
  }

  // One dense layer on each rank: its attention, projections, other kernels and the dense MLP (no all-to-all; the
  // ranks meet at the next MoE layer's dispatch, so the layer takes the slowest rank's, or with balanced attention
  // the mean).
  std::vector<double> dense_layer(const std::vector<RankShare>& shares) const {
    std::vector<double> t;
    const int64_t ffn = in_.model.dense_ffn > 0 ? in_.model.dense_ffn : in_.model.ffn;
    for (const RankShare& s : shares) {
      const int64_t rows = s.query_tokens;
      t.push_back(k_.core(s, in_.phase) + k_.projections(rows, in_.phase) + k_.other(rows) +
                  k_.mlp(rows, (ffn + in_.attention_tp - 1) / in_.attention_tp));
    }
    return t;
  }

  double head(const std::vector<RankShare>& shares) const {
    double t = 0;
    for (const RankShare& s : shares)
      t = std::max(t, k_.head(in_.phase == StepPhase::decode ? s.query_tokens : s.sequences));
    return t;
  }

  // GPU d's experts in a modeled layer: its expert-parallel device's grouped kernels (a device is a group of
  // placement.tensor_parallel GPUs), or the whole layer on one device.
  double device_experts_s(const LayerCost& lc, int d) const {
    if (lc.device_time_s.empty()) return lc.actual.quantized_s;
    const int per_device = std::max(1, in_.moe.placement.tensor_parallel);
    return lc.device_time_s[static_cast<size_t>(d / per_device) % lc.device_time_s.size()];
  }

  // Under two-batch overlap with kernels that stay resident on the SMs while they transfer (DeepEP's normal
  // kernels), the compute stream runs beside them on the SMs they leave: sm_count / (sm_count - kCommSms) slower.
  // Low-latency kernels with a receive hook hold no SMs while the data is in flight; without overlap nothing runs
  // beside the communication.
  double compute_slowdown() const {
    const PlacementConfig& pc = in_.moe.placement;
    if (m_ == 1 || pc.a2a_kernel == A2aKernel::low_latency || in_.hw.sm_count <= kCommSms) return 1.0;
    return static_cast<double>(in_.hw.sm_count) / static_cast<double>(in_.hw.sm_count - kCommSms);
  }

  const RankKernels& kernels() const { return k_; }
  int devices() const { return devices_; }

 private:
  const ServingStepInput& in_;
  RankKernels k_;
  int devices_ = 1, m_ = 1;
};

}  // namespace

ServingStep model_serving_step(const ServingStepInput& given) {
  ServingStepInput in = given;
  if (in.phase == StepPhase::decode) in.hw.launch_overhead_s *= in.figures.decode_launch_share;
  const StepModel model(in);
  ServingStep out;
  out.gpus = model.devices();
  std::vector<RankShare> shares;
  if (!in.shares.empty()) {
    if (static_cast<int>(in.shares.size()) != in.attention_dp)
      throw ConfigError("shares: expected one share per attention rank (" + std::to_string(in.attention_dp) + "), got " +
                        std::to_string(in.shares.size()));
    shares = in.shares;
  } else if (in.sequence_rank.empty()) {
    shares = spread_requests(in.sequences, in.attention_dp, in.request_balance);
  } else {
    if (in.sequence_rank.size() != in.sequences.size())
      throw ConfigError("sequence_rank: expected one rank per sequence, got " + std::to_string(in.sequence_rank.size()) +
                        " for " + std::to_string(in.sequences.size()));
    shares.resize(static_cast<size_t>(in.attention_dp));
    for (size_t i = 0; i < in.sequences.size(); ++i) {
      const int r = in.sequence_rank[i];
      if (r < 0 || r >= in.attention_dp)
        throw ConfigError("sequence_rank: expected ranks in [0, " + std::to_string(in.attention_dp) + "), got " +
                          std::to_string(r));
      add_sequence(shares[static_cast<size_t>(r)], in.sequences[i]);
    }
  }
  int64_t tokens = 0, requests = 0;
  for (const RankShare& s : shares) {
    tokens += s.query_tokens;
    requests += s.sequences;
  }
  out.tokens_per_rank = tokens / std::max(1, in.attention_dp);

  // The attention cores over the ranks (MLA included): the slowest, the mean, the wait and the balance ratio.
  for (const RankShare& s : shares) out.attention.rank_s.push_back(model.kernels().core(s, in.phase));
  out.attention.slowest.ideal_s = out.attention.slowest.quantized_s = max_of(out.attention.rank_s);
  out.attention.mean_s = mean_of(out.attention.rank_s);
  out.attention.wait_s = out.attention.slowest.quantized_s - out.attention.mean_s;
  out.attention.balance_ratio = rank_balance_ratio(shares, in.phase == StepPhase::decode);

  const MoeLayerResult moe = model.moe_layer(shares, tokens);
  out.moe_layer = moe.actual;
  out.balanced_layer = moe.balanced;
  out.balancedness = moe.balancedness;
  const std::vector<double> dense_ranks = model.dense_layer(shares);
  out.dense_layer_s = max_of(dense_ranks);
  out.head_s = model.head(shares);

  const int layers = in.model.layers;
  const int moe_layers = moe_layer_count(in.model);
  const int dense_layers = layers - moe_layers;

  out.tokens_per_request = in.phase == StepPhase::decode ? mtp_tokens_per_request(in.mtp_draft, in.mtp_accept) : 1;
  if (in.mtp_draft > 0) {
    // The MTP module per draft token: one MoE layer on each request's one token, its 2h -> h projection and the
    // head (DeepSeek-V3's num_nextn_predict_layers module, sharing the head).
    std::vector<RankShare> draft_shares = shares;
    for (RankShare& s : draft_shares) {
      s.attended_positions = s.query_tokens > 0 ? s.attended_positions * s.sequences / s.query_tokens : 0;
      s.query_tokens = s.sequences;
    }
    const MoeLayerResult d = model.moe_layer(draft_shares, requests);
    double proj = 0;
    for (const RankShare& s : draft_shares)
      proj = std::max(proj, model.kernels().gemm(s.query_tokens, 2 * in.model.hidden, in.model.hidden, in.model.dtype));
    out.mtp_s = in.mtp_draft * (d.actual.layer_s + proj + model.head(draft_shares));
  }

  const double fixed = out.head_s + out.mtp_s;
  out.step_s = moe_layers * out.moe_layer.layer_s + dense_layers * out.dense_layer_s + fixed;
  const double dense_even = mean_of(dense_ranks);
  StepErosion& x = out.erosion;
  x.actual_s = out.step_s;
  const double s1 = moe_layers * moe.even_attn.layer_s + dense_layers * dense_even + fixed;
  const double s2 = moe_layers * moe.even_comp.layer_s + dense_layers * dense_even + fixed;
  const double s3 = moe_layers * moe.balanced.layer_s + dense_layers * dense_even + fixed;
  const double ideal_layer = std::max(moe.balanced.compute_s, moe.balanced.communication_s);
  x.ideal_s = moe_layers * ideal_layer + dense_layers * dense_even + fixed;
  x.attention_imbalance_s = x.actual_s - s1;
  x.skew_compute_s = s1 - s2;
  x.skew_communication_s = s2 - s3;
  x.overlap_s = s3 - x.ideal_s;
  out.balanced_step_s = s3;

  const double gpus = static_cast<double>(out.gpus);
  if (in.phase == StepPhase::decode) {
    out.output_tokens_per_step = static_cast<double>(requests) * out.tokens_per_request;
    out.tpot_s = out.step_s / out.tokens_per_request;
    out.output_tokens_per_s_per_gpu = out.step_s > 0 ? out.output_tokens_per_step / gpus / out.step_s : 0;
    out.tokens_per_s_per_node = out.output_tokens_per_s_per_gpu * in.devices_per_node;
  } else {
    out.input_tokens_per_s_per_gpu = out.step_s > 0 ? static_cast<double>(tokens) / gpus / out.step_s : 0;
    out.tokens_per_s_per_node = out.input_tokens_per_s_per_gpu * in.devices_per_node;
  }
  return out;
}

}  // namespace moesim
