// Roofline arithmetic for experts and attention (docs/design.md "Cost model"; the roofline model is Williams,
// Waterman and Patterson, CACM 2009: time = max(bytes / bandwidth, FLOPs / peak)).
// Tile and wave quantization follow how a tiled GEMM runs: every thread-block tile costs a full tile of
// MACs, and tiles run sm_count at a time; the row tile fits the rows per expert and a partial wave
// splits K (roofline.hpp, GroupedCost, with the vLLM sources). Host only. Covered by
// tests/cost/roofline_test.cpp.
#include "src/cost/roofline.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "src/common/error.hpp"

namespace moesim {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One GEMM of `tiles` output tiles (> 0): whole waves when they fill the SMs; otherwise one wave cut into
// s = min(floor(sm_count / tiles), max_split_k) K slices, each tile's slices on their own SMs.
double gemm_compute_s(int64_t tiles, double wave_s, int64_t max_split_k, int sm_count) {
  if (tiles == 0) return 0.0;
  if (tiles >= sm_count) return static_cast<double>(ceil_div(tiles, sm_count)) * wave_s;
  return wave_s / static_cast<double>(std::min<int64_t>(sm_count / tiles, max_split_k));
}

}  // namespace

ExpertRoofline::ExpertRoofline(const HardwareProfile& hw, int64_t hidden_, int64_t ffn_, const ExpertFormat& format)
    : hidden(hidden_), ffn(ffn_) {
  MOESIM_REQUIRE(hidden > 0 && ffn > 0, "expert shape must be positive, got hidden " << hidden << ", ffn " << ffn);
  MOESIM_REQUIRE(hw.memory_bandwidth_bytes_per_s > 0 && hw.sm_count > 0 && hw.tile_m > 0 && hw.tile_n > 0,
                 "hardware profile '" << hw.name << "' is not validated (bandwidth, sm_count, tiles)");
  const Dtype dtype = format.dtype;
  // The up GEMM's output columns: gate and up (2 ffn) for SwiGLU, up alone (ffn) without a gate.
  const int64_t up_cols = format.gated ? 2 * ffn : ffn;
  const double params = static_cast<double>(hidden) * static_cast<double>(up_cols + ffn);
  weight_bytes = params * bytes_per_weight(format);
  up_weight_share = static_cast<double>(up_cols) / static_cast<double>(up_cols + ffn);
  weight_only = format.weights != WeightDtype::same;
  marlin_blocks = weight_only && has_row_tiles(hw);
  const double act_bytes = std::max<double>(dtype_bytes(dtype), 2.0);
  act_bytes_per_row = static_cast<double>(3 * hidden + 2 * up_cols + 2 * ffn) * act_bytes;
  act_bytes_up_per_row = static_cast<double>(hidden + up_cols) * act_bytes;
  act_bytes_down_per_row = static_cast<double>(ffn + hidden) * act_bytes;
  flops_per_row = 2.0 * params;
  peak_flops_per_s = require_peak_flops_per_s(hw, dtype);
  bandwidth_bytes_per_s = hw.memory_bandwidth_bytes_per_s;
  figures = KernelFigures::of(hw);
  tile_m = hw.tile_m;
  tile_n = hw.tile_n;
  sm_count = hw.sm_count;
  col_tiles_up = ceil_div(up_cols, tile_n);
  col_tiles_down = ceil_div(hidden, tile_n);
  // One SM delivers F / sm_count; a tile of the up GEMM does 2 tile_m tile_n hidden FLOPs, so a full wave
  // (sm_count tiles in parallel) takes 2 tile_m tile_n hidden sm_count / F.
  const double tile_flops = 2.0 * tile_m * tile_n * sm_count;
  wave_s_up = tile_flops * static_cast<double>(hidden) / peak_flops_per_s;
  wave_s_down = tile_flops * static_cast<double>(ffn) / peak_flops_per_s;
  const auto log2_or_minus_one = [](int rows) {
    for (int s = 0; s < 31; ++s) {
      if ((1 << s) == rows) return s;
    }
    return -1;
  };
  tile_m_shift = log2_or_minus_one(tile_m);
  // Candidate row tiles: 16, 32, 64 while below tile_m, then tile_m (only tile_m when it is 16 or less);
  // entries past num_row_tiles repeat the last. The wave of each is worked out as the full tile's, in the
  // same order, so tile_m's equals wave_s_up bit for bit. A weight-only kernel on a GPU: Marlin's blocks.
  num_row_tiles = 0;
  if (marlin_blocks) {
    for (int rows : kMarlinRowBlocks) row_tile_rows[num_row_tiles++] = rows;
  } else {
    for (int rows = kSmallestRowTile; rows < tile_m && num_row_tiles < 3; rows *= 2) {
      row_tile_rows[num_row_tiles++] = rows;
    }
    row_tile_rows[num_row_tiles++] = tile_m;
  }
  for (int k = 0; k < kMaxRowTiles; ++k) {
    const int rows = row_tile_rows[std::min(k, num_row_tiles - 1)];
    row_tile_rows[k] = rows;
    row_tile_shift[k] = log2_or_minus_one(rows);
    const double flops = 2.0 * rows * tile_n * sm_count;
    wave_s_up_at[k] = flops * static_cast<double>(hidden) / peak_flops_per_s;
    wave_s_down_at[k] = flops * static_cast<double>(ffn) / peak_flops_per_s;
  }
  row_tiles_double = row_tile_shift[0] >= 0;
  for (int k = 1; k < num_row_tiles; ++k) {
    row_tiles_double = row_tiles_double && row_tile_rows[k] == 2 * row_tile_rows[k - 1];
  }
  const bool splits_k = has_row_tiles(hw);
  k_step_floor = splits_k;
  max_split_k_up = splits_k ? std::max<int64_t>(1, hidden / kMinSplitKChunk) : 1;
  max_split_k_down = splits_k ? std::max<int64_t>(1, ffn / kMinSplitKChunk) : 1;
  // The knee: n (2P / F - A / BW) > W / BW, solved in doubles, then settled on the exact predicate (it is
  // monotone in n) so the comparison in compute_bound() agrees with it at every n.
  // At the achieved rates, as the ideal column reads them.
  const double flops_per_s = peak_flops_per_s * figures.achieved_flops(weight_only);
  const double bytes_per_s = bandwidth_bytes_per_s * figures.achieved_bw(weight_only);
  const auto bound = [&](int64_t n) {
    const double rows = static_cast<double>(n);
    return rows * flops_per_row / flops_per_s > (weight_bytes + rows * act_bytes_per_row) / bytes_per_s;
  };
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  const double slope = flops_per_row / flops_per_s - act_bytes_per_row / bytes_per_s;
  const double knee = slope > 0 ? weight_bytes / bytes_per_s / slope : HUGE_VAL;
  if (!(knee < 4e18)) {
    compute_bound_from = kNever;
  } else {
    int64_t n = std::max<int64_t>(1, static_cast<int64_t>(knee));
    while (n > 1 && bound(n - 1)) --n;
    while (!bound(n)) ++n;
    compute_bound_from = n;
  }
}

