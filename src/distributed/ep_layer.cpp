// The expert-parallel MoE layer over MPI (see ep_layer.hpp): planning functions (always built) and the
// MPI exchange (MOESIM_HAS_MPI). Host only. Covered by tests/mpi/ep_plan_test.cpp and
// tests/mpi/ep_layer_mpi.cpp.
#include "src/distributed/ep_layer.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <thread>

#include "src/common/clock.hpp"
#include "src/common/error.hpp"
#include "kernels/grouped_gemm.hpp"

#if defined(MOESIM_HAS_MPI)
#include <mpi.h>
#endif

namespace moesim {

// ---- planning --------------------------------------------------------------------------------------

EpTokenShare ep_token_share(int64_t num_tokens, int rank, int num_ranks) {
  MOESIM_REQUIRE(num_ranks >= 1 && rank >= 0 && rank < num_ranks,
                 "rank " << rank << " is not in [0, " << num_ranks << ")");
  MOESIM_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got " << num_tokens);
  const int64_t base = num_tokens / num_ranks, extra = num_tokens % num_ranks;
  EpTokenShare s;
  s.begin = rank * base + std::min<int64_t>(rank, extra);
  s.end = s.begin + base + (rank < extra ? 1 : 0);
  return s;
}

Routing ep_local_routing(const Routing& global, const EpTokenShare& share) {
  require_valid_routing(global);
  MOESIM_REQUIRE(share.begin >= 0 && share.begin <= share.end && share.end <= global.num_tokens,
                 "token share [" << share.begin << ", " << share.end << ") is not inside the batch of "
                                 << global.num_tokens);
  Routing r;
  r.num_tokens = share.size();
  r.num_experts = global.num_experts;
  r.top_k = global.top_k;
  r.capacity = global.capacity;
  for (int64_t a = 0; a < global.num_assignments(); ++a) {
    const int64_t t = global.token[a];
    if (t < share.begin || t >= share.end) continue;
    r.token.push_back(static_cast<int32_t>(t - share.begin));
    r.expert.push_back(global.expert[a]);
    r.weight.push_back(global.weight[a]);
    r.kept.push_back(global.kept[a]);
  }
  return r;
}

bool ep_routing_is_token_local(const RouterConfig& cfg) {
  if (cfg.capacity_factor > 0) return false;
  switch (cfg.gating) {
    case Gating::token_choice:
    case Gating::group_limited:
    case Gating::hash:
      return true;
    default:
      return false;
  }
}

std::vector<int32_t> ep_rank_slots(const ExpertPlacement& p, int rank) {
  std::vector<int32_t> slots;
  for (size_t i = 0; i < p.device.size(); ++i)
    if (p.device[i] == rank) slots.push_back(static_cast<int32_t>(i));
  return slots;
}

void ep_slot_ranges(const ExpertPlacement& p, const std::vector<int64_t>& global_load, std::vector<int64_t>& first,
                    std::vector<int64_t>& count) {
  const size_t num_experts = p.replicas.size();
  MOESIM_REQUIRE(global_load.size() == num_experts,
                 "global load has " << global_load.size() << " entries, expected " << num_experts);
  MOESIM_REQUIRE(p.expert.size() == p.device.size(), "placement has " << p.expert.size() << " slots but "
                                                                      << p.device.size() << " devices");
  std::vector<int64_t> next(num_experts, 0);
  std::vector<int32_t> seen(num_experts, 0);
  first.assign(p.expert.size(), 0);
  count.assign(p.expert.size(), 0);
  for (size_t i = 0; i < p.expert.size(); ++i) {
    const int e = p.expert[i];
    MOESIM_REQUIRE(e >= 0 && static_cast<size_t>(e) < num_experts, "placement slot " << i << " holds expert " << e);
    const int64_t r = p.replicas[e];
    const int j = seen[e]++;
    first[i] = next[e];
    count[i] = global_load[e] / r + (j < global_load[e] % r ? 1 : 0);
    next[e] += count[i];
  }
  for (size_t e = 0; e < num_experts; ++e) {
    MOESIM_REQUIRE(seen[e] == p.replicas[e], "expert " << e << " has " << p.replicas[e] << " replicas but "
                                                       << seen[e] << " slots");
  }
}

EpSendPlan ep_send_plan(const ExpertPlacement& p, const std::vector<int64_t>& local_counts,
                        const std::vector<int64_t>& prefix, const std::vector<int64_t>& slot_first,
                        const std::vector<int64_t>& slot_count) {
  const size_t num_experts = p.replicas.size(), num_slots = p.expert.size();
  MOESIM_REQUIRE(local_counts.size() == num_experts && prefix.size() == num_experts,
                 "local counts and prefix need " << num_experts << " entries");
  MOESIM_REQUIRE(slot_first.size() == num_slots && slot_count.size() == num_slots,
                 "slot ranges need " << num_slots << " entries");
  // The rank's expert-major buffer: expert e's kept assignments start at local_offsets[e].
  std::vector<int64_t> local_offsets(num_experts + 1, 0);
  for (size_t e = 0; e < num_experts; ++e) local_offsets[e + 1] = local_offsets[e] + local_counts[e];

  EpSendPlan plan;
  plan.slot_rows.assign(num_slots, 0);
  plan.slot_first_row.assign(num_slots, 0);
  plan.rank_rows.assign(p.num_devices, 0);
  for (size_t i = 0; i < num_slots; ++i) {
    const int e = p.expert[i];
    // This rank holds e's global kept indices [prefix, prefix + count); the slot processes [first, first + n).
    const int64_t lo = std::max(prefix[e], slot_first[i]);
    const int64_t hi = std::min(prefix[e] + local_counts[e], slot_first[i] + slot_count[i]);
    plan.slot_rows[i] = std::max<int64_t>(0, hi - lo);
    plan.slot_first_row[i] = local_offsets[e] + (plan.slot_rows[i] > 0 ? lo - prefix[e] : 0);
    MOESIM_REQUIRE(p.device[i] >= 0 && p.device[i] < p.num_devices,
                   "placement slot " << i << " is on device " << p.device[i] << " of " << p.num_devices);
    plan.rank_rows[p.device[i]] += plan.slot_rows[i];
  }
  plan.slot_order.resize(num_slots);
  std::iota(plan.slot_order.begin(), plan.slot_order.end(), 0);
  std::stable_sort(plan.slot_order.begin(), plan.slot_order.end(),
                   [&](int32_t a, int32_t b) { return p.device[a] < p.device[b]; });
  plan.send_row.reserve(static_cast<size_t>(local_offsets[num_experts]));
  for (int32_t i : plan.slot_order)
    for (int64_t k = 0; k < plan.slot_rows[i]; ++k) plan.send_row.push_back(plan.slot_first_row[i] + k);
  MOESIM_REQUIRE(static_cast<int64_t>(plan.send_row.size()) == local_offsets[num_experts],
                 "the placement sends " << plan.send_row.size() << " of the rank's " << local_offsets[num_experts]
                                        << " kept assignments: the slot ranges do not cover the global load");
  return plan;
}

int64_t ep_padded_rows(int64_t rows, Layout layout, int block_size, int64_t capacity, int replicas) {
  switch (layout) {
    case Layout::dropless:
      return rows;
    case Layout::block:
      return (rows + block_size - 1) / block_size * block_size;
    case Layout::capacity:
      return std::max((capacity + replicas - 1) / replicas, rows);
  }
  return rows;
}

std::vector<int64_t> ep_exchange_counts_ref(const Routing& global, const ExpertPlacement& p, int num_ranks) {
  const int num_experts = global.num_experts;
  const int num_slots = static_cast<int>(p.expert.size());
  std::vector<int64_t> load(num_experts, 0);
  for (int64_t a = 0; a < global.num_assignments(); ++a)
    if (global.kept[a]) ++load[global.expert[a]];
  // Slots of each expert in slot order, and each one's count: load / r, the first load % r one more.
  std::vector<std::vector<int>> slots_of(num_experts);
  for (int i = 0; i < num_slots; ++i) slots_of[p.expert[i]].push_back(i);
  // Each expert's kept assignments by source rank, then assignment order: walk them once per (expert, rank).
  std::vector<int64_t> rows(static_cast<size_t>(num_ranks) * num_slots, 0);
  for (int e = 0; e < num_experts; ++e) {
    const int64_t r = static_cast<int64_t>(slots_of[e].size());
    int64_t seen = 0;
    for (int source = 0; source < num_ranks; ++source) {
      const EpTokenShare share = ep_token_share(global.num_tokens, source, num_ranks);
      for (int64_t a = 0; a < global.num_assignments(); ++a) {
        if (!global.kept[a] || global.expert[a] != e) continue;
        if (global.token[a] < share.begin || global.token[a] >= share.end) continue;
        // Which replica holds the seen-th assignment: replica j covers [start_j, start_j + size_j).
        int64_t start = 0;
        int j = 0;
        for (; j < r; ++j) {
          const int64_t size = load[e] / r + (j < load[e] % r ? 1 : 0);
          if (seen < start + size) break;
          start += size;
        }
        ++rows[static_cast<size_t>(source) * num_slots + slots_of[e][j]];
        ++seen;
      }
    }
  }
  return rows;
}

ExpertWeights ep_slot_weights(const ExpertWeights& full, const ExpertPlacement& p, const std::vector<int32_t>& slots) {
  require_valid_weights(full);
  ExpertWeights w;
  w.num_experts = static_cast<int>(slots.size());
  w.hidden = full.hidden;
  w.ffn = full.ffn;
  const size_t per_expert = static_cast<size_t>(full.hidden * full.ffn);
  w.w1.resize(per_expert * slots.size());
  w.w3.resize(per_expert * slots.size());
  w.w2.resize(per_expert * slots.size());
  for (size_t m = 0; m < slots.size(); ++m) {
    const int e = p.expert.at(slots[m]);
    MOESIM_REQUIRE(e >= 0 && e < full.num_experts, "slot " << slots[m] << " holds expert " << e << " of "
                                                           << full.num_experts);
    std::copy_n(full.w1.data() + e * per_expert, per_expert, w.w1.data() + m * per_expert);
    std::copy_n(full.w3.data() + e * per_expert, per_expert, w.w3.data() + m * per_expert);
    std::copy_n(full.w2.data() + e * per_expert, per_expert, w.w2.data() + m * per_expert);
  }
  return w;
}

// ---- MPI ---------------------------------------------------------------------------------------------

bool ep_mpi_built() {
#if defined(MOESIM_HAS_MPI)
  return true;
#else
  return false;
#endif
}

bool ep_launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(name) != nullptr) return true;
#if defined(MOESIM_HAS_MPI)
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
#else
  return false;
