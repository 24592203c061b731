// Roofline cost of SwiGLU experts (DESIGN.md "Cost model"): one expert with n rows, a grouped kernel of
// many experts on one device, and one attention decode step, each as three numbers side by side.
// Inputs are row counts per expert (already laid out: load, block-rounded or capacity rows).
// Pure arithmetic, host only, no allocation. Covered by tests/cost/roofline_test.cpp.
#pragma once

#include <algorithm>

#include <cstdint>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"

namespace moesim {

// Modelled seconds, three ways:
//  ideal      - roofline at peak: no tile padding, efficiency 1, no launch overhead;
//  quantized  - GEMM tiles spread over sm_count SMs in whole waves, plus launches; the row tile of each
//               grouped launch fits its rows per expert and a wave the tiles leave mostly idle splits K
//               (GroupedCost below);
//  calibrated - quantized with the profile's efficiency_flops and efficiency_bw applied, and its terms
//               combined as max(mem, compute) + (1 - memory_compute_overlap) x min(mem, compute).
struct CostBreakdown {
  double ideal_s = 0.0;
  double quantized_s = 0.0;
  double calibrated_s = 0.0;
};

// Constants of one SwiGLU expert shape on one profile. An expert is two grouped GEMMs:
//   up:   [n, hidden] x [hidden, 2 ffn] (gate and up; SwiGLU fused into its epilogue) -> [n, ffn]
//   down: [n, ffn] x [ffn, hidden] -> [n, hidden]
// P = 3 hidden ffn parameters, W = P bytes_per_weight; FLOPs = 2 n P.
// A(n) = n (2 hidden + 2 ffn) act_bytes: x read, y written, and the [n, ffn] SwiGLU output written by
// the up GEMM and read by the down GEMM. Activations use the model dtype's width (W8A8 for fp8/int8).
struct ExpertRoofline {
  ExpertRoofline(const HardwareProfile& hw, int64_t hidden, int64_t ffn, Dtype dtype);

  // Row tiles a grouped launch may choose: those of 16, 32 and 64 below tile_m, then tile_m itself (16,
  // 32, 64, 128 on every GPU profile here); only tile_m when tile_m <= 16 (a CPU GEMM pads no rows: 1).
  static constexpr int kMaxRowTiles = 4;
  // The shortest K slice split-K gives one thread block: two k-steps of BLOCK_SIZE_K 64 (vLLM fused_moe's
  // default small-M config; a CUTLASS split-K slice is whole k-tiles), so each slice still pipelines.
  static constexpr int64_t kMinSplitKChunk = 128;

  int64_t hidden, ffn;
  double weight_bytes;         // W
  double act_bytes_per_row;    // A(n) / n
  double flops_per_row;        // 2 P
  double peak_flops_per_s;     // F for the dtype
  double bandwidth_bytes_per_s;
  double eff_flops, eff_bw;
  double overlap;              // memory_compute_overlap, for the calibrated column
  double launch_s;
  int tile_m, tile_n, sm_count;
  int64_t col_tiles_up, col_tiles_down;  // ceil(2 ffn / tile_n), ceil(hidden / tile_n)
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

  // True when the ideal compute term exceeds the memory term for n rows (past the knee): n rows do
  // n 2P / F > (W + A(n)) / BW. One comparison against the knee worked out once in the constructor.
  bool compute_bound(int64_t n) const { return n > 0 && n >= compute_bound_from; }
  // ceil(n / tile_m) for n >= 0.
  int64_t row_tiles(int64_t n) const {
    return tile_m_shift >= 0 ? (n + tile_m - 1) >> tile_m_shift : (n + tile_m - 1) / tile_m;
  }
};

// The calibrated column's combination of a memory and a compute term: the roofline's max when the machine
// overlaps them fully (overlap 1), their sum when it does not overlap them at all (overlap 0).
inline double combine_terms(double mem_s, double compute_s, double overlap) {
  return std::max(mem_s, compute_s) + (1.0 - overlap) * std::min(mem_s, compute_s);
}

// Which GEMMs of the SwiGLU pair a cost covers: both (the layer), the gate+up GEMM alone, or the down
// GEMM alone (a benchmark that times one fused_moe_kernel launch, src/sweep/published.hpp).
enum class GemmPart { both, up, down };

// Accumulates the experts of one grouped kernel pair (up, then down) on one device:
//   t = max(sum_active (W + A(n)) / BW, compute) + launches, where compute is
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
// Two launches (up and down) when any row is present; none otherwise.
class GroupedCost {
 public:
  explicit GroupedCost(const ExpertRoofline& model) : m_(&model) {}
  void add(int64_t rows) {
    if (rows <= 0) return;
    rows_ += rows;
    ++experts_;
    add_row_tiles(rows - 1, 1);
  }
  void add(int64_t rows, int64_t experts) {  // `experts` experts of `rows` rows each
    if (rows <= 0 || experts <= 0) return;
    rows_ += rows * experts;
    experts_ += experts;
    add_row_tiles(rows - 1, experts);
  }
  int64_t rows() const { return rows_; }
  int64_t experts() const { return experts_; }
  // The row tile of this launch (rows per tile), 0 when no row is present.
  int tile_rows() const { return rows_ == 0 ? 0 : m_->row_tile_rows[tile_index()]; }
  // sum_e ceil(n_e / m) at this launch's row tile m: the row tiles of either GEMM (0 when no row).
  int64_t launch_row_tiles() const { return rows_ == 0 ? 0 : row_tiles(tile_index()); }
  CostBreakdown time() const;
  // The two terms time() combines: memory sum (W + A(n)) / BW and the quantized compute (waves of tiles),
  // before efficiencies and launches.
  struct Terms {
    double memory_s = 0, compute_s = 0;
  };
  // `part` up or down: that GEMM's share alone. Up reads 2/3 of W (gate and up) and down 1/3; each
  // moves half of A(n): up reads x and writes the SwiGLU output, down reads it and writes y.
  Terms terms(GemmPart part = GemmPart::both) const;

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
    for (int k = 0; k < last; ++k) {
      if (static_cast<int64_t>(m.row_tile_rows[k]) * experts_ >= rows_) return k;
    }
    return last;
  }

  const ExpertRoofline* m_;
  int64_t rows_ = 0, experts_ = 0;
  int64_t tiles_less_one_[ExpertRoofline::kMaxRowTiles] = {};  // sum_e (n_e - 1) / row_tile_rows[k], per k
};

// t(n) of one expert run as its own kernel pair (DESIGN.md: max((W + A(n)) / BW, 2 n_pad P / F)), n_pad = n
// padded to the launch's row tile (GroupedCost).
CostBreakdown expert_time(const ExpertRoofline& model, int64_t n);

// One attention layer for one decode step (DESIGN.md: KV-cache bytes read + attention weights over BW),
// as a roofline: max(bytes / BW, FLOPs / F), plus 3 launches (QKV projection, attention, output
// projection) in the quantized and calibrated columns. context_tokens = cached tokens summed over the
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
