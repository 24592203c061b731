// The MPI error and count helpers shared by the MPI wrappers (ep_mpi.cpp) and the distributed layer's
// exchange (ep_layer.cpp); private to src/distributed. Host only; without MOESIM_HAS_MPI only check_mpi
// (a no-op) and no_mpi exist. Covered by tests/mpi/ep_layer_mpi.cpp and the mpi-labelled CTest entries.
#pragma once

#include <cstdint>

namespace moesim {
namespace ep_detail {

// Turns an MPI error code into a BackendError naming the call (MPI_ERRORS_RETURN is set by ep_mpi_init).
void check_mpi(int rc, const char* call);

#if defined(MOESIM_HAS_MPI)
// n as an MPI element count; ResourceError naming `what` when it exceeds MPI's int counts.
int to_int_count(int64_t n, const char* what);
#else
// Throws ResourceError: this binary was built without MPI.
[[noreturn]] void no_mpi();
#endif

}  // namespace ep_detail
}  // namespace moesim
