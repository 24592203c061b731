// Runs one experiment for a list of router variants (see run_experiment.hpp).
#include "src/pipeline/run_experiment.hpp"
#include "src/pipeline/run_internal.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>

#include "src/common/clock.hpp"
#include "src/common/digest.hpp"
#include "src/common/error.hpp"
#include "src/common/median.hpp"
#include "src/cost/placement.hpp"
#include "src/cost/roofline.hpp"
#include "src/decoder/decoder.hpp"
#include "src/decoder/kv_cache.hpp"
#include "src/pipeline/measured_noise.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/logits_batches.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/synthetic_logits.hpp"
#include "src/workload/trace_replay.hpp"
#if defined(MOESIM_HAS_CUDA)
#include "kernels/cuda_backend.hpp"
#endif

namespace moesim {

using namespace run_detail;

namespace {

void check_memory(const Experiment& e, const RunOptions& opts) {
  const double need = estimate_run_bytes(e);
  if (opts.memory_limit_bytes > 0 && need > opts.memory_limit_bytes) {
    std::ostringstream os;
    os << e.source_file << ": the run needs about " << need / (1 << 20) << " MiB, over the memory limit of "
       << opts.memory_limit_bytes / (1 << 20) << " MiB (--memory-limit); lower workload.batch or execute.hidden/ffn";
    if (e.workload.source == WorkloadSource::decoder)
      os << ", workload.prompt_len, workload.decode_steps or execute.layers";
    throw ResourceError(os.str());
  }
}

double file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0.0 : static_cast<double>(n);
}

}  // namespace

std::string resolve_workload_path(const Experiment& e) {
  namespace fs = std::filesystem;
  const std::string& p = e.workload.path;
  std::error_code ec;
  if (p.empty() || fs::path(p).is_absolute() || fs::exists(p, ec)) return p;
  if (!e.source_file.empty() && e.source_file.front() != '<') {
    const fs::path beside = fs::path(e.source_file).parent_path() / p;
    if (fs::exists(beside, ec)) return beside.lexically_normal().string();
  }
  return p;
}

double estimate_run_bytes(const Experiment& e) {
  switch (e.workload.source) {
    case WorkloadSource::decoder:
      return estimate_decoder_bytes(e);
    case WorkloadSource::trace:
    case WorkloadSource::load_profile:
      // The parsed file (numbers as floats and ids are smaller than their text) plus the routings of
      // one batch at a time.
      return 2.0 * file_bytes(resolve_workload_path(e)) + 64.0 * e.model.experts;
    default:
      break;
  }
  const double N = static_cast<double>(e.workload.batch);
  const double E = e.model.experts, k = e.model.top_k, H = e.execute.hidden, F = e.execute.ffn;
  const double S = e.model.shared_experts;
  const double routing = N * E * 4 /*logits*/ + N * 8 /*ids*/ + N * k * 13 /*assignments*/ * 2 /*plan*/;
  double bytes = routing * std::max(1, e.workload.batches);
  if (e.execute.enabled) {
    const double rows = N * k + E * std::max(64, e.router.block_size);  // worst padding
    bytes += N * H * 4 * 2                 // x and y
             + (E + S) * 3 * H * F * 4     // expert weights
             + rows * (2 * H + 3 * F) * 4  // gathered rows, intermediates, expert outputs
             + N * H * 4;                  // reference output for --verify
  }
  return bytes;
}

RunResult run_experiment(const Experiment& e, const std::vector<RouterVariant>& variants, const RunOptions& opts) {
  RunResult result;
  result.experiment = e;
  result.hardware = load_hardware_profile(e.hardware, e.source_file);
  check_memory(e, opts);
  // The load average the noise rule judges is read before any executed work of this process.
  host_load_at_start();
#if defined(MOESIM_HAS_CUDA)
  if (opts.backend == ExecBackend::cuda) {
    result.backend = ExecBackend::cuda;
    result.device = cuda_device_description();
  }
#endif
  switch (e.workload.source) {
    case WorkloadSource::decoder:
      run_decoder(e, variants, opts, result);
      break;
    case WorkloadSource::trace:
      run_trace(e, variants, opts, result);
      break;
    case WorkloadSource::load_profile:
      run_load_profile(e, variants, result);
      break;
    case WorkloadSource::synthetic:
    case WorkloadSource::logits:
      if (e.workload.source == WorkloadSource::logits) result.workload_path = resolve_workload_path(e);
      run_batches(e, variants, opts, result);
      break;
  }
  if (!result.workload_path.empty()) result.workload_digest = file_digest(result.workload_path);
  return result;
}

}  // namespace moesim