#endif
}

namespace {


#if !defined(MOESIM_HAS_MPI)
[[noreturn]] void no_mpi() {
  throw ResourceError("this moesim was built without MPI (MOESIM_MPI=OFF or no MPI found at configure time); "
                      "install openmpi-bin and libopenmpi-dev (scripts/setup.sh) and reconfigure");
}
#endif

#if defined(MOESIM_HAS_MPI)
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int to_int_count(int64_t n, const char* what) {
  if (n > INT_MAX) {
    throw ResourceError(std::string("an MPI message of ") + std::to_string(n) + " elements (" + what +
                        ") exceeds MPI's int count; lower workload.batch or execute.hidden");
  }
  return static_cast<int>(n);
}

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<int32_t>() { return MPI_INT32_T; }
template <>
MPI_Datatype mpi_type<uint8_t>() { return MPI_UINT8_T; }

template <typename T>
std::vector<T> allgatherv(const std::vector<T>& mine) {
  const int size = ep_num_ranks();
  int n = to_int_count(static_cast<int64_t>(mine.size()), "allgatherv");
  std::vector<int> counts(size), displs(size, 0);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int64_t total = 0;
  for (int s = 0; s < size; ++s) {
    displs[s] = to_int_count(total, "allgatherv");
    total += counts[s];
  }
  std::vector<T> out(static_cast<size_t>(total));
  MPI_Allgatherv(mine.data(), n, mpi_type<T>(), out.data(), counts.data(), displs.data(), mpi_type<T>(),
                 MPI_COMM_WORLD);
  return out;
}
#endif

}  // namespace