const char* to_string(KernelScope s) {
  switch (s) {
    case KernelScope::layer: return "layer";
    case KernelScope::experts: return "experts";
    case KernelScope::up_gemm: return "up_gemm";
    case KernelScope::down_gemm: return "down_gemm";
  }
  return "?";
}

// vLLM's fused_experts (model_executor/layers/fused_moe/fused_moe.py): moe_align_block_size, the w1
// fused_moe_kernel, silu_and_mul, the w2 fused_moe_kernel and moe_sum; the layer adds the routing's
// topk_softmax (fused_topk), as benchmark_moe.py times it. A direct fused_moe_kernel call is 1.
int scope_kernels(KernelScope s) {
  switch (s) {
    case KernelScope::layer: return 6;
    case KernelScope::experts: return 5;
    case KernelScope::up_gemm:
    case KernelScope::down_gemm: return 1;
  }
  return 0;
}

KernelFigures KernelFigures::of(const HardwareProfile& hw) {
  KernelFigures f;
  f.efficiency_bw = hw.efficiency_bw;
  f.efficiency_flops = hw.efficiency_flops;
  f.overlap = hw.memory_compute_overlap;
  f.launch_s = hw.launch_overhead_s;
  f.k_step_s = hw.k_step_s;
  f.weight_only_bw_share = WeightOnlyFit::bw_share;
  f.weight_only_flops_share = WeightOnlyFit::flops_share;
  f.weight_only_reread_share = WeightOnlyFit::reread_share;
  f.weight_only_k_step_share = WeightOnlyFit::k_step_share;
  return f;
}

