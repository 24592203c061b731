// Link calibration over MPI (see link_calibration.hpp). Host only. Covered by the CTest
// mpi.calibrate_link (tests/mpi/CMakeLists.txt).
#include "src/distributed/link_calibration.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <thread>

#include <yaml-cpp/yaml.h>

#include "src/common/clock.hpp"
#include "src/common/median.hpp"
#include "src/common/error.hpp"
#include "src/distributed/ep_layer.hpp"

#if defined(MOESIM_HAS_MPI)
#include <mpi.h>
#endif

namespace moesim {
namespace {


#if defined(MOESIM_HAS_MPI)
// The slowest rank's time of each of `repeats` all-to-alls of `bytes_per_pair` to every other rank
// (nothing to itself: the model counts only rows that leave their device), after 2 warm-ups.
std::vector<double> time_all_to_all(int64_t bytes_per_pair, int repeats) {
  const int ranks = ep_num_ranks(), me = ep_rank();
  std::vector<char> send(static_cast<size_t>(bytes_per_pair) * ranks, static_cast<char>(me));
  std::vector<char> recv(send.size());
  std::vector<int> counts(ranks, static_cast<int>(bytes_per_pair)), displs(ranks);
  counts[me] = 0;
  for (int d = 0; d < ranks; ++d) displs[d] = static_cast<int>(bytes_per_pair * d);
  std::vector<double> times;
  for (int r = -2; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    MPI_Alltoallv(send.data(), counts.data(), displs.data(), MPI_BYTE, recv.data(), counts.data(), displs.data(),
                  MPI_BYTE, MPI_COMM_WORLD);
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r >= 0) times.push_back(t);
  }
  ep_allreduce_max(times);
  return times;
}
#endif

}  // namespace

