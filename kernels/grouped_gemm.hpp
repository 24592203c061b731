// Grouped expert GEMMs on the host (float32, row-major): each GEMM cut into tiles of a shape fixed by the
// problem (gemm_tiles), one single-threaded GEMM call per tile, the tiles shared among the OpenMP
// threads. Empty experts are skipped; padding rows are computed (the waste of the block/capacity
// layouts). Bytewise the same at any thread count for one GEMM kernel (HostGemm).
// Built by g++ (kernels/host/gemm_openblas.cpp: OpenBLAS OpenMP build, or the fixed-order kernel).
// Covered by tests/experts/grouped_gemm_test.cpp against kernels/moe_ref.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/moe_layer.hpp"

namespace moesim {

// Largest tile of one GEMM's [rows, cols] output. Each tile packs its own A rows (rows x k) and B columns
// (k x cols), so a tile re-packs A once per column block and B once per row block: packing is memory
// traffic, about 1 / 20 of the arithmetic's time per 256 columns at k = 1024 (measured: 512 x 256 tiles
// cost 10-12 % at (4096, 1024, 2816, 8, 2); docs/performance.md). 1024 x 1024 tiles keep it near 2 % and
// still give an 8-expert layer a dozen tiles or more per phase.
constexpr int64_t kTileMaxRows = 1024;
constexpr int64_t kTileMaxCols = 1024;
constexpr int64_t kTileColAlign = 16;  // column blocks are multiples of this (but the last)

// One tile: output rows [row0, row0 + rows), columns [col0, col0 + cols).
struct GemmTile {
  int64_t row0, rows, col0, cols;
};

// The tiles of a [rows, cols] output, row-major order: even splits into ceil(rows / kTileMaxRows) row
// blocks and ceil(cols / kTileMaxCols) column blocks (widths rounded up to kTileColAlign). A function of
// (rows, cols) only: this is what makes the bits independent of the thread count. Empty for 0 rows.
std::vector<GemmTile> gemm_tiles(int64_t rows, int64_t cols);

// Plain grouped GEMM: for each group g, C[off[g]:off[g+1]] = A[off[g]:off[g+1]] * B_g.
// a: [offsets[G], k]; b: [G, k, n]; c: [offsets[G], n]; offsets: [G+1].
// Exposed for the exact integer test and benchmarks (no activation).
void grouped_gemm_omp(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k,
                      int64_t n, float* c, HostGemm gemm = HostGemm::openblas);

// Grouped SwiGLU over the expert-major buffer: rows [offsets[e], offsets[e+1]) go through expert e:
// out = (silu(xg W1_e) * (xg W3_e)) W2_e. xg, out: [offsets[E], w.hidden]; offsets: [E+1]
// (a plan's padded_offsets). scratch: [2 * offsets[E] * w.ffn] floats, or nullptr to allocate inside (then
// the experts run in waves that hold at most 64 MiB of scratch; the bits are the same either way).
void grouped_swiglu_omp(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out,
                        float* scratch = nullptr, HostGemm gemm = HostGemm::openblas);

// Shared experts: out[t] = sum over s = 0..S-1 (in that order) of SwiGLU_s(x[t]), every token, weight 1.
// x, out: [num_tokens, shared.hidden].
void shared_experts_omp(const ExpertWeights& shared, const float* x, int64_t num_tokens, float* out,
                        HostGemm gemm = HostGemm::openblas);

}  // namespace moesim
