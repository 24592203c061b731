// Roofline cost of SwiGLU experts (docs/design.md "Cost model"): one expert with n rows, a grouped kernel of
// many experts on one device, and one attention decode step, each as three numbers side by side.
// Inputs are row counts per expert (already laid out: load, block-rounded or capacity rows).
// Pure arithmetic, host only, no allocation. Covered by tests/cost/roofline_test.cpp.
#pragma once

#include <algorithm>

#include <cstdint>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"

namespace moesim {

// Modelled seconds, two ways (docs/cost-model.md "The kernel model"):
//  ideal      - the roofline at the profile's achieved rates: max(bytes / (BW eff_bw), FLOPs / (F eff_flops));
//               no tile padding, no K-step floor, no launches;
//  quantized  - the kernel model every user-facing number comes from (kernel_time_s): GEMM tiles in waves
//               over sm_count SMs (the row tile fits the rows per expert; a wave the tiles leave mostly
//               idle splits K), the K-step latency floor, the efficiencies, memory/compute overlap and the
//               launches of the scope's kernels.
struct CostBreakdown {
  double ideal_s = 0.0;
  double quantized_s = 0.0;
};

// What a modeled MoE launch sequence covers, and so how many kernels it launches:
//  layer     - routing (top-k), token alignment, the gate+up GEMM, the activation, the down GEMM and the
//              weighted top-k sum: 6 kernels (vLLM fused_moe as benchmark_moe.py times it; what `run` costs);
//  experts   - the same without routing: 5 kernels (vLLM fused_experts on given top-k ids);
//  up_gemm, down_gemm - one fused_moe_kernel launch: 1 kernel.
enum class KernelScope { layer, experts, up_gemm, down_gemm };
const char* to_string(KernelScope s);
int scope_kernels(KernelScope s);

// Whether a profile's GEMMs run in row tiles, as a GPU's grouped kernel does (tile_m at least the smallest row
// tile such a kernel picks, 16); a CPU BLAS (tile_m below 16) keeps panels of its own: no row-tile candidates,
// no split K, no K-step floor, no Marlin blocks, no tile phase.
constexpr int kSmallestRowTile = 16;
inline bool has_row_tiles(const HardwareProfile& hw) { return hw.tile_m >= kSmallestRowTile; }

// The profile's figures the kernel model applies to a launch sequence's terms.
struct KernelFigures {
  double efficiency_bw = 1, efficiency_flops = 1;  // achieved fractions of peak bandwidth and FLOP/s
  double overlap = 1;                              // memory_compute_overlap
  double launch_s = 0;                             // per kernel
  double k_step_s = 0;                             // one K step of a tile (the latency floor)
  // What a weight-only 4-bit kernel (vLLM's Marlin W4A16 MoE, the mxfp4 MoE) reaches of efficiency_bw and
  // efficiency_flops: it dequantizes every weight in its main loop. WeightOnlyFit (hardware_profile.hpp),
  // fitted on the published Marlin tables; 1 would be the bf16 kernel's rates.
  double weight_only_bw_share = 1, weight_only_flops_share = 1;
  // What a weight-only kernel's row block pays to stream its expert's weights, as a share of reading them
  // from memory (KernelTerms::reread_s): each block reads them again, mostly out of L2, besides the one read
  // of every active expert's weights from memory in memory_s. WeightOnlyFit, fitted on the same balanced rows.
  double weight_only_reread_share = 1;
  // What a weight-only kernel's K step takes, as a multiple of k_step_s: each step dequantizes its weight
  // tile before the MMAs, so the latency floor of a small batch (Little's law on the K loop) is longer.
  // WeightOnlyFit, fitted on the same balanced rows.
  double weight_only_k_step_share = 1;
  static KernelFigures of(const HardwareProfile& hw);
  // The efficiencies a kernel reaches: the fitted ones, times the weight-only shares for a weight-only kernel.
  double achieved_bw(bool weight_only) const { return efficiency_bw * (weight_only ? weight_only_bw_share : 1.0); }
  double achieved_flops(bool weight_only) const {
    return efficiency_flops * (weight_only ? weight_only_flops_share : 1.0);
  }
};

// A launch sequence's terms at peak, before the profile's figures.
struct KernelTerms {
  double memory_s = 0;         // (active W + rows A) / BW, the scope's GEMMs
  // A weight-only kernel's weight streams, one per row block: blocks x W / BW (the scope's share of W), times
  // weight_only_reread_share in the kernel model; 0 for every other kernel.
  double reread_s = 0;
  double compute_s = 0;        // tiles in waves (split-K), the scope's GEMMs
  double ideal_compute_s = 0;  // rows 2 P / F (the scope's share), no tiles
  // K steps in series: per GEMM, waves of tiles (ceil(tiles / sm_count)) times the K steps of one tile
  // (ceil(K / kKStep)), summed over the scope's GEMMs.
  double k_steps = 0;
  int kernels = 0;             // scope_kernels
  bool weight_only = false;    // 4-bit weights dequantized in the GEMMs: the weight_only shares apply
};

// The kernel model, the one formula behind every modeled MoE time (run, compare, sweep, check, the
// erosion, the knees, validate --published and calibrate --from-published):
//   kernels x launch + max(k_steps x k_step, max(mem, comp) + (1 - overlap) min(mem, comp)),
//   k_step times weight_only_k_step_share for a weight-only 4-bit kernel,
//   mem = (memory_s + reread_share reread_s) / efficiency_bw, comp = compute_s / efficiency_flops (each
//   times its weight_only share for a weight-only 4-bit kernel; reread_s is 0 for every other kernel).
// The K-step floor is Little's law on a tile's K loop: a step's loads must land before its MMAs, so a
// GEMM of few waves cannot finish faster than its serial K steps however little it reads.
double kernel_time_s(const KernelTerms& t, const KernelFigures& f);
// The ideal column of the same terms: max(memory_s / efficiency_bw, ideal_compute_s / efficiency_flops).
double kernel_ideal_s(const KernelTerms& t, const KernelFigures& f);

// Constants of one expert shape and format on one profile. An expert is two grouped GEMMs with the
// activation between them, as vLLM's fused_experts runs it; u = 2 ffn for a gated (SwiGLU) expert, ffn
// for a non-gated one (relu^2, GELU):
//   up:   [n, hidden] x [hidden, u] (gate and up, or up) -> [n, u]
//   act:  silu(gate) * up, or act(up) -> [n, ffn]          (its own kernel)
//   down: [n, ffn] x [ffn, hidden] -> [n, hidden], then the weighted top-k sum (moe_sum)
// P = hidden (u + ffn) parameters (3 hidden ffn gated, 2 not), W = P bytes_per_weight(format) (4-bit weights
// with their scales: weight-only quantization dequantizes in the GEMM's main loop); FLOPs = 2 n P.
// A(n) = n (3 hidden + 2 u + 2 ffn) act_bytes: up reads x (hidden) and writes u; the activation reads u
// and writes ffn; down reads ffn and writes hidden; the sum reads hidden. act_bytes is the compute dtype's
// width, and 2 for 8-bit weights: the engines' W8A8 paths (vLLM, SGLang) quantize each GEMM's input on the
// fly and keep the intermediates and outputs in bf16/fp16.
struct ExpertRoofline {
  ExpertRoofline(const HardwareProfile& hw, int64_t hidden, int64_t ffn, const ExpertFormat& format);

