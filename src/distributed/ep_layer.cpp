// The expert-parallel MoE layer's forward over MPI (see ep_layer.hpp), in its phases: the rank's dispatch
// plan, the counts exchange (global load, prefix, per-slot counts), packing and the rows' all-to-all,
// unpacking into slot-major padded buffers, the local experts, the return all-to-all and the combine.
// Each phase is timed into EpPhaseTimes. Planning is in ep_plan.cpp, the MPI wrappers in ep_mpi.cpp.
// Host only; forward needs MOESIM_HAS_MPI. Covered by tests/mpi/ep_layer_mpi.cpp.
#include "src/distributed/ep_layer.hpp"

#include <algorithm>
#include <cstring>

#include "src/common/clock.hpp"
#include "src/common/error.hpp"
#include "src/distributed/ep_mpi_internal.hpp"
#include "kernels/grouped_gemm.hpp"

#if defined(MOESIM_HAS_MPI)
#include <mpi.h>
#endif

namespace moesim {

#if defined(MOESIM_HAS_MPI)
namespace {

using ep_detail::check_mpi;
using ep_detail::to_int_count;

// The counts phase: the global load, the slot ranges, this rank's send plan and the per-slot counts.
struct ExchangeCounts {
  std::vector<int64_t> global_load;             // [num_experts] kept assignments over every rank
  std::vector<int64_t> slot_first, slot_count;  // [num_slots] ep_slot_ranges
  EpSendPlan send;
  std::vector<int64_t> recv_counts;             // [num_ranks * num_local] rows from each source per local slot
};

// The global load, the kept assignments of each expert on lower ranks, then per-slot counts.
ExchangeCounts exchange_counts(const ExpertPlacement& placement, const DispatchPlan& plan, int num_experts,
                               int num_local) {
  const int num_ranks = ep_num_ranks(), me = ep_rank();
  ExchangeCounts c;
  c.global_load.assign(plan.counts.begin(), plan.counts.end());
  std::vector<int64_t> prefix(num_experts, 0);
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, c.global_load.data(), num_experts, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  check_mpi(MPI_Exscan(plan.counts.data(), prefix.data(), num_experts, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Exscan");
  if (me == 0) std::fill(prefix.begin(), prefix.end(), 0);  // MPI_Exscan leaves rank 0's buffer undefined
  ep_slot_ranges(placement, c.global_load, c.slot_first, c.slot_count);
  c.send = ep_send_plan(placement, plan.counts, prefix, c.slot_first, c.slot_count);
  // Counts all-to-all: to rank d, one count per slot of d (slot order); from each rank, one per local slot.
  std::vector<int64_t> send_counts;
  std::vector<int> sc_counts(num_ranks, 0), sc_displs(num_ranks, 0), rc_counts(num_ranks, num_local),
      rc_displs(num_ranks, 0);
  for (int32_t i : c.send.slot_order) {
    send_counts.push_back(c.send.slot_rows[i]);
    ++sc_counts[placement.device[i]];
  }
  for (int d = 1; d < num_ranks; ++d) {
    sc_displs[d] = sc_displs[d - 1] + sc_counts[d - 1];
    rc_displs[d] = rc_displs[d - 1] + num_local;
  }
  c.recv_counts.resize(static_cast<size_t>(num_ranks) * num_local);
  check_mpi(MPI_Alltoallv(send_counts.data(), sc_counts.data(), sc_displs.data(), MPI_INT64_T, c.recv_counts.data(),
                          rc_counts.data(), rc_displs.data(), MPI_INT64_T, MPI_COMM_WORLD),
            "MPI_Alltoallv (counts)");
  return c;
}

// Conservation: every local slot receives exactly its share of the global load. Returns the rows per slot.
std::vector<int64_t> received_per_slot(const ExchangeCounts& c, const ExpertPlacement& placement,
                                       const std::vector<int32_t>& local_slots) {
  const int num_ranks = ep_num_ranks();
  const int num_local = static_cast<int>(local_slots.size());
  std::vector<int64_t> slot_received(num_local, 0);
  for (int s = 0; s < num_ranks; ++s)
    for (int m = 0; m < num_local; ++m) slot_received[m] += c.recv_counts[static_cast<size_t>(s) * num_local + m];
  for (int m = 0; m < num_local; ++m) {
    MOESIM_REQUIRE(slot_received[m] == c.slot_count[local_slots[m]],
                   "slot " << local_slots[m] << " (expert " << placement.expert[local_slots[m]] << ") received "
                           << slot_received[m] << " rows, expected " << c.slot_count[local_slots[m]]
                           << ": the ranks disagree on the routing or the placement");
  }
  return slot_received;
}

// The rows' all-to-all both ways: the send buffer in send order, the receive buffer, counts and
// displacements in floats (the return reuses them with the roles swapped).
struct RowExchange {
  std::vector<float> send_buf, recv_buf;
  std::vector<int> s_counts, s_displs, r_counts, r_displs;
  std::vector<int64_t> recv_from;  // [num_ranks] rows from each source
  int64_t num_send = 0, num_recv = 0;
};

// Packs the rank's rows in send order and sizes the receive side from the received counts.
RowExchange pack_rows(const Routing& local, const DispatchPlan& plan, const ExchangeCounts& c, int num_local,
                      const float* x_local, int64_t hidden) {
  const int num_ranks = ep_num_ranks();
  const EpSendPlan& send = c.send;
  RowExchange x;
  x.num_send = static_cast<int64_t>(send.send_row.size());
  const int64_t num_send = x.num_send;
  x.send_buf.resize(static_cast<size_t>(num_send * hidden));
  float* send_buf = x.send_buf.data();
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < num_send; ++k) {
    const int64_t t = local.token[plan.order[send.send_row[k]]];
    std::memcpy(send_buf + k * hidden, x_local + t * hidden, sizeof(float) * hidden);
  }
  x.s_counts.resize(num_ranks);
  x.s_displs.resize(num_ranks);
  x.r_counts.resize(num_ranks);
  x.r_displs.resize(num_ranks);
  int64_t s_off = 0, r_off = 0;
  x.recv_from.assign(num_ranks, 0);
  for (int d = 0; d < num_ranks; ++d) {
    for (int m = 0; m < num_local; ++m) x.recv_from[d] += c.recv_counts[static_cast<size_t>(d) * num_local + m];
    x.s_counts[d] = to_int_count(send.rank_rows[d] * hidden, "rows sent");
    x.r_counts[d] = to_int_count(x.recv_from[d] * hidden, "rows received");
    x.s_displs[d] = to_int_count(s_off, "rows sent");
    x.r_displs[d] = to_int_count(r_off, "rows received");
    s_off += send.rank_rows[d] * hidden;
    r_off += x.recv_from[d] * hidden;
  }
  x.num_recv = r_off / hidden;
  x.recv_buf.resize(static_cast<size_t>(r_off));
  return x;
}

// Copy runs between the receive order and the slot-major order: (source position, destination row, rows).
struct Run {
  int64_t src, dst, rows;
};

// The local experts' input: slot m's rows from source 0, 1, ... then its padding (zeros), and the
// buffers the experts write.
struct SlotRows {
  std::vector<int64_t> padded_offsets;  // [num_local + 1]
  std::vector<Run> runs;
  std::vector<float> xg, expert_rows, scratch;
  int64_t rows_computed = 0;
};

SlotRows unpack_to_slots(const RowExchange& x, const ExchangeCounts& c, const std::vector<int64_t>& slot_received,
                         const ExpertPlacement& placement, const std::vector<int32_t>& local_slots, Layout layout,
                         int block_size, int64_t local_capacity, int64_t hidden, int64_t ffn) {
  const int num_ranks = ep_num_ranks();
  const int num_local = static_cast<int>(local_slots.size());
  const std::vector<int64_t>& global_load = c.global_load;
  const int64_t capacity = local_capacity > 0
                               ? local_capacity
                               : (global_load.empty() ? 0 : *std::max_element(global_load.begin(), global_load.end()));
  SlotRows out;
  std::vector<int64_t>& padded_offsets = out.padded_offsets;
  padded_offsets.assign(num_local + 1, 0);
  for (int m = 0; m < num_local; ++m) {
    const int replicas = placement.replicas[placement.expert[local_slots[m]]];
    padded_offsets[m + 1] =
        padded_offsets[m] + ep_padded_rows(slot_received[m], layout, block_size, capacity, replicas);
  }
  out.rows_computed = padded_offsets[num_local];
  const int64_t rows_computed = out.rows_computed;
  {
    std::vector<int64_t> fill(padded_offsets.begin(), padded_offsets.end() - 1);
    int64_t pos = 0;
    for (int s = 0; s < num_ranks; ++s) {
      for (int m = 0; m < num_local; ++m) {
        const int64_t n = c.recv_counts[static_cast<size_t>(s) * num_local + m];
        if (n > 0) out.runs.push_back({pos, fill[m], n});
        fill[m] += n;
        pos += n;
      }
    }
  }
  out.xg.assign(static_cast<size_t>(rows_computed * hidden), 0.0f);
  out.expert_rows.resize(static_cast<size_t>(rows_computed * hidden));
  out.scratch.resize(static_cast<size_t>(2 * rows_computed * ffn));
  const std::vector<Run>& runs = out.runs;
  float* xg = out.xg.data();
  const float* recv_buf = x.recv_buf.data();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < runs.size(); ++i) {
    std::memcpy(xg + runs[i].dst * hidden, recv_buf + runs[i].src * hidden, sizeof(float) * runs[i].rows * hidden);
  }
  return out;
}

}  // namespace
#else
using ep_detail::no_mpi;
#endif

// ---- the layer -------------------------------------------------------------------------------------

EpMoeLayer::EpMoeLayer(const ExpertWeights& full, const ExpertWeights* shared, const ExpertPlacement& placement,
                       Layout layout, int block_size)
    : full_(full), shared_(shared), layout_(layout), block_size_(block_size) {
  require_valid_weights(full);
  if (shared != nullptr) {
    require_valid_weights(*shared);
    MOESIM_REQUIRE(shared->hidden == full.hidden,
                   "shared experts have hidden " << shared->hidden << ", routed experts " << full.hidden);
  }
  MOESIM_REQUIRE(layout != Layout::block || block_size >= 1, "block layout needs block_size >= 1");
  set_placement(placement);
}

EpMoeLayer::~EpMoeLayer() = default;

void EpMoeLayer::set_placement(const ExpertPlacement& placement) {
  MOESIM_REQUIRE(static_cast<int>(placement.replicas.size()) == full_.num_experts,
                 "placement has " << placement.replicas.size() << " experts, weights " << full_.num_experts);
  MOESIM_REQUIRE(placement.num_devices == ep_num_ranks(),
                 "placement is for " << placement.num_devices << " devices, the job has " << ep_num_ranks()
                                     << " MPI ranks");
  placement_ = placement;
  local_slots_ = ep_rank_slots(placement_, ep_rank());
  local_weights_ = ep_slot_weights(full_, placement_, local_slots_);
}

void EpMoeLayer::forward(const Routing& local, const float* x_local, float* y_local, EpRankStats* stats,
                         std::vector<int64_t>* global_load_out, std::vector<int64_t>* recv_counts_out) {
#if defined(MOESIM_HAS_MPI)
  const auto t_layer = Clock::now();
  require_valid_routing(local);
  MOESIM_REQUIRE(local.num_experts == full_.num_experts,
                 "routing has " << local.num_experts << " experts, weights " << full_.num_experts);
  const int me = ep_rank();
  const int64_t hidden = full_.hidden;
  const int num_local = static_cast<int>(local_slots_.size());
  EpRankStats st;
  st.local_tokens = local.num_tokens;
  st.local_slots = num_local;

  // Local dispatch plan: the rank's kept assignments in expert-major (stable) order.
  auto t0 = Clock::now();
  const DispatchPlan plan = plan_dispatch_omp(local, Layout::dropless, 1);
  st.times.plan_s = seconds_since(t0);
  st.assignments_sent = plan.num_kept;

  st.times.idle_dispatch_s = ep_barrier_s();

  t0 = Clock::now();
  ExchangeCounts counts = exchange_counts(placement_, plan, full_.num_experts, num_local);
  st.times.counts_s = seconds_since(t0);
  const std::vector<int64_t> slot_received = received_per_slot(counts, placement_, local_slots_);

  t0 = Clock::now();
  RowExchange x = pack_rows(local, plan, counts, num_local, x_local, hidden);
  st.times.pack_s = seconds_since(t0);

  t0 = Clock::now();
  check_mpi(MPI_Alltoallv(x.send_buf.data(), x.s_counts.data(), x.s_displs.data(), MPI_FLOAT, x.recv_buf.data(),
                          x.r_counts.data(), x.r_displs.data(), MPI_FLOAT, MPI_COMM_WORLD),
            "MPI_Alltoallv (dispatch)");
  st.times.dispatch_s = seconds_since(t0);

  t0 = Clock::now();
  SlotRows slots = unpack_to_slots(x, counts, slot_received, placement_, local_slots_, layout_, block_size_,
                                   local.capacity, hidden, full_.ffn);
  st.times.unpack_s = seconds_since(t0);

  t0 = Clock::now();
  if (num_local > 0 && slots.rows_computed > 0)
    grouped_swiglu_omp(local_weights_, slots.xg.data(), slots.padded_offsets.data(), slots.expert_rows.data(),
                       slots.scratch.data());
  const bool has_shared = shared_ != nullptr && shared_->num_experts > 0;
  std::vector<float> shared_out(has_shared ? static_cast<size_t>(local.num_tokens * hidden) : 0);
  if (has_shared) shared_experts_omp(*shared_, x_local, local.num_tokens, shared_out.data());
  st.times.experts_s = seconds_since(t0);

  // Back in receive order (the same runs reversed), then home.
  t0 = Clock::now();
  const std::vector<Run>& runs = slots.runs;
  float* recv_buf = x.recv_buf.data();
  const float* expert_rows = slots.expert_rows.data();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < runs.size(); ++i) {
    std::memcpy(recv_buf + runs[i].src * hidden, expert_rows + runs[i].dst * hidden,
                sizeof(float) * runs[i].rows * hidden);
  }
  st.times.unpack_s += seconds_since(t0);