void ep_mpi_init() {
#if defined(MOESIM_HAS_MPI)
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  // Errors return codes (checked) instead of aborting inside the library, so the message names the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(finalize_at_exit);
#else
  no_mpi();
#endif
}

int ep_rank() {
#if defined(MOESIM_HAS_MPI)
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
#else
  return 0;
#endif
}

int ep_num_ranks() {
#if defined(MOESIM_HAS_MPI)
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
#else
  return 1;
#endif
}

void ep_abort(int exit_code, const std::string& prefix, const std::string& message) {
#if defined(MOESIM_HAS_MPI)
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    std::cerr << prefix << ": rank " << ep_rank() << " of " << ep_num_ranks() << ": " << message << std::endl;
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
#endif
  std::cerr << prefix << ": " << message << std::endl;
  std::exit(exit_code);
}

void ep_agree(const std::string& prefix, const std::function<void()>& fn) {
  std::string message;
  int code = 0;
  try {
    fn();
  } catch (const Error& err) {
    message = err.what();
    code = err.exit_code();
  } catch (const std::bad_alloc&) {
    message = "out of memory; lower the sizes or set --memory-limit";
    code = kExitResource;
  } catch (const std::exception& err) {
    message = std::string("internal error: ") + err.what();
    code = 4;
  }
#if defined(MOESIM_HAS_MPI)
  // A non-blocking reduction polled with sleeps: ranks that finish early wait without spinning on the
  // cores a slower rank still needs (setup work, a host calibration on rank 0).
  const int mine = code != 0 ? ep_rank() : INT_MAX;
  int failed = INT_MAX;
  MPI_Request request;
  MPI_Iallreduce(&mine, &failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (failed == INT_MAX) return;
  if (failed == ep_rank()) ep_abort(code, prefix, message);
  // The failing rank's MPI_Abort ends this process; should it not, end the job from here.
  std::this_thread::sleep_for(std::chrono::seconds(30));
  ep_abort(kExitBadInput, prefix, "rank " + std::to_string(failed) + " failed");
#else
  if (code != 0) ep_abort(code, prefix, message);
#endif
}

namespace {
// Turns an MPI error code into a BackendError naming the call (MPI_ERRORS_RETURN is set by ep_mpi_init).
void check_mpi(int rc, const char* call) {
#if defined(MOESIM_HAS_MPI)
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw BackendError(std::string(call) + " failed: " + std::string(text, len));
#else
  (void)rc;
  (void)call;
#endif
}
}  // namespace

double ep_barrier_s() {
#if defined(MOESIM_HAS_MPI)
  const auto t0 = Clock::now();
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  return seconds_since(t0);
#else
  no_mpi();
#endif
}

void ep_allreduce_sum(std::vector<int64_t>& v) {
#if defined(MOESIM_HAS_MPI)
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, v.data(), to_int_count(static_cast<int64_t>(v.size()), "allreduce"),
                          MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
#else
  (void)v;
  no_mpi();
#endif
}

void ep_allreduce_max(std::vector<double>& v) {
#if defined(MOESIM_HAS_MPI)
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, v.data(), to_int_count(static_cast<int64_t>(v.size()), "allreduce"),
                          MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
            "MPI_Allreduce");
#else
  (void)v;
  no_mpi();
#endif
}