  // Row tiles a grouped launch may choose: those of 16, 32 and 64 below tile_m, then tile_m itself (16,
  // 32, 64, 128 on every GPU profile here); only tile_m when tile_m <= 16 (a CPU GEMM pads no rows: 1).
  // A weight-only kernel on a GPU takes the Marlin MoE kernel's row blocks instead (kMarlinRowBlocks).
  static constexpr int kMaxRowTiles = 5;
  // vLLM's fused_marlin_moe (model_executor/layers/fused_moe/fused_marlin_moe.py) picks moe_block_size as
  // the first of 8, 16, 32, 48, 64 with (tokens x top_k / experts) / block < 0.9, else 64: from the mean
  // rows of every expert of the launch, whatever their spread. Every block of an expert streams the
  // expert's weights (KernelTerms::reread_s), so a skewed expert's extra blocks cost weight traffic too.
  static constexpr int kMarlinRowBlocks[kMaxRowTiles] = {8, 16, 32, 48, 64};
  static constexpr double kMarlinBlockFill = 0.9;
  // The shortest K slice split-K gives one thread block: two k-steps of BLOCK_SIZE_K 64 (vLLM fused_moe's
  // default small-M config; a CUTLASS split-K slice is whole k-tiles), so each slice still pipelines.
  static constexpr int64_t kMinSplitKChunk = 128;
  // The K depth of one step of a tile's main loop (the K-step floor, KernelTerms::k_steps): 128, a common
  // BLOCK_SIZE_K of vLLM's tuned fused_moe configs; k_step_us is fitted per 128 of K, so another depth
  // would only rescale it. Triton's fused_moe_kernel never splits K (SPLIT_K is 1 in every config of the
  // published tables), so a tile walks all of K.
  static constexpr int64_t kKStep = 128;

