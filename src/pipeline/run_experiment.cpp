// Runs one experiment for a list of router variants (see run_experiment.hpp).
#include "src/pipeline/run_experiment.hpp"
#include "src/pipeline/run_internal.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
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
#include "src/workload/megatron_loads.hpp"
#include "src/workload/synthetic_logits.hpp"
#include "src/workload/trace_replay.hpp"
#if defined(MOESIM_HAS_CUDA)
#include "kernels/cuda_backend.hpp"
#endif

namespace moesim {

using namespace run_detail;

namespace {

void check_memory(const Experiment& e, const RunOptions& opts, size_t num_variants) {
  const double need = estimate_run_bytes(e, opts.records, num_variants);
  if (opts.memory_limit_bytes > 0 && need > opts.memory_limit_bytes) {
    std::ostringstream os;
    os << e.source_file << ": the run needs about " << need / (1 << 20) << " MiB, over the memory limit of "
       << opts.memory_limit_bytes / (1 << 20) << " MiB (--memory-limit); ";
    if (e.workload.source == WorkloadSource::trace || e.workload.source == WorkloadSource::load_profile) {
      os << "use a shorter workload.path file or fewer strategies";
    } else {
      os << "lower workload.batch or execute.hidden/ffn";
      if (e.workload.source == WorkloadSource::decoder)
        os << ", workload.prompt_len, workload.decode_steps or execute.layers";
    }
    throw ResourceError(os.str());
  }
}

double file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0.0 : static_cast<double>(n);
}

// Lines of a text file (a final line without '\n' counts) and the longest line's bytes, read in blocks; zeros
// when it cannot be read.
struct LineStats {
  double lines = 0, longest = 0;
};
LineStats file_lines(const std::string& path) {
  LineStats s;
  std::ifstream in(path, std::ios::binary);
  if (!in) return s;
  std::vector<char> buf(1 << 16);
  double current = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    for (std::streamsize i = 0; i < got; ++i) {
      if (buf[i] == '\n') {
        s.lines += 1;
        s.longest = std::max(s.longest, current);
        current = 0;
      } else {
        current += 1;
      }
    }
  }
  if (current > 0) s.lines += 1;
  s.longest = std::max(s.longest, current);
  return s;
}

// The binary, its libraries and their buffers (OpenBLAS, OpenMP): a bare `moesim config` peaks near 10 MB.
constexpr double kProcessBytes = 48.0 * (1 << 20);

// Bytes one step record holds per variant (StepCollector): its scalars, the phase's text and its share of the
// report's series and aggregates; with `detail` its metrics' per-expert vectors (load, demand, utilization)
// and its modeled placements; with `json` its listing in the report (tree and text, `records` kept).
double record_bytes(const Experiment& e, bool detail, bool json) {
  const double E = std::max(1, e.model.experts);
  const double placements = e.placement.kind == PlacementKind::expert_parallel ? 2.0 : 1.0;
  double bytes = sizeof(BalanceMetrics) + sizeof(StepRecord) + 32.0 + 256.0;
  if (detail) bytes += 3 * (8.0 * E + 32.0) + placements * (sizeof(ModeledPlacement) + 8 * (8.0 * E + 32.0));
  if (json) bytes += 5.0 * (placements * 4000.0 + 40.0 * E);
  return bytes;
}

