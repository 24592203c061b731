// `moesim calibrate [--out configs/hardware/cpu-local.yaml] [--name NAME] [--quick] [--note TEXT]
// [--threads N]`:
// measures this machine (src/cost/calibrate.hpp) and writes a hardware profile, atomically with --out
// (the summary then goes to stdout), else the profile to stdout and the summary to stderr.
// `moesim calibrate --backend cuda --base h200 [--dtype bf16]`: times one SwiGLU expert over a range of
// rows on the GPU (measure_cuda_device, kernels/cuda_backend.hpp), the copy bandwidth and the launch
// overhead, and writes the datasheet profile --base with its efficiencies fitted (fit_device). Without a
// usable device (or a moesim built without CUDA) it exits 3 before measuring anything.
// `moesim calibrate --from-published FILES [--name NAME] [--out FILE]`: fits a GPU's built-in profile to
// published kernel tables of that GPU (src/sweep/published.hpp) and writes it; measures nothing.
// Covered by tests/cost/calibrate_test.cpp (through the binary; the fit on synthetic timings).
#include <filesystem>
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/cost/calibrate.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/atomic_write.hpp"
#include "src/sweep/published.hpp"

#if defined(MOESIM_HAS_CUDA)
#include "kernels/cuda_backend.hpp"
#endif

namespace moesim::cli {
namespace {

Dtype parse_dtype_option(const std::string& text) {
  for (Dtype d : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int8}) {
    if (text == to_string(d)) return d;
  }
  throw InputError("--dtype: expected fp32, tf32, bf16 or fp16, got '" + text + "'");
}

// The GPU's measurements; throws ResourceError (exit 3) without a usable device or CUDA backend.
DeviceMeasurements measure_device(Dtype dtype, bool quick) {
  if (resolve_backend("cuda") != ExecBackend::cuda) throw ResourceError("--backend cuda: no usable CUDA device");
#if defined(MOESIM_HAS_CUDA)
  if (!cuda_supports_dtype(dtype)) {
    throw InputError("--dtype: expected fp32, tf32, bf16 or fp16 for the CUDA experts, got '" + std::string(to_string(dtype)) + "'");
  }
  CudaMeasureConfig cfg;
  cfg.dtype = dtype;
  if (quick) {
    cfg.hidden = 1024;
    cfg.ffn = 2048;
    cfg.expert_rows = {1, 16, 128, 1024, 4096};
    cfg.copy_bytes = int64_t(1) << 26;
    cfg.repeats = 3;
  }
  const CudaMeasurements got = measure_cuda_device(cfg);
  DeviceMeasurements m;
  m.device = got.device;
  m.dtype = got.dtype;
  m.hidden = cfg.hidden;
  m.ffn = cfg.ffn;
  m.copy_bandwidth_bytes_per_s = got.copy_bandwidth_bytes_per_s;
  m.launch_overhead_s = got.launch_overhead_s;
  for (const CudaExpertTiming& e : got.expert) m.expert.push_back({e.rows, e.seconds});
  return m;
#else
  (void)dtype;
  (void)quick;
  return {};  // not reached: resolve_backend("cuda") throws in a build without CUDA
#endif
}

}  // namespace

