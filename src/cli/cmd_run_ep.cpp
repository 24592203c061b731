// `mpirun -np D moesim run [FILE] --set placement.kind=expert_parallel [...]`: the experiment's MoE layer
// executed expert-parallel over the MPI ranks (src/distributed/ep_run.hpp); rank 0 writes the report.
// Covered by the mpi-labelled CTest entries (tests/mpi/CMakeLists.txt).
#include <cstdlib>
#include <iostream>
#include <new>
#include <thread>

#include "src/cli/cmd_mpi.hpp"
#include "src/common/error.hpp"
#include "src/distributed/ep_layer.hpp"
#include "src/distributed/ep_run.hpp"

namespace moesim::cli {

bool run_under_mpi(const Experiment& e) {
  return e.placement.kind == PlacementKind::expert_parallel && ep_launched_by_mpirun();
}

namespace {

// OpenMP/BLAS threads per rank: --threads, else OMP_NUM_THREADS, else the cores shared by the ranks on
// this host (Open MPI's local size), so that D ranks do not run D x cores threads.
void apply_rank_threads(int threads) {
  if (threads == 0 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_here);
  }
  apply_threads(threads);
}

}  // namespace

int cmd_run_ep(const CommonOptions& opts, const Experiment& e) {
  ep_mpi_init();
  try {
    ReportFormat format = ReportFormat::table;
    EpRunOptions ep_opts;
    ep_agree("moesim run", [&] {
      format = parse_report_format(opts.format);
      if (opts.no_execute) {
        throw InputError("--no-execute: the expert-parallel run under mpirun executes the layer; run without "
                         "mpirun for the cost model alone");
      }
      if (opts.backend == "cuda") {
        throw InputError("--backend cuda: the expert-parallel run under mpirun executes on the CPU ranks");
      }
      apply_rank_threads(opts.threads);
      ep_opts.verify = opts.verify;
      ep_opts.memory_limit_bytes = parse_memory_limit(opts.memory_limit);
    });
    const EpRunResult r = run_experiment_ep(e, ep_opts);
    if (ep_rank() == 0) {
      ep_agree("moesim run", [&] { emit(opts, format_ep_run(r, format)); });
    } else {
      ep_agree("moesim run", [] {});
    }
    if (!r.verify_ok) {
      if (ep_rank() == 0) std::cerr << "moesim run: --verify: " << r.verify_message << "\n";
      return kExitCheckFailed;
    }
    return kExitOk;
  } catch (const Error& err) {
    ep_abort(err.exit_code(), "moesim run", err.what());
  } catch (const std::bad_alloc&) {
    ep_abort(kExitResource, "moesim run", "out of memory; lower the sizes or set --memory-limit");
  } catch (const std::exception& err) {
    ep_abort(4, "moesim run", std::string("internal error: ") + err.what());
  }
}

}  // namespace moesim::cli