std::vector<double> ep_allgather(const std::vector<double>& mine) {
#if defined(MOESIM_HAS_MPI)
  std::vector<double> out(mine.size() * static_cast<size_t>(ep_num_ranks()));
  const int n = to_int_count(static_cast<int64_t>(mine.size()), "allgather");
  check_mpi(MPI_Allgather(mine.data(), n, MPI_DOUBLE, out.data(), n, MPI_DOUBLE, MPI_COMM_WORLD), "MPI_Allgather");
  return out;
#else
  (void)mine;
  no_mpi();
#endif
}

std::vector<float> ep_allgatherv(const std::vector<float>& mine) {
#if defined(MOESIM_HAS_MPI)
  return allgatherv(mine);
#else
  (void)mine;
  no_mpi();
#endif
}

std::vector<int32_t> ep_allgatherv(const std::vector<int32_t>& mine) {
#if defined(MOESIM_HAS_MPI)
  return allgatherv(mine);
#else
  (void)mine;
  no_mpi();
#endif
}

std::vector<uint8_t> ep_allgatherv(const std::vector<uint8_t>& mine) {
#if defined(MOESIM_HAS_MPI)
  return allgatherv(mine);
#else
  (void)mine;
  no_mpi();
#endif
}

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
  const int num_ranks = ep_num_ranks(), me = ep_rank();
  const int num_experts = full_.num_experts;
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

  // Counts: the global load, the kept assignments of each expert on lower ranks, then per-slot counts.
  t0 = Clock::now();
  std::vector<int64_t> global_load(plan.counts.begin(), plan.counts.end());
  std::vector<int64_t> prefix(num_experts, 0);
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, global_load.data(), num_experts, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  check_mpi(MPI_Exscan(plan.counts.data(), prefix.data(), num_experts, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Exscan");
  if (me == 0) std::fill(prefix.begin(), prefix.end(), 0);  // MPI_Exscan leaves rank 0's buffer undefined
  std::vector<int64_t> slot_first, slot_count;
  ep_slot_ranges(placement_, global_load, slot_first, slot_count);
  const EpSendPlan send = ep_send_plan(placement_, plan.counts, prefix, slot_first, slot_count);
  // Counts all-to-all: to rank d, one count per slot of d (slot order); from each rank, one per local slot.
  std::vector<int64_t> send_counts;
  std::vector<int> sc_counts(num_ranks, 0), sc_displs(num_ranks, 0), rc_counts(num_ranks, num_local),
      rc_displs(num_ranks, 0);
  for (int32_t i : send.slot_order) {
    send_counts.push_back(send.slot_rows[i]);
    ++sc_counts[placement_.device[i]];
  }
  for (int d = 1; d < num_ranks; ++d) {
    sc_displs[d] = sc_displs[d - 1] + sc_counts[d - 1];
    rc_displs[d] = rc_displs[d - 1] + num_local;
  }
  std::vector<int64_t> recv_counts(static_cast<size_t>(num_ranks) * num_local);
  check_mpi(MPI_Alltoallv(send_counts.data(), sc_counts.data(), sc_displs.data(), MPI_INT64_T, recv_counts.data(),
                          rc_counts.data(), rc_displs.data(), MPI_INT64_T, MPI_COMM_WORLD),
            "MPI_Alltoallv (counts)");
  st.times.counts_s = seconds_since(t0);

  // Conservation: every local slot receives exactly its share of the global load.
  std::vector<int64_t> slot_received(num_local, 0);
  for (int s = 0; s < num_ranks; ++s)
    for (int m = 0; m < num_local; ++m) slot_received[m] += recv_counts[static_cast<size_t>(s) * num_local + m];
  for (int m = 0; m < num_local; ++m) {
    MOESIM_REQUIRE(slot_received[m] == slot_count[local_slots_[m]],
                   "slot " << local_slots_[m] << " (expert " << placement_.expert[local_slots_[m]] << ") received "
                           << slot_received[m] << " rows, expected " << slot_count[local_slots_[m]]
                           << ": the ranks disagree on the routing or the placement");
  }

  // Pack the rows in send order.
  t0 = Clock::now();
  const int64_t num_send = static_cast<int64_t>(send.send_row.size());
  std::vector<float> send_buf(static_cast<size_t>(num_send * hidden));
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < num_send; ++k) {
    const int64_t t = local.token[plan.order[send.send_row[k]]];
    std::memcpy(send_buf.data() + k * hidden, x_local + t * hidden, sizeof(float) * hidden);
  }
  std::vector<int> s_counts(num_ranks), s_displs(num_ranks), r_counts(num_ranks), r_displs(num_ranks);
  int64_t s_off = 0, r_off = 0;
  std::vector<int64_t> recv_from(num_ranks, 0);  // rows from each source
  for (int d = 0; d < num_ranks; ++d) {
    for (int m = 0; m < num_local; ++m) recv_from[d] += recv_counts[static_cast<size_t>(d) * num_local + m];
    s_counts[d] = to_int_count(send.rank_rows[d] * hidden, "rows sent");
    r_counts[d] = to_int_count(recv_from[d] * hidden, "rows received");
    s_displs[d] = to_int_count(s_off, "rows sent");
    r_displs[d] = to_int_count(r_off, "rows received");
    s_off += send.rank_rows[d] * hidden;
    r_off += recv_from[d] * hidden;
  }
  const int64_t num_recv = r_off / hidden;
  std::vector<float> recv_buf(static_cast<size_t>(r_off));
  st.times.pack_s = seconds_since(t0);

  t0 = Clock::now();
  check_mpi(MPI_Alltoallv(send_buf.data(), s_counts.data(), s_displs.data(), MPI_FLOAT, recv_buf.data(),
                          r_counts.data(), r_displs.data(), MPI_FLOAT, MPI_COMM_WORLD),
            "MPI_Alltoallv (dispatch)");
  st.times.dispatch_s = seconds_since(t0);

  // Unpack into the slot-major buffer: slot m's rows from source 0, 1, ... then its padding (zeros).
  t0 = Clock::now();
  const int64_t capacity = local.capacity > 0
                               ? local.capacity
                               : (global_load.empty() ? 0 : *std::max_element(global_load.begin(), global_load.end()));
  std::vector<int64_t> padded_offsets(num_local + 1, 0);
  for (int m = 0; m < num_local; ++m) {
    const int replicas = placement_.replicas[placement_.expert[local_slots_[m]]];
    padded_offsets[m + 1] =
        padded_offsets[m] + ep_padded_rows(slot_received[m], layout_, block_size_, capacity, replicas);
  }
  const int64_t rows_computed = padded_offsets[num_local];
  // Copy runs: (source position in recv order, destination row in slot-major order, rows).
  struct Run {
    int64_t src, dst, rows;
  };
  std::vector<Run> runs;
  {
    std::vector<int64_t> fill(padded_offsets.begin(), padded_offsets.end() - 1);
    int64_t pos = 0;
    for (int s = 0; s < num_ranks; ++s) {
      for (int m = 0; m < num_local; ++m) {
        const int64_t n = recv_counts[static_cast<size_t>(s) * num_local + m];
        if (n > 0) runs.push_back({pos, fill[m], n});
        fill[m] += n;
        pos += n;
      }
    }
  }
  std::vector<float> xg(static_cast<size_t>(rows_computed * hidden), 0.0f);
  std::vector<float> expert_rows(static_cast<size_t>(rows_computed * hidden));
  std::vector<float> scratch(static_cast<size_t>(2 * rows_computed * full_.ffn));
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < runs.size(); ++i) {
    std::memcpy(xg.data() + runs[i].dst * hidden, recv_buf.data() + runs[i].src * hidden,
                sizeof(float) * runs[i].rows * hidden);
  }
  st.times.unpack_s = seconds_since(t0);

  t0 = Clock::now();
  if (num_local > 0 && rows_computed > 0)
    grouped_swiglu_omp(local_weights_, xg.data(), padded_offsets.data(), expert_rows.data(), scratch.data());
  const bool has_shared = shared_ != nullptr && shared_->num_experts > 0;
  std::vector<float> shared_out(has_shared ? static_cast<size_t>(local.num_tokens * hidden) : 0);
  if (has_shared) shared_experts_omp(*shared_, x_local, local.num_tokens, shared_out.data());
  st.times.experts_s = seconds_since(t0);

  // Back in receive order (the same runs reversed), then home.
  t0 = Clock::now();
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < runs.size(); ++i) {
    std::memcpy(recv_buf.data() + runs[i].src * hidden, expert_rows.data() + runs[i].dst * hidden,
                sizeof(float) * runs[i].rows * hidden);
  }
  st.times.unpack_s += seconds_since(t0);

  st.times.idle_combine_s = ep_barrier_s();

  t0 = Clock::now();
  check_mpi(MPI_Alltoallv(recv_buf.data(), r_counts.data(), r_displs.data(), MPI_FLOAT, send_buf.data(),
                          s_counts.data(), s_displs.data(), MPI_FLOAT, MPI_COMM_WORLD),
            "MPI_Alltoallv (combine)");
  st.times.return_s = seconds_since(t0);

  t0 = Clock::now();
  std::vector<float> expert_out(static_cast<size_t>(plan.rows * hidden));
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < num_send; ++k) {
    std::memcpy(expert_out.data() + send.send_row[k] * hidden, send_buf.data() + k * hidden, sizeof(float) * hidden);
  }
  combine_omp(local, plan, expert_out.data(), has_shared ? shared_out.data() : nullptr, hidden, y_local);
  st.times.combine_s = seconds_since(t0);

  st.rows_received = num_recv;
  st.rows_received_remote = num_recv - recv_from[me];
  st.rows_sent_remote = num_send - send.rank_rows[me];
  st.rows_computed = rows_computed;
  st.times.layer_s = seconds_since(t_layer);
  if (stats != nullptr) *stats = st;
  if (global_load_out != nullptr) *global_load_out = std::move(global_load);
  if (recv_counts_out != nullptr) *recv_counts_out = std::move(recv_counts);
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
