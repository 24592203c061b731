// The MPI wrappers of the expert-parallel run (see ep_layer.hpp): initialisation, rank and size, the
// one-message abort and ep_agree for setup steps, barriers, reductions and gathers over MPI_COMM_WORLD,
// each error turned into a moesim::Error naming the call. Without MOESIM_HAS_MPI the collectives throw
// ResourceError. Host only. Covered by tests/mpi/ep_layer_mpi.cpp and the mpi-labelled CTest entries.
#include "src/distributed/ep_layer.hpp"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "src/common/clock.hpp"
#include "src/common/error.hpp"
#include "src/distributed/ep_mpi_internal.hpp"

#if defined(MOESIM_HAS_MPI)
#include <mpi.h>
#endif

namespace moesim {
namespace ep_detail {

#if !defined(MOESIM_HAS_MPI)
[[noreturn]] void no_mpi() {
  throw ResourceError("this moesim was built without MPI (MOESIM_MPI=OFF or no MPI found at configure time); "
                      "install openmpi-bin and libopenmpi-dev (scripts/setup.sh) and reconfigure");
}
#endif

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

#if defined(MOESIM_HAS_MPI)
int to_int_count(int64_t n, const char* what) {
  if (n > INT_MAX) {
    throw ResourceError(std::string("an MPI message of ") + std::to_string(n) + " elements (" + what +
                        ") exceeds MPI's int count; lower workload.batch or execute.hidden");
  }
  return static_cast<int>(n);
}
#endif

}  // namespace ep_detail

using ep_detail::check_mpi;
#if defined(MOESIM_HAS_MPI)
using ep_detail::to_int_count;
#else
using ep_detail::no_mpi;
#endif

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

enum class Reduce { sum, max };

#if defined(MOESIM_HAS_MPI)
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<int32_t>() { return MPI_INT32_T; }
template <>
MPI_Datatype mpi_type<uint8_t>() { return MPI_UINT8_T; }
template <>
MPI_Datatype mpi_type<int64_t>() { return MPI_INT64_T; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

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

template <typename T>
void allreduce_in_place(std::vector<T>& v, Reduce op) {
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, v.data(), to_int_count(static_cast<int64_t>(v.size()), "allreduce"),
                          mpi_type<T>(), op == Reduce::sum ? MPI_SUM : MPI_MAX, MPI_COMM_WORLD),
            "MPI_Allreduce");
}
#else
template <typename T>
std::vector<T> allgatherv(const std::vector<T>&) {
  no_mpi();
}

template <typename T>
void allreduce_in_place(std::vector<T>&, Reduce) {
  no_mpi();
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
    // One write of the whole line: mpirun forwards each rank's stderr as it reads it, and its own abort
    // banner would otherwise land between the pieces of a line written by several insertions.
    const std::string line =
        prefix + ": rank " + std::to_string(ep_rank()) + " of " + std::to_string(ep_num_ranks()) + ": " + message + "\n";
    std::fflush(stdout);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
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

double ep_barrier_s() {
#if defined(MOESIM_HAS_MPI)
  const auto t0 = Clock::now();
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  return seconds_since(t0);
#else
  no_mpi();
#endif
}

void ep_allreduce_sum(std::vector<int64_t>& v) { allreduce_in_place(v, Reduce::sum); }

void ep_allreduce_max(std::vector<double>& v) { allreduce_in_place(v, Reduce::max); }

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

std::vector<float> ep_allgatherv(const std::vector<float>& mine) { return allgatherv(mine); }

std::vector<int32_t> ep_allgatherv(const std::vector<int32_t>& mine) { return allgatherv(mine); }

std::vector<uint8_t> ep_allgatherv(const std::vector<uint8_t>& mine) { return allgatherv(mine); }

}  // namespace moesim