  int64_t hidden, ffn;
  double weight_bytes;         // W
  double up_weight_share;      // the up GEMM's share of W and of the FLOPs: 2/3 gated, 1/2 not
  bool weight_only;            // 4-bit weights (int4, mxfp4): KernelTerms::weight_only
  // The Marlin MoE kernel's row blocks and their rule (kMarlinRowBlocks): a weight-only kernel on a GPU
  // (tile_m >= 16); a CPU BLAS keeps its own tile.
  bool marlin_blocks;
  double act_bytes_per_row;    // A(n) / n, the whole layer
  double act_bytes_up_per_row, act_bytes_down_per_row;  // the up GEMM's share (hidden + u) and the down's (ffn + hidden)
  double flops_per_row;        // 2 P
  double peak_flops_per_s;     // F for the dtype
  double bandwidth_bytes_per_s;
  KernelFigures figures;       // the profile's efficiencies, overlap, launch and K step
  int tile_m, tile_n, sm_count;
  int64_t col_tiles_up, col_tiles_down;  // ceil(u / tile_n), ceil(hidden / tile_n)
  double wave_s_up, wave_s_down;         // one full wave of tiles: 2 tile_m tile_n K sm_count / F
  int tile_m_shift;                      // log2(tile_m) when tile_m is a power of two, else -1
  int64_t compute_bound_from;            // the smallest n that is compute bound (INT64_MAX: none)
  // The candidate row tiles (ascending, the last is tile_m), their log2 (-1: not a power of two) and the
  // wave of each GEMM at that tile: 2 rows tile_n K sm_count / F (wave_s_up_at[last] == wave_s_up).
  int num_row_tiles;
  bool row_tiles_double;  // every candidate is a power of two, each twice the one before
  int row_tile_rows[kMaxRowTiles], row_tile_shift[kMaxRowTiles];
  double wave_s_up_at[kMaxRowTiles], wave_s_down_at[kMaxRowTiles];
  // The most K slices of each GEMM: K / kMinSplitKChunk, at least 1; 1 when tile_m < 16 (a CPU BLAS
  // splits rows and columns over its threads, never K).
  int64_t max_split_k_up, max_split_k_down;
  // Whether the K-step floor applies: a GPU's tiled GEMM (tile_m >= 16); a CPU BLAS (tile_m < 16) streams
  // K through registers with no such latency-bound loop, so its launches count no K steps.
  bool k_step_floor;

