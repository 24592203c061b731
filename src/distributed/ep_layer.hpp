// The expert-parallel MoE layer over MPI ranks: each rank holds a contiguous token share and the expert slots
// the placement gives it; kept assignments go to their slot's rank by MPI_Alltoallv (per-slot counts, then
// rows), through the local experts, back the same way, and are combined in token order. Rows: float32
// [tokens, hidden], host memory. Integers (who sends what where) are exact; outputs equal the single-process
// layer within a GEMM-regrouping tolerance. g++; the MPI parts need MOESIM_HAS_MPI.
// Covered by tests/mpi/ep_plan_test.cpp (planning, no MPI) and tests/mpi/ep_layer_mpi.cpp (under mpirun).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/placement.hpp"
#include "kernels/moe_layer.hpp"
#include "router/routing.hpp"

namespace moesim {

// ---- planning: pure functions, no MPI --------------------------------------------------------------

// Tokens [begin, end) of one rank: N / D each, the first N mod D ranks one more (the cost model's split).
struct EpTokenShare {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
EpTokenShare ep_token_share(int64_t num_tokens, int rank, int num_ranks);

// The assignments of `global` whose token lies in `share`, in their original order, tokens renumbered from
// 0; num_tokens = share.size(), capacity and top_k kept.
Routing ep_local_routing(const Routing& global, const EpTokenShare& share);

// True when a token's experts and weights depend on that token's logits (and id) alone, so that a rank may
// route its own share: token_choice, group_limited and hash gating without a capacity (capacity_factor 0).
// Capacity, expert choice, sinkhorn, balanced, random, noisy_top_k (noise keyed by the batch position)
// and aux_free_bias (a bias driven by the whole batch's loads) need the whole batch.
bool ep_routing_is_token_local(const RouterConfig& cfg);

// Slots (physical experts) of `rank`, ascending: the experts it holds, in the order of its local weights.
std::vector<int32_t> ep_rank_slots(const ExpertPlacement& p, int rank);

// Replica ranges: slot i (the j-th slot of logical expert e in slot order) processes e's kept assignments
// [first[i], first[i] + count[i]), count = load/r + (j < load % r), the cost model's split (assign_load).
// The order of e's assignments: by source rank, then assignment order within the rank (for token-major
// routings, the single-process expert-major order). global_load: [num_experts]; outputs [num_slots].
void ep_slot_ranges(const ExpertPlacement& p, const std::vector<int64_t>& global_load, std::vector<int64_t>& first,
                    std::vector<int64_t>& count);

// What one rank sends. Send order: destination rank, then slot id; a slot's rows are a contiguous run of
// the rank's expert-major (dropless) dispatch buffer.
struct EpSendPlan {
  std::vector<int32_t> slot_order;        // [num_slots] slots sorted by (device, slot)
  std::vector<int64_t> slot_rows;         // [num_slots] rows this rank sends to each slot (by slot id)
  std::vector<int64_t> slot_first_row;    // [num_slots] first of them in the rank's expert-major buffer
  std::vector<int64_t> rank_rows;         // [num_ranks] rows sent to each rank
  std::vector<int64_t> send_row;          // [sum rows] expert-major buffer row of each row in send order
};

// local_counts: [num_experts] this rank's kept assignments per expert; prefix: [num_experts] kept
// assignments of each expert on lower ranks (an exclusive scan over ranks); global_load, ranges from
// ep_slot_ranges. Every local kept assignment is sent exactly once.
EpSendPlan ep_send_plan(const ExpertPlacement& p, const std::vector<int64_t>& local_counts,
                        const std::vector<int64_t>& prefix, const std::vector<int64_t>& slot_first,
                        const std::vector<int64_t>& slot_count);

// Rows slot `slot` computes for `rows` received rows under the layout (padding rows are computed, as in
// the single-process layer): dropless rows; block round_up(rows, block_size); capacity max(ceil(C / r),
// rows) with r the expert's replicas (the cost model's LayoutRule).
int64_t ep_padded_rows(int64_t rows, Layout layout, int block_size, int64_t capacity, int replicas);

// Serial reference of the exchange: rows[source][slot] = kept assignments of source's tokens that slot
// processes, from the global routing by plain loops (each expert's assignments by source rank, then
// assignment order; replica ranges by counting). [num_ranks][num_slots], row-major.
std::vector<int64_t> ep_exchange_counts_ref(const Routing& global, const ExpertPlacement& p, int num_ranks);

// Weights of the given slots, in that order (replicas copy their expert's weights).
ExpertWeights ep_slot_weights(const ExpertWeights& full, const ExpertPlacement& p, const std::vector<int32_t>& slots);

// ---- MPI ---------------------------------------------------------------------------------------------

// True when this binary was built with MPI (MOESIM_HAS_MPI).
bool ep_mpi_built();

// True when the process was started by an MPI launcher (Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's
// PMIX_RANK, or Hydra's PMI_SIZE in the environment) or MPI is already initialised.
bool ep_launched_by_mpirun();

// Initialises MPI (once per process; MPI_THREAD_FUNNELED: OpenMP threads never call MPI) and finalises it
// at exit. Throws ResourceError when built without MPI.
void ep_mpi_init();

// Rank and size of MPI_COMM_WORLD (ep_mpi_init first).
int ep_rank();
int ep_num_ranks();

// Prints "PREFIX: rank R of D: MESSAGE" on stderr and ends the whole job with MPI_Abort(exit_code), so a
// failure on one rank never leaves the others waiting in a collective. Without MPI: std::exit.
[[noreturn]] void ep_abort(int exit_code, const std::string& prefix, const std::string& message);

// Runs fn on every rank; when it throws on any rank, the lowest such rank prints its message and ends the
// job with the error's exit code (ep_abort) while the others wait to be ended. For setup steps that may
// fail on one rank only (a bad file) or on all alike (a bad config): one message, no rank left waiting.
// The waiting ranks sleep between polls instead of spinning.
void ep_agree(const std::string& prefix, const std::function<void()>& fn);

// Wall seconds of MPI_Barrier on this rank: how long it waited for the slowest rank.
double ep_barrier_s();

// Element-wise sum / max over ranks (MPI_Allreduce), in place.
void ep_allreduce_sum(std::vector<int64_t>& v);
void ep_allreduce_max(std::vector<double>& v);
// Gathers `mine` from every rank to every rank: [num_ranks * mine.size()] (all ranks pass the same size).
std::vector<double> ep_allgather(const std::vector<double>& mine);
// Variable-size gathers to every rank, in rank order.
std::vector<float> ep_allgatherv(const std::vector<float>& mine);
std::vector<int32_t> ep_allgatherv(const std::vector<int32_t>& mine);
std::vector<uint8_t> ep_allgatherv(const std::vector<uint8_t>& mine);

// Phase wall times of one rank in one forward, seconds (steady_clock).
struct EpPhaseTimes {
  double plan_s = 0;          // local dispatch plan (expert-major order of the rank's kept assignments)
  double idle_dispatch_s = 0; // barrier before the exchange: waiting for the slowest rank's routing and plan
  double counts_s = 0;        // load all-reduce, prefix scan and the per-slot counts all-to-all
  double pack_s = 0;          // gathering the rows in send order
  double dispatch_s = 0;      // the rows' MPI_Alltoallv to the experts
  double unpack_s = 0;        // received rows into the slot-major (padded) buffer
  double experts_s = 0;       // grouped SwiGLU of the local slots (+ shared experts on the local tokens)
  double idle_combine_s = 0;  // barrier before the return: waiting for the slowest rank's experts
  double return_s = 0;        // the results' MPI_Alltoallv back to the tokens' ranks
  double combine_s = 0;       // results into the expert-major buffer and the weighted combine
  double layer_s = 0;         // the whole forward
  double idle_s() const { return idle_dispatch_s + idle_combine_s; }
  double all_to_all_s() const { return counts_s + dispatch_s + return_s; }
};

// What one rank did in one forward.
struct EpRankStats {
  int64_t local_tokens = 0;         // tokens of the rank's share
  int64_t assignments_sent = 0;     // kept assignments of its tokens (rows sent, to itself included)
  int64_t rows_sent_remote = 0;     // of them, rows that left the rank
  int64_t rows_received = 0;        // rows its experts processed (tokens received, from itself included)
  int64_t rows_received_remote = 0; // of them, rows that came from other ranks
  int64_t rows_computed = 0;        // rows_received plus layout padding
  int local_slots = 0;              // physical experts on the rank
  EpPhaseTimes times;
};

// The distributed layer (ep_mpi_init first). forward is collective over MPI_COMM_WORLD; the rest is local.
class EpMoeLayer {
 public:
  // full: every logical expert's weights (each rank keeps copies of its slots'); shared may be null; both
  // must outlive the layer. Layout and block_size as the router's; the capacity layout pads each slot to
  // ceil(C / replicas). The placement must be for ep_num_ranks() devices.
  EpMoeLayer(const ExpertWeights& full, const ExpertWeights* shared, const ExpertPlacement& placement, Layout layout,
             int block_size);
  ~EpMoeLayer();

  // Replaces the placement (EPLB rebalancing): the rank re-slices its local weights from `full`.
  void set_placement(const ExpertPlacement& placement);
  const ExpertPlacement& placement() const { return placement_; }

  // local: this rank's routing (tokens 0..local.num_tokens); x_local, y_local: [local.num_tokens, hidden].
  // The capacity layout pads to local.capacity (0: the largest global load). global_load_out
  // [num_experts] and recv_counts_out [num_ranks * local slots] (rows from each source rank per local
  // slot, row-major by source) are filled when non-null. Checks that every slot receives exactly its
  // share of the global load (conservation) and throws PreconditionError otherwise or on inconsistent
  // inputs; ResourceError when a message exceeds MPI's int counts.
  void forward(const Routing& local, const float* x_local, float* y_local, EpRankStats* stats,
               std::vector<int64_t>* global_load_out = nullptr, std::vector<int64_t>* recv_counts_out = nullptr);

 private:
  const ExpertWeights& full_;
  const ExpertWeights* shared_;
  ExpertPlacement placement_;
  Layout layout_;
  int block_size_;
  std::vector<int32_t> local_slots_;
  ExpertWeights local_weights_;
};

}  // namespace moesim
