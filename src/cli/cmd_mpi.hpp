// The subcommands that run under mpirun: the expert-parallel `moesim run` (cmd_run calls it when
// placement.kind is expert_parallel and an MPI launcher started the process) and `moesim calibrate-link`.
// Host only. Covered by the mpi-labelled CTest entries (tests/mpi/CMakeLists.txt).
#pragma once

#include "src/cli/cli_common.hpp"

namespace moesim::cli {

// True when `moesim run` should take the expert-parallel MPI path for this experiment.
bool run_under_mpi(const Experiment& e);

// `moesim run` under mpirun: opts and the experiment as cmd_run parsed them. Returns the exit code;
// a failure on any rank ends the whole job with its exit code (MPI_Abort) after one message.
int cmd_run_ep(const CommonOptions& opts, const Experiment& e);

// `mpirun -np D moesim calibrate-link [--base PROFILE] [--out FILE] [--name NAME] [--quick]`.
int cmd_calibrate_link(int argc, char** argv);

}  // namespace moesim::cli