LinkCalibration calibrate_link(const LinkCalibrationOptions& opts) {
#if defined(MOESIM_HAS_MPI)
  const auto t_start = Clock::now();
  LinkCalibration c;
  c.ranks = ep_num_ranks();
  if (c.ranks < 2) {
    throw InputError("calibrate-link measures MPI_Alltoallv between ranks: run it under mpirun -np 2 or more "
                     "(this job has 1 rank)");
  }
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) c.ranks_per_node = std::max(1, std::atoi(local));
  else c.ranks_per_node = c.ranks;
  c.host_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  c.transport = std::string(version, len);
  c.transport = c.transport.substr(0, c.transport.find_first_of("\n,"));

  // 8 bytes per pair: latency; then 4 KiB .. 4 MiB (quick: 1 MiB) in steps of 4x.
  std::vector<int64_t> sizes = {8};
  const int64_t largest = opts.quick ? (int64_t{1} << 20) : (int64_t{4} << 20);
  for (int64_t s = 4096; s <= largest; s *= 4) sizes.push_back(s);
  for (int64_t size : sizes) {
    const int repeats = opts.quick ? 5 : (size <= (64 << 10) ? 50 : 15);
    const std::vector<double> t = time_all_to_all(size, repeats);
    LinkSample s;
    s.bytes_per_pair = size;
    s.bytes_per_rank = size * (c.ranks - 1);
    s.seconds = median(t);
    s.min_seconds = *std::min_element(t.begin(), t.end());
    c.samples.push_back(s);
  }
  c.latency_s = c.samples.front().seconds;
  // Least squares t = a + bytes / bandwidth over the samples of 64 KiB per pair and more (the smaller
  // ones are latency-bound and would only add noise to the slope).
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const LinkSample& s : c.samples) {
    if (s.bytes_per_pair < (64 << 10)) continue;
    const double x = static_cast<double>(s.bytes_per_rank), y = s.seconds;
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double slope = n >= 2 ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0.0;
  if (slope > 0) {
    c.bandwidth_bytes_per_s = 1.0 / slope;
  } else {
    // A flat or falling curve (noise on a loaded machine): the largest message's own rate.
    const LinkSample& s = c.samples.back();
    c.bandwidth_bytes_per_s = static_cast<double>(s.bytes_per_rank) / s.seconds;
  }
  for (LinkSample& s : c.samples) {
    if (s.bytes_per_pair <= 8) continue;
    const double t = s.seconds - c.latency_s;
    s.bandwidth_bytes_per_s = t > 0 ? static_cast<double>(s.bytes_per_rank) / t : 0.0;
  }
  // Every rank reports rank 0's figures (the times are already maxima over ranks).
  std::vector<double> fig = {c.latency_s, c.bandwidth_bytes_per_s};
  MPI_Bcast(fig.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  c.latency_s = fig[0];
  c.bandwidth_bytes_per_s = fig[1];
  c.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return c;
#else
  (void)opts;
  throw ResourceError("calibrate-link needs MPI: this moesim was built without it (MOESIM_MPI=OFF or no MPI found); "
                      "install openmpi-bin and libopenmpi-dev (scripts/setup.sh) and reconfigure");
#endif
}

std::string link_profile_yaml(const LinkCalibration& c, const std::string& base_yaml, const std::string& name) {
  YAML::Node root = YAML::Load(base_yaml);
  if (!root.IsMap()) throw InputError("calibrate-link: the base profile is not a YAML map");
  std::ostringstream bw, lat, note;
  bw << std::setprecision(5) << c.bandwidth_bytes_per_s / 1e9;
  lat << std::setprecision(4) << c.latency_s * 1e6;
  note << "moesim calibrate-link: MPI_Alltoallv over " << c.ranks << " ranks (" << c.ranks_per_node
       << " on this host), " << c.transport;
  root["name"] = name;
  root["link_bandwidth_gbs"] = YAML::Load(bw.str());
  root["link_latency_us"] = YAML::Load(lat.str());
  // The base's topology (devices_per_node, the NIC's inter_node_* figures) stays: the ranks measured share this
  // host's link, which says nothing of the scale-out network.
  if (!root["sources"] || !root["sources"].IsMap()) root["sources"] = YAML::Node(YAML::NodeType::Map);
  root["sources"]["link_bandwidth_gbs"] =
      note.str() + ": bytes one rank sends per second, least-squares slope over 64 KiB+ per pair";
  root["sources"]["link_latency_us"] = note.str() + ": median time of an 8-byte-per-pair all-to-all";
  YAML::Emitter out;
  out << root;
  std::ostringstream os;
  os << "# " << name << ": " << (root["description"] ? root["description"].as<std::string>() : std::string("profile"))
     << ", with the link between MPI ranks measured by `moesim calibrate-link`.\n";
  if (c.ranks_per_node > c.host_cores) {
    os << "# warning: " << c.ranks_per_node << " ranks shared " << c.host_cores
       << " cores: these figures include time slicing\n";
  }
  os << "# MPI_Alltoallv, every rank to every other, slowest rank, median of repeats:\n";
  os << "#   bytes/pair   bytes/rank        ms    GB/s (after latency)\n";
  for (const LinkSample& s : c.samples) {
    os << "# " << std::setw(12) << s.bytes_per_pair << " " << std::setw(12) << s.bytes_per_rank << " " << std::setw(9)
       << std::fixed << std::setprecision(4) << s.seconds * 1e3 << " " << std::setw(8) << std::setprecision(3)
       << s.bandwidth_bytes_per_s / 1e9 << "\n";
  }
  os << out.c_str() << "\n";
  return os.str();
}

std::string link_summary(const LinkCalibration& c) {
  std::ostringstream os;
  os << "link: MPI_Alltoallv over " << c.ranks << " ranks (" << c.ranks_per_node << " on this host), " << c.transport
     << "\n";
  os << "  bytes/pair   bytes/rank        ms   min ms    GB/s\n";
  for (const LinkSample& s : c.samples) {
    os << std::setw(12) << s.bytes_per_pair << " " << std::setw(12) << s.bytes_per_rank << " " << std::setw(9)
       << std::fixed << std::setprecision(4) << s.seconds * 1e3 << " " << std::setw(8) << s.min_seconds * 1e3 << " "
       << std::setw(7) << std::setprecision(3) << s.bandwidth_bytes_per_s / 1e9 << "\n";
  }
  os << std::setprecision(3) << "latency " << c.latency_s * 1e6 << " us, bandwidth " << c.bandwidth_bytes_per_s / 1e9
     << " GB/s per rank (one direction), measured in " << std::setprecision(2) << c.seconds << " s\n";
  if (c.ranks_per_node > c.host_cores) {
    os << "warning: " << c.ranks_per_node << " ranks share " << c.host_cores
       << " cores here: the figures include time slicing; calibrate with at most one rank per core\n";
  }
  return os.str();
}

}  // namespace moesim