int cmd_calibrate(int argc, char** argv) {
  bool help = false;
  bool quick = false, force = false;
  std::string out, name, note, backend = "cpu", base, dtype_text = "bf16";
  std::vector<std::string> from_published;
  int threads = 0;
  po::options_description desc("moesim calibrate [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "out", po::value(&out), "write the profile to FILE (atomically), e.g. configs/hardware/cpu-local.yaml")(
      "name", po::value(&name), "the profile's name (default: cpu-local; with cuda: BASE-measured)")(
      "backend", po::value(&backend)->default_value("cpu"), "what to measure: cpu (this machine) | cuda (the GPU)")(
      "base", po::value(&base), "with --backend cuda: the GPU's datasheet profile, a file or a built-in name (h200)")(
      "dtype", po::value(&dtype_text)->default_value("bf16"), "with --backend cuda: expert dtype timed (fp32|tf32|bf16|fp16)")(
      "quick", po::bool_switch(&quick), "small buffers and few shapes: a rough profile in about a second")(
      "force", po::bool_switch(&force),
      "write the CPU profile even when it was taken under heavy load or its figures are implausible")(
      "note", po::value(&note), "text appended to the profile's source note (how and where it was measured)")(
      "threads", po::value(&threads)->default_value(0), "OpenMP/BLAS threads (0: all cores)")(
      "from-published", po::value(&from_published)->multitoken(),
      "fit efficiency_bw, efficiency_flops, launch_overhead_us and k_step_us of a GPU's profile to published kernel "
      "tables (validation CSVs, folders of them, or 'all' for the built-in set), all of one GPU, near the pooled "
      "fit; measures nothing");
  if (parse_or_help(argc, argv, desc, nullptr, 0, help)) return kExitOk;
  if (!from_published.empty()) {
    if (backend != "cpu" || !base.empty() || quick)
      throw InputError("--from-published: expected without --backend, --base or --quick (it fits, measures nothing)");
    std::vector<PublishedTable> tables;
    for (const std::string& spec : from_published) {
      std::vector<PublishedTable> got = load_published(spec);
      tables.insert(tables.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
    }
    if (tables.empty())
      throw InputError("--from-published: expected at least one kernel table, got none (communication tables are "
                       "fitted by validate --published)");
    const std::string gpu = tables.front().hardware.name;
    if (name.empty()) name = gpu + "-published";
    if (name.find_first_of(" \t\n:/") != std::string::npos)
      throw InputError("--name: expected a profile name without spaces, ':' or '/', got '" + name + "'");
    if (note.find_first_of("\n\r") != std::string::npos) throw InputError("--note: expected one line of text");
    std::string yaml = published_profile_yaml(tables, base_profile_text(tables.front().profile_ref), name);
    if (!note.empty()) yaml.insert(0, "# " + note + "\n");
    if (out.empty()) {
      std::cout << yaml << std::flush;
    } else {
      write_file_atomic(out, yaml);
      std::cout << "fitted " << gpu << " to " << tables.size() << " published table" << (tables.size() == 1 ? "" : "s")
                << "; wrote " << out << "\n";
    }
    return kExitOk;
  }
  if (backend != "cpu" && backend != "cuda") throw InputError("--backend: expected cpu or cuda, got '" + backend + "'");
  const bool gpu = backend == "cuda";
  if (!gpu && !base.empty()) throw InputError("--base: only with --backend cuda (a CPU profile is measured whole)");
  if (gpu && base.empty()) {
    throw InputError("--base: expected the GPU's datasheet profile with --backend cuda, e.g. --base h200 (moesim hardware)");
  }
  const std::string base_yaml = gpu ? base_profile_text(base) : "";
  if (name.empty()) name = gpu ? parse_hardware_profile(base_yaml, base).name + "-measured" : "cpu-local";
  if (name.empty() || name.find_first_of(" \t\n:/") != std::string::npos)
    throw InputError("--name: expected a profile name without spaces, ':' or '/', got '" + name + "'");
  if (!out.empty()) {
    // Refuse an unwritable destination before spending the measuring time.
    const std::filesystem::path parent = std::filesystem::absolute(out).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec))
      throw InputError("--out: expected a file in an existing folder, got '" + out + "'");
  }
  if (note.find_first_of("\n\r") != std::string::npos) throw InputError("--note: expected one line of text");
  if (gpu) {
    const Dtype dtype = parse_dtype_option(dtype_text);
    const DeviceMeasurements m = measure_device(dtype, quick);
    const std::string yaml = device_profile_yaml(m, base_yaml, name, note);
    if (out.empty()) {
      std::cout << yaml << std::flush;
    } else {
      write_file_atomic(out, yaml);
      std::cout << "measured " << m.device << "; wrote " << out << "\n";
    }
    return kExitOk;
  }
  apply_threads(threads);
  CalibrationOptions copts;
  copts.quick = quick;
  const CalibrationResult r = calibrate_host(copts);
  const std::string problem = calibration_problem(r);
  if (!problem.empty() && !force) {
    std::cerr << calibration_summary(r);
    throw ResourceError("calibrate: refusing to write the profile: " + problem +
                        "; rerun on idle cores, or pass --force to write it anyway");
  }
  const std::string yaml = calibration_profile_yaml(r, name, note);
  // The profile must load as written; a failure here is a bug, reported before anything is replaced.
  parse_hardware_profile(yaml, name + ".yaml");
  if (out.empty()) {
    std::cerr << calibration_summary(r);
    std::cout << yaml << std::flush;
  } else {
    write_file_atomic(out, yaml);
    std::cout << calibration_summary(r) << "wrote " << out << "\n";
  }
  return kExitOk;
}

}  // namespace moesim::cli
