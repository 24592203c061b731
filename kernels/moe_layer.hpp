// The executed MoE layer on the host: dispatch plan (expert-major permutation + padding layout), gather,
// grouped SwiGLU experts (OpenBLAS), deterministic weighted combine. x, y: [num_tokens, hidden] float32.
// Determinism: every output is bytewise identical at any OpenMP thread count (fixed summation orders).
// Built by g++ (kernels/host/*.cpp); the serial references (plan_dispatch_ref, moe_forward_ref, ...) live in
// kernels/permute_ref.hpp and kernels/moe_ref.hpp and come with this header.
// Covered by tests/dispatch/*_test.cpp and tests/experts/*_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/experiment.hpp"
#include "router/routing.hpp"

namespace moesim {

// The dispatch plan of one Routing.
// Contract:
// - order: the kept assignments sorted by expert with a STABLE sort, so assignment order (token order,
//   for token-major routings) is kept within each expert. Dropped assignments are excluded.
// - counts[e] = kept assignments of expert e; offsets = exclusive scan of counts, offsets[E] = num_kept.
// - Layouts: dropless: rows = num_kept, segments exactly counts[e];
//   block: each expert's segment padded up to a multiple of block_size (0 rows -> 0 blocks, as vLLM's
//   moe_align_block_size); capacity: every expert gets exactly C rows, rows = E * C.
// - padded_offsets[E+1]: start row of each expert's segment in the expert-major buffer.
// - row_assignment[rows]: assignment index held by each row; -1 marks a padding row (gathered as zeros).
//   Expert e's k-th kept assignment (k < counts[e]) sits in row padded_offsets[e] + k.
struct DispatchPlan {
  int num_experts = 0;
  Layout layout = Layout::dropless;
  int64_t num_kept = 0;
  int64_t rows = 0;
  std::vector<int64_t> counts;          // [E]
  std::vector<int64_t> offsets;         // [E+1]
  std::vector<int64_t> padded_offsets;  // [E+1]
  std::vector<int32_t> order;           // [num_kept] assignment index of each expert-major kept row
  std::vector<int32_t> row_assignment;  // [rows] assignment index, -1 = padding
};

// Sentinel of a padding row in DispatchPlan::row_assignment.
constexpr int32_t kPaddingRow = -1;

// SwiGLU expert weights, float32 row-major: expert e computes y = (silu(x W1_e) * (x W3_e)) W2_e.
struct ExpertWeights {
  int num_experts = 0;
  int64_t hidden = 0;
  int64_t ffn = 0;
  std::vector<float> w1;  // [num_experts, hidden, ffn]
  std::vector<float> w3;  // [num_experts, hidden, ffn]
  std::vector<float> w2;  // [num_experts, ffn, hidden]
};

// The GEMM that runs the host experts' tiles. openblas: the executed layer that is timed (the same bytes
// at any thread count for one OpenBLAS kernel, which the machine picks). fixed_order: moesim's own kernel
// (kernels/gemm_fixed_order.hpp), the same bytes on any x86-64 machine; the decoder workload uses it.
enum class HostGemm { openblas, fixed_order };

// Wall seconds (steady_clock) of the three phases of moe_forward_omp.
struct MoePhaseTimes {
  double dispatch_s = 0;  // gather into the expert-major buffer (planning is timed by the caller)
  double experts_s = 0;   // grouped SwiGLU of the routed experts plus the shared experts
  double combine_s = 0;   // weighted un-permute (and the shared-expert sum)
};

// Rows of the capacity layout: r.capacity when the router set one, else the largest load (the smallest
// E x C buffer that holds a dropless routing). Every load must fit: a load over C is a router bug.
int64_t layout_capacity(const Routing& r, const std::vector<int64_t>& counts);

// Checks the Routing invariants the dispatch relies on (sizes agree, ids in range, fits int32 indices).
// Throws PreconditionError.
void require_valid_routing(const Routing& r);

// Checks that plan belongs to r, as the gather, combine and layer entry points of both backends need:
// the same expert count, padded_offsets [E+1] ending at rows, row_assignment [rows], order [num_kept],
// and every row holding an assignment of r or kPaddingRow. Throws PreconditionError.
void require_plan_matches(const Routing& r, const DispatchPlan& plan);

// Checks that the weight vectors have the sizes num_experts, hidden and ffn say. Throws PreconditionError.
void require_valid_weights(const ExpertWeights& w);

// Dispatch plan through Thrust's OpenMP backend (kernels/permute.hpp). block_size is read in the block
// layout only (>= 1). Integer outputs equal plan_dispatch_ref's exactly.
DispatchPlan plan_dispatch_omp(const Routing& r, Layout layout, int block_size);

// Normal(0, 1/fan_in) weights from a counter-based generator: element i of tensor t (w1, w3, w2) depends
// only on (seed, t, i), so the same seed gives the same weights at any thread count and on any machine
// with the same libm. fan_in = hidden for w1 and w3, ffn for w2.
ExpertWeights make_expert_weights(int num_experts, int64_t hidden, int64_t ffn, uint64_t seed);

// Gathers x rows into the expert-major buffer: xg[row] = x[token[row_assignment[row]]], zeros for padding.
// x: [r.num_tokens, hidden]; xg: [plan.rows, hidden].
void gather_rows_omp(const float* x, int64_t hidden, const Routing& r, const DispatchPlan& plan, float* xg);

// Weighted un-permute: y[t] = sum over t's kept assignments a, in assignment order, of
// weight[a] * expert_out[row of a], then + shared_out[t] when shared_out is non-null.
// Each token is written by one thread in a fixed order (no atomics): deterministic.
// Tokens with no kept assignment get zeros (plus shared_out).
// expert_out: [plan.rows, hidden]; shared_out: [r.num_tokens, hidden] or nullptr; y: [r.num_tokens, hidden].
void combine_omp(const Routing& r, const DispatchPlan& plan, const float* expert_out,
                 const float* shared_out, int64_t hidden, float* y);

// Full layer: gather, routed experts (+ shared experts: S always-on experts with weight 1, added to every
// token; shared may be null), combine. plan must come from plan_dispatch_* on the same Routing.
// x, y: [r.num_tokens, w.hidden]. times is filled when non-null. gemm runs the routed and shared experts.
void moe_forward_omp(const ExpertWeights& w, const ExpertWeights* shared, const float* x,
                     const Routing& r, const DispatchPlan& plan, float* y, MoePhaseTimes* times,
                     HostGemm gemm = HostGemm::openblas);

}  // namespace moesim

// The serial references are part of the host API (--verify runs them beside the fast path). They include
// this header first, so either header may be included first.
#include "kernels/moe_ref.hpp"
#include "kernels/permute_ref.hpp"
