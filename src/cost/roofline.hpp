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
//  quantized  - GEMM tiles of tile_m x tile_n spread over sm_count SMs in whole waves, plus launches;
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

// Accumulates the experts of one grouped kernel pair (up, then down) on one device:
//   t = max(sum_active (W + A(n)) / BW, compute) + launches, where compute is
//   ideal:     sum 2 n P / F
//   quantized: waves(sum_e ceil(n_e/tile_m) col_tiles) * wave time, per GEMM, summed over the two GEMMs
// and an expert with n = 0 costs nothing (the caller passes capacity rows for capacity layouts).
// Two launches (up and down) when any row is present; none otherwise.
class GroupedCost {
 public:
  explicit GroupedCost(const ExpertRoofline& model) : m_(&model) {}
  void add(int64_t rows) { add(rows, 1); }
  void add(int64_t rows, int64_t experts) {  // `experts` experts of `rows` rows each
    if (rows <= 0 || experts <= 0) return;
    rows_ += rows * experts;
    experts_ += experts;
    row_tiles_ += m_->row_tiles(rows) * experts;
  }
  int64_t rows() const { return rows_; }
  int64_t experts() const { return experts_; }
  CostBreakdown time() const;
  // The two terms time() combines: memory sum (W + A(n)) / BW and the quantized compute (waves of tiles),
  // before efficiencies and launches.
  struct Terms {
    double memory_s = 0, compute_s = 0;
  };
  Terms terms() const;

 private:
  const ExpertRoofline* m_;
  int64_t rows_ = 0, experts_ = 0, row_tiles_ = 0;
};

// t(n) of one expert run as its own kernel pair (DESIGN.md: max((W + A(n)) / BW, 2 n_pad P / F)).
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
