// An experiment's MoE layer run expert-parallel over the MPI ranks (`mpirun -np D moesim run`): the steps
// are workload.batches synthetic batches (or one logits file); every rank's phase times and rows are gathered
// beside the cost model's expert-parallel prediction at the executed size, with the profile's link figures
// (`moesim calibrate-link` measures this machine's); placement.rebalance_every re-plans EPLB replicas from a
// sliding window of observed loads and reports the gain. Collective over MPI_COMM_WORLD; host only.
// Covered by the mpi-labelled CTest entries (tests/mpi/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/placement.hpp"
#include "src/distributed/ep_layer.hpp"
#include "src/report/report.hpp"
#include "router/balance_metrics.hpp"

namespace moesim {

struct EpRunOptions {
  bool verify = false;              // compare every step with the single-process layer on rank 0's copy
  double memory_limit_bytes = 0;    // per rank; 0 = no limit
};

// One step (batch) of the run, as every rank sees it after the gathers.
struct EpStep {
  int step = 0;
  int epoch = 0;                       // index into EpRunResult::placements
  bool rebalanced = false;             // the placement was re-planned before this step
  BalanceMetrics metrics;              // of the whole batch's routing
  std::vector<double> route_s;         // [ranks] routing (with the logits gather when replicated)
  std::vector<EpRankStats> ranks;      // [ranks] rows and phase times (medians over execute.repeats)
  LayerCost modeled;                   // expert-parallel model at the executed size, this step's placement
  double rank_imbalance = 1;           // measured: max / mean rows received
  double expert_time_imbalance = 1;    // measured: max / mean expert time
  double layer_s = 0;                  // measured: slowest rank's layer time
  // Rebalancing: the same step under the static (first) placement.
  bool has_static = false;
  LayerCost static_modeled;
  double static_rank_imbalance = 1;    // exact rows per rank under the static placement
  double static_layer_s = 0;           // measured, slowest rank
  // Rebalancing, the profile has model.dtype: this step at the model's real size, on this step's
  // placement and on the static one.
  bool has_model_size = false;
  LayerCost model_size, static_model_size;
};

struct EpRunResult {
  Experiment experiment;
  HardwareProfile hardware;
  int num_ranks = 1;
  int ranks_per_host = 1;              // ranks on rank 0's host (Open MPI's local size)
  int host_cores = 1;                  // its hardware threads
  int64_t num_tokens = 0;              // tokens per step
  bool routing_local = true;           // each rank routed its own tokens (else the whole batch, replicated)
  std::string placement_rule;          // "round-robin", "map", "eplb replicas=R"
  std::vector<ExpertPlacement> placements;  // one per epoch
  std::vector<int> epoch_first_step;   // [epochs]
  std::vector<EpStep> steps;
  bool has_model_size = false;         // the profile has a peak for model.dtype
  LayerCost modeled_model_size;        // expert-parallel model at the model's real size (last step's loads)
  std::string verify_message;          // --verify: "ok ..." or the first mismatch; empty without --verify
  bool verify_ok = true;
  double verify_max_abs_diff = 0;      // largest |y_ep - y_single| over the verified steps
};

// Output tolerance of the distributed layer against the single-process one (--verify and tests/mpi):
// |y_ep - y| <= kEpAbsTol + kEpRelTol |y|. Both compute every row with the same float32 SwiGLU; only
// the grouping differs (an expert's rows are split over replicas or stacked from several ranks), and
// OpenBLAS may block a GEMM of a different row count differently, which reorders float32 sums.
constexpr float kEpAbsTol = 1e-5f;
constexpr float kEpRelTol = 1e-4f;

// Runs the experiment's own router expert-parallel over every MPI rank (ep_mpi_init first). Requires
// placement.kind expert_parallel, placement.devices 1 (taken as the job's size) or the job's size, a
// synthetic or logits workload, execute.enabled. A setup error on any rank (config, file, memory)
// ends the job through ep_abort with its exit code; every rank returns the same result.
EpRunResult run_experiment_ep(const Experiment& e, const EpRunOptions& opts);

nlohmann::json ep_run_to_json(const EpRunResult& r);
// table: a header, one line per step and rank, per-step and per-rank summaries, the rebalancing gain;
// csv / markdown: one row per step and rank; json: ep_run_to_json.
std::string format_ep_run(const EpRunResult& r, ReportFormat format);

}  // namespace moesim