  st.times.idle_combine_s = ep_barrier_s();

  t0 = Clock::now();
  check_mpi(MPI_Alltoallv(x.recv_buf.data(), x.r_counts.data(), x.r_displs.data(), MPI_FLOAT, x.send_buf.data(),
                          x.s_counts.data(), x.s_displs.data(), MPI_FLOAT, MPI_COMM_WORLD),
            "MPI_Alltoallv (combine)");
  st.times.return_s = seconds_since(t0);

  t0 = Clock::now();
  const EpSendPlan& send = counts.send;
  const int64_t num_send = x.num_send;
  std::vector<float> expert_out(static_cast<size_t>(plan.rows * hidden));
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < num_send; ++k) {
    std::memcpy(expert_out.data() + send.send_row[k] * hidden, x.send_buf.data() + k * hidden, sizeof(float) * hidden);
  }
  combine_omp(local, plan, expert_out.data(), has_shared ? shared_out.data() : nullptr, hidden, y_local);
  st.times.combine_s = seconds_since(t0);

  st.rows_received = x.num_recv;
  st.rows_received_remote = x.num_recv - x.recv_from[me];
  st.rows_sent_remote = num_send - send.rank_rows[me];
  st.rows_computed = slots.rows_computed;
  st.times.layer_s = seconds_since(t_layer);
  if (stats != nullptr) *stats = st;
  if (global_load_out != nullptr) *global_load_out = std::move(counts.global_load);
  if (recv_counts_out != nullptr) *recv_counts_out = std::move(counts.recv_counts);
#else
  (void)local;
  (void)x_local;
  (void)y_local;
  (void)stats;
  (void)global_load_out;
  (void)recv_counts_out;
  no_mpi();
#endif
}

}  // namespace moesim