double kernel_time_s(const KernelTerms& t, const KernelFigures& f) {
  if (t.kernels == 0) return 0.0;
  return t.kernels * f.launch_s +
         std::max(t.k_steps * f.k_step_s * (t.weight_only ? f.weight_only_k_step_share : 1.0),
                  combine_terms((t.memory_s + f.weight_only_reread_share * t.reread_s) / f.achieved_bw(t.weight_only),
                                t.compute_s / f.achieved_flops(t.weight_only), f.overlap));
}

double kernel_ideal_s(const KernelTerms& t, const KernelFigures& f) {
  return std::max(t.memory_s / f.achieved_bw(t.weight_only), t.ideal_compute_s / f.achieved_flops(t.weight_only));
}

KernelTerms GroupedCost::terms(KernelScope scope) const {
  KernelTerms t;
  if (rows_ == 0 && idle_rows_ == 0) return t;
  const ExpertRoofline& m = *m_;
  const bool up = scope != KernelScope::down_gemm, down = scope != KernelScope::up_gemm;
  const bool both = up && down;
  const double weight_share = both ? 1.0 : up ? m.up_weight_share : 1.0 - m.up_weight_share;
  const double act_per_row = both ? m.act_bytes_per_row : up ? m.act_bytes_up_per_row : m.act_bytes_down_per_row;
  t.kernels = scope_kernels(scope);
  t.weight_only = m.weight_only;
  t.memory_s = (static_cast<double>(experts_) * m.weight_bytes * weight_share +
                static_cast<double>(rows_ + idle_rows_) * act_per_row) /
               m.bandwidth_bytes_per_s;
  t.ideal_compute_s = static_cast<double>(rows_) * m.flops_per_row * weight_share / m.peak_flops_per_s;
  // Quantized: tiles of both GEMMs at the launch's row tile, each GEMM in whole waves over the SMs, or
  // one wave split over K when its tiles leave SMs idle. The K steps walk each tile's whole K.
  const int k = tile_index();
  const int64_t tiles = row_tiles(k);
  // A weight-only kernel's row blocks each stream their expert's weights again (the Marlin MoE kernel
  // dequantizes them per block): blocks x W, priced at weight_only_reread_share of a memory read.
  if (m.marlin_blocks) t.reread_s = static_cast<double>(tiles) * m.weight_bytes * weight_share / m.bandwidth_bytes_per_s;
  const auto k_steps = [&](int64_t gemm_tiles, int64_t k_dim) {
    return static_cast<double>(ceil_div(gemm_tiles, m.sm_count)) *
           static_cast<double>(ceil_div(k_dim, ExpertRoofline::kKStep));
  };
  if (up) {
    t.compute_s += gemm_compute_s(tiles * m.col_tiles_up, m.wave_s_up_at[k], m.max_split_k_up, m.sm_count);
    if (m.k_step_floor) t.k_steps += k_steps(tiles * m.col_tiles_up, m.hidden);
  }
  if (down) {
    t.compute_s += gemm_compute_s(tiles * m.col_tiles_down, m.wave_s_down_at[k], m.max_split_k_down, m.sm_count);
    if (m.k_step_floor) t.k_steps += k_steps(tiles * m.col_tiles_down, m.ffn);
  }
  return t;
}

CostBreakdown GroupedCost::time(KernelScope scope) const {
  CostBreakdown c;
  if (rows_ == 0 && idle_rows_ == 0) return c;
  const KernelTerms t = terms(scope);
  c.ideal_s = kernel_ideal_s(t, m_->figures);
  c.quantized_s = kernel_time_s(t, m_->figures);
  return c;
}

