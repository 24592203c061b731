// Measures the link between MPI ranks as the cost model sees it (`mpirun -np D moesim calibrate-link`):
// MPI_Alltoallv with every rank sending m bytes to every other rank, timed (the slowest rank, median of
// repeats) over message sizes; latency = the time of a near-empty all-to-all, bandwidth = the bytes one
// rank sends per second (least-squares slope over the large sizes), the model's link_bandwidth_gbs and
// link_latency_us. Collective over MPI_COMM_WORLD, host only. Covered by the CTest mpi.calibrate_link.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moesim {

struct LinkSample {
  int64_t bytes_per_pair = 0;   // bytes each rank sends to each other rank
  int64_t bytes_per_rank = 0;   // bytes each rank sends in all: (D - 1) x bytes_per_pair
  double seconds = 0;           // median over repeats of the slowest rank's time
  double min_seconds = 0;       // fastest repeat
  double bandwidth_bytes_per_s = 0;  // bytes_per_rank / (seconds - latency), 0 for the latency sample
};

struct LinkCalibration {
  int ranks = 1;
  int ranks_per_node = 1;       // ranks sharing this rank's host (Open MPI's local size)
  int host_cores = 1;           // hardware threads of this host: fewer than ranks_per_node = oversubscribed
  std::string transport;        // the MPI library's version line
  std::vector<LinkSample> samples;
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;
  double seconds = 0;           // the measurement's own wall time
};

struct LinkCalibrationOptions {
  bool quick = false;           // sizes up to 1 MiB per pair and fewer repeats (tests)
};

// Needs at least 2 ranks (InputError otherwise) and MPI (ResourceError without). Every rank returns the
// same result.
LinkCalibration calibrate_link(const LinkCalibrationOptions& opts);

// A hardware profile: `base_yaml` (a profile's text) with name, link_bandwidth_gbs and link_latency_us
// replaced and a source note for both; devices_per_node is removed (every rank shares the measured link).
// The result loads with parse_hardware_profile.
std::string link_profile_yaml(const LinkCalibration& c, const std::string& base_yaml, const std::string& name);

// The sample table and the fitted figures, human-readable, with a warning when the ranks oversubscribe
// the host's cores (the figures then measure time slicing, not the link).
std::string link_summary(const LinkCalibration& c);

}  // namespace moesim