  // True when the ideal compute term exceeds the memory term for n rows (past the knee): n rows do
  // n 2P / (F eff_flops) > (W + A(n)) / (BW eff_bw). One comparison against the knee worked out once in the constructor.
  bool compute_bound(int64_t n) const { return n > 0 && n >= compute_bound_from; }
  // ceil(n / tile_m) for n >= 0.
  int64_t row_tiles(int64_t n) const {
    return tile_m_shift >= 0 ? (n + tile_m - 1) >> tile_m_shift : (n + tile_m - 1) / tile_m;
  }
};

// The kernel model's combination of a memory and a compute term: the roofline's max when the machine
// overlaps them fully (overlap 1), their sum when it does not overlap them at all (overlap 0).
inline double combine_terms(double mem_s, double compute_s, double overlap) {
  return std::max(mem_s, compute_s) + (1.0 - overlap) * std::min(mem_s, compute_s);
}

// Accumulates the experts of one grouped kernel pair (up, then down) on one device, as the terms of the
// kernel model (kernel_time_s): memory sum_active (W + A(n)) / BW, and compute
//   ideal:     sum 2 n P / F
//   quantized: per GEMM, the tiles T = sum_e ceil(n_e / m) col_tiles of m-row tiles, costing
//                ceil(T / sm_count) waves                        when T >= sm_count,
//                one wave / s, s = min(floor(sm_count / T), max(1, floor(K / 128)))
//                                                                when T <  sm_count (split-K),
//              a wave of m-row tiles taking 2 m tile_n K sm_count / F; summed over the two GEMMs.
// The row tile m is one per grouped launch, from the mean rows per active expert: the smallest power of
// two >= rows / experts, clamped to [16, tile_m] (tile_m itself when tile_m < 16), every expert padded
// to it. vLLM's fused_moe (Triton) does the same: one BLOCK_SIZE_M per launch, chosen from the tokens M
// (get_default_config: 16 when M <= E, else 64; the tuned configs/E=8,N=14336,device_name=NVIDIA_H200.json
// for Mixtral: 16 at M = 1 and 4..32, 32 at M = 2 and 48..96, 64 at 128, 128 from M = 256), and
// moe_align_block_size pads each expert's tokens to a multiple of it. Split-K: cuBLAS and CUTLASS cut
// K of a GEMV-like GEMM into slices so that a few output tiles still occupy every SM; the s partial sums
// (at most sm_count m tile_n fp32, within L2 on every GPU profile) are taken to be reduced in L2 in the
// same kernel (CUTLASS serial split-K), costing no DRAM traffic and no launch. A launch of more than 64
// rows per expert takes the full 128-row tile, and where both GEMMs fill a wave it costs exactly whole
// tiles in whole waves; split-K still lowers a partial wave at any batch (a 1024-wide layer's 16 up
// tiles at 128 rows on a 40-SM T4). The weight and activation stream (W + A(n)) / BW stays the floor.
// An expert with n = 0 costs nothing (the caller passes capacity rows for capacity layouts).
// The scope's launches (KernelScope) when any row is present; none otherwise.
class GroupedCost {
 public:
  explicit GroupedCost(const ExpertRoofline& model) : m_(&model) {}
  // One expert of the launch with `rows` rows. An expert of 0 rows costs nothing, but it is one of the
  // launch's experts (the weight tensor's expert dimension), which the Marlin rule's mean counts.
  void add(int64_t rows) {
    ++launch_experts_;
    if (rows <= 0) return;
    rows_ += rows;
    ++experts_;
    add_row_tiles(rows - 1, 1);
  }
  void add(int64_t rows, int64_t experts) {  // `experts` experts of `rows` rows each
    if (experts <= 0) return;
    launch_experts_ += experts;
    if (rows <= 0) return;
    rows_ += rows * experts;
    experts_ += experts;
    add_row_tiles(rows - 1, experts);
  }
  // Rows the launch carries for no expert of this device: vLLM's expert-parallel fused_experts on the
  // global token list (an expert_map sentinel) writes their zero outputs, runs the activation and the
  // top-k sum over them, and computes nothing: activation traffic A(n) / n each, no weights, no tiles.
  // moesim's own expert-parallel placement dispatches only local rows and adds none.
  void add_idle_rows(int64_t rows) { idle_rows_ += std::max<int64_t>(0, rows); }
  int64_t rows() const { return rows_; }
  int64_t experts() const { return experts_; }
  // The row tile of this launch (rows per tile), 0 when no row is present.
  int tile_rows() const { return rows_ == 0 ? 0 : m_->row_tile_rows[tile_index()]; }
  // The kernel model (kernel_time_s) on this launch with the profile's figures, and its ideal column.
  CostBreakdown time(KernelScope scope = KernelScope::layer) const;
  // The launch's terms. A GEMM scope (up_gemm, down_gemm) is that GEMM's share alone: up reads u / (u +
  // ffn) of W (2/3 gated, 1/2 not) and down the rest; up moves (hidden + u) act_bytes a row (x read, its
  // output written), down (ffn + hidden) (the activation's output read, y written).
  KernelTerms terms(KernelScope scope = KernelScope::layer) const;