CostBreakdown expert_time(const ExpertRoofline& model, int64_t n) {
  GroupedCost g(model);
  g.add(n);
  return g.time();
}

namespace {

// Widths of one attention layer: query and K/V projections (heads x head_dim) and the Wqkv + Wo parameters.
struct AttentionWidths {
  double q = 0, kv = 0, weight_params = 0;
};

AttentionWidths attention_widths(const AttentionShape& s) {
  MOESIM_REQUIRE(s.hidden > 0 && s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0,
                 "attention shape must be positive");
  AttentionWidths w;
  w.q = static_cast<double>(s.heads) * s.head_dim;
  w.kv = static_cast<double>(s.kv_heads) * s.head_dim;
  const double h = static_cast<double>(s.hidden);
  w.weight_params = h * (w.q + 2.0 * w.kv) + w.q * h;
  return w;
}

// The two columns of an attention layer from its bytes and FLOPs at the profile's achieved rates: the
// roofline's max (ideal), and the terms combined with the profile's overlap (combine_terms) plus 3 launches
// (QKV projection, attention, output projection), as the kernel model combines a GEMM's.
CostBreakdown attention_columns(const HardwareProfile& hw, Dtype dtype, double traffic_bytes, double flops) {
  const double mem_s = traffic_bytes / hw.memory_bandwidth_bytes_per_s / hw.efficiency_bw;
  const double compute_s = flops / require_peak_flops_per_s(hw, dtype) / hw.efficiency_flops;
  CostBreakdown c;
  c.ideal_s = std::max(mem_s, compute_s);
  c.quantized_s = combine_terms(mem_s, compute_s, hw.memory_compute_overlap) + 3.0 * hw.launch_overhead_s;
  return c;
}

}  // namespace

CostBreakdown attention_decode_time(const HardwareProfile& hw, const AttentionShape& s, int64_t batch,
                                    int64_t context_tokens) {
  const AttentionWidths w = attention_widths(s);
  const double weight_params = w.weight_params, q_width = w.q, kv_width = w.kv;
  MOESIM_REQUIRE(batch >= 0 && context_tokens >= 0, "batch and context_tokens must be >= 0");
  if (batch == 0) return CostBreakdown{};
  const double bytes = dtype_bytes(s.dtype);
  const double b = static_cast<double>(batch), ctx = static_cast<double>(context_tokens);
  // Bytes: weights once, the whole KV cache read, the new K/V rows written, x read and y written.
  const double traffic = weight_params * bytes + ctx * 2.0 * kv_width * bytes + b * 2.0 * kv_width * bytes +
                         b * 2.0 * s.hidden * bytes;
  // FLOPs: projections 2 per weight per token; QK^T and PV 2 head_dim each per cached token and head.
  const double flops = 2.0 * b * weight_params + 4.0 * ctx * q_width;
  return attention_columns(hw, s.dtype, traffic, flops);
}

CostBreakdown attention_prefill_time(const HardwareProfile& hw, const AttentionShape& s, int64_t tokens,
                                     int64_t attended_positions) {
  const AttentionWidths w = attention_widths(s);
  const double weight_params = w.weight_params, q_width = w.q, kv_width = w.kv;
  MOESIM_REQUIRE(tokens >= 0 && attended_positions >= 0, "tokens and attended_positions must be >= 0");
  if (tokens == 0) return CostBreakdown{};
  const double bytes = dtype_bytes(s.dtype);
  const double n = static_cast<double>(tokens);
  // Bytes: weights once; K/V written and read once; x read and y written.
  const double traffic = weight_params * bytes + 2.0 * n * 2.0 * kv_width * bytes + n * 2.0 * s.hidden * bytes;
  // FLOPs: projections 2 per weight per token; QK^T and PV 2 head_dim each per attended pair and head.
  const double flops = 2.0 * n * weight_params + 4.0 * static_cast<double>(attended_positions) * q_width;
  return attention_columns(hw, s.dtype, traffic, flops);
}

}  // namespace moesim