// Bytes a trace or load-profile run holds: the parsed file, and per batch (at most one per line) and
// variant its record and metrics, the report's per-batch series, and with `records` each record's full
// modeled cost and its JSON (tree and text). The constants are upper bounds measured on the trace
// benchmark (scripts/bench-trace-memory.sh; docs/performance.md "Trace replay memory"): a record's JSON
// is at most about 4 KB of text per placement (3.2 KB measured with expert_parallel plans) and its
// nlohmann tree about 4 times that.
double estimate_file_run_bytes(const Experiment& e, bool records, size_t num_variants) {
  const std::string path = resolve_workload_path(e);
  const double text = file_bytes(path);
  const LineStats stats = file_lines(path);
  const double lines = stats.lines;
  const double E = std::max(1, e.model.experts);
  const double variants = static_cast<double>(std::max<size_t>(1, num_variants));
  // A Megatron-LM router trace is read a line at a time: one line's JSON tree and batch (at most about 32 bytes
  // a byte of its text) and, for a load profile, a record per distinct layer (no more than its lines; counted
  // up to 4096, past any model's MoE layers), for a trace replay a compact record per decoder line.
  bool router_trace = false;
  if (e.workload.source == WorkloadSource::trace) {
    router_trace = is_megatron_router_trace_file(path);
  } else if (e.workload.format == LoadFormat::megatron_router_trace) {
    router_trace = true;
  } else if (e.workload.format == LoadFormat::detect) {
    try {
      router_trace = detect_load_format_of_file(path) == LoadFormat::megatron_router_trace;
    } catch (const InputError&) {
      // Unreadable or unrecognised: its reader says why, after this estimate.
    }
  }
  if (router_trace) {
    const bool profile = e.workload.source == WorkloadSource::load_profile;
    return kProcessBytes + 32.0 * stats.longest +
           record_bytes(e, profile || records, records) * (profile ? std::min(lines, 4096.0) : lines) * variants;
  }
  // Flat arrays: 64 bytes a line, an assignment (9 bytes) for every 4 bytes of text at most, logits
  // (4 bytes) for every 2 bytes of text at most; doubled for vector growth.
  const double assignments = std::min(lines * E, text / 4.0);
  const double parsed = 2.0 * (64.0 * lines + 9.0 * assignments + (trace_file_has_logits(path) ? 2.0 * text : 0.0));
  // Every record keeps its scalars; its detail only with `records` (StepCollector), else the last record's only.
  return kProcessBytes + text / 8.0 /*one line and its JSON at a time, generously*/ + parsed +
         record_bytes(e, records, records) * lines * variants;
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

double estimate_run_bytes(const Experiment& e, bool records, size_t num_variants) {
  switch (e.workload.source) {
    case WorkloadSource::decoder: {
      // Plus its records (a prefill and decode_steps steps of execute.layers layers, per variant), each
      // counted with its detail, and with `records` their JSON as for a trace.
      const double n = (1.0 + std::max(0, e.workload.decode_steps)) * std::max(1, e.execute.layers) *
                       static_cast<double>(std::max<size_t>(1, num_variants));
      return kProcessBytes + estimate_decoder_bytes(e) + n * record_bytes(e, true, records);
    }
    case WorkloadSource::trace:
    case WorkloadSource::load_profile:
      return estimate_file_run_bytes(e, records, num_variants);
    case WorkloadSource::load_distribution:  // the draws (E loads each) and a record per draw and variant
      return kProcessBytes + static_cast<double>(e.workload.batches) *
                                 (8.0 * e.model.experts +
                                  record_bytes(e, true, records) * static_cast<double>(std::max<size_t>(1, num_variants)));
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
  result.records_listed = opts.records;
  check_memory(e, opts, variants.size());
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
      run_load_profile(e, variants, opts, result);
      break;
    case WorkloadSource::load_distribution:
      run_load_distribution(e, variants, opts, result);
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

std::vector<ModeledPlacement> model_loads(const Experiment& e, const std::vector<int64_t>& load, int64_t num_tokens) {
  if (load.size() != static_cast<size_t>(e.model.experts))
    throw InputError("loads: expected " + std::to_string(e.model.experts) + " per-expert counts (model.experts), got " +
                     std::to_string(load.size()));
  if (num_tokens < 1) throw InputError("tokens: expected at least 1, got " + std::to_string(num_tokens));
  int64_t delivered = 0;
  for (int64_t x : load) {
    if (x < 0) throw InputError("loads: expected counts >= 0, got " + std::to_string(x));
    delivered += x;
  }
  const int64_t owed = num_tokens * e.model.top_k;
  if (delivered > owed)
    throw InputError("loads: the counts sum to " + std::to_string(delivered) + ", more than tokens x model.top_k = " +
                     std::to_string(owed));
  const HardwareProfile hw = load_hardware_profile(e.hardware, e.source_file);
  // No batch before these loads: a plan from past loads starts from equal ones (or the profile, the oracle).
  PlanSource source = run_detail::plan_source(e, run_detail::read_plan_profile(e), 0);
  return run_detail::model_placements(e, hw, e.router, load, 0, num_tokens, owed - delivered, source.next(load));
}

}  // namespace moesim