 private:
  // Row tiles at every candidate tile, for the tile is chosen from the totals once all experts are in:
  // ceil(n / m) = (n - 1) / m + 1, kept as sum (n - 1) / m (the + 1 per expert is experts_). Candidates
  // that double from a power of two take one shift each, for a fixed count (entries past num_row_tiles
  // are never read).
  void add_row_tiles(int64_t rows_less_one, int64_t experts) {
    const ExpertRoofline& m = *m_;
    if (m.row_tiles_double) {
      int64_t q = rows_less_one >> m.row_tile_shift[0];
      for (int k = 0; k < ExpertRoofline::kMaxRowTiles; ++k, q >>= 1) tiles_less_one_[k] += q * experts;
    } else {
      for (int k = 0; k < ExpertRoofline::kMaxRowTiles; ++k) {
        tiles_less_one_[k] += rows_less_one / m.row_tile_rows[k] * experts;
      }
    }
  }
  // sum_e ceil(n_e / row_tile_rows[k]).
  int64_t row_tiles(int k) const { return tiles_less_one_[k] + experts_; }
  // The first candidate tile that holds the mean rows per expert (m experts >= rows), else the last.
  int tile_index() const {
    const ExpertRoofline& m = *m_;
    const int last = m.num_row_tiles - 1;
    if (m.marlin_blocks) {  // mean rows of the launch's experts / block < kMarlinBlockFill, else the last
      const double mean = static_cast<double>(rows_ + idle_rows_) / static_cast<double>(std::max<int64_t>(1, launch_experts_));
      for (int k = 0; k < last; ++k) {
        if (mean < ExpertRoofline::kMarlinBlockFill * m.row_tile_rows[k]) return k;
      }
      return last;
    }
    for (int k = 0; k < last; ++k) {
      if (static_cast<int64_t>(m.row_tile_rows[k]) * experts_ >= rows_) return k;
    }
    return last;
  }

  const ExpertRoofline* m_;
  int64_t rows_ = 0, experts_ = 0, idle_rows_ = 0;
  int64_t launch_experts_ = 0;  // every expert added, those of 0 rows included
  int64_t tiles_less_one_[ExpertRoofline::kMaxRowTiles] = {};  // sum_e (n_e - 1) / row_tile_rows[k], per k
};

// t(n) of one expert run as its own MoE layer (docs/design.md: max((W + A(n)) / BW, 2 n_pad P / F) in the kernel
// model), n_pad = n padded to the launch's row tile (GroupedCost).
CostBreakdown expert_time(const ExpertRoofline& model, int64_t n);

// One attention layer for one decode step (docs/design.md: KV-cache bytes read + attention weights over BW),
// as a roofline at the profile's achieved rates: the ideal column max(bytes / (BW eff_bw), FLOPs /
// (F eff_flops)); the quantized column combines the two terms with the profile's overlap (combine_terms)
// and adds 3 launches (QKV projection, attention, output projection). context_tokens = cached tokens summed over the
// batch; batch = sequences decoding one token each.
struct AttentionShape {
  int64_t hidden = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  Dtype dtype = Dtype::bf16;
};
CostBreakdown attention_decode_time(const HardwareProfile& hw, const AttentionShape& shape, int64_t batch,
                                    int64_t context_tokens);

// One attention layer for a batch of prefill tokens: weights read once, each sequence's K/V written and
// read once (a tiled kernel keeps a query block's K/V on chip), x read and y written; FLOPs 2 per weight
// per token plus 4 head_dim per attended (query, key) pair and head, attended_positions = sum over the
// tokens of the positions each attends to. Columns and launches as attention_decode_time.
CostBreakdown attention_prefill_time(const HardwareProfile& hw, const AttentionShape& shape, int64_t tokens,
                                     int64_t attended_positions);

}  // namespace moesim
