// moesim_gpu_bench: the CUDA backend's benchmarks (run_cuda_benchmarks, tests/gpu/gpu_bench_cases.cu) for
// one shape: router, permutation GB/s against a device-to-device copy, expert GEMM TFLOP/s (grouped and
// per expert) against one dense GEMM of the same size, and the whole layer against balanced routing.
// Every case is checked against the CPU path first. Prints a table (or --csv). Exit 3 without a device,
// 1 when a check fails. Built only with the CUDA backend; run by scripts/gpu-check.sh.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/experiment.hpp"
#include "kernels/cuda_backend.hpp"
#include "tests/gpu/gpu_bench_cases.hpp"

namespace po = boost::program_options;

namespace {

moesim::Dtype parse_dtype(const std::string& s) {
  for (moesim::Dtype d : {moesim::Dtype::fp32, moesim::Dtype::tf32, moesim::Dtype::bf16, moesim::Dtype::fp16}) {
    if (s == moesim::to_string(d)) return d;
  }
  throw moesim::InputError("--dtype: expected fp32, tf32, bf16 or fp16, got '" + s + "'");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moesim;
  CudaBenchConfig cfg;
  std::string dtype = "bf16";
  std::string label;
  bool csv = false, header = true;
  po::options_description desc("moesim_gpu_bench [options]");
  desc.add_options()("help,h", "show this help")
      ("tokens", po::value(&cfg.num_tokens)->default_value(cfg.num_tokens), "tokens per batch")
      ("experts", po::value(&cfg.num_experts)->default_value(cfg.num_experts), "routed experts")
      ("top-k", po::value(&cfg.top_k)->default_value(cfg.top_k), "experts per token")
      ("hidden", po::value(&cfg.hidden)->default_value(cfg.hidden), "model width")
      ("ffn", po::value(&cfg.ffn)->default_value(cfg.ffn), "expert FFN width")
      ("skew", po::value(&cfg.skew)->default_value(cfg.skew), "expert popularity skew of the synthetic logits")
      ("dtype", po::value(&dtype)->default_value(dtype), "expert storage: fp32 | tf32 | bf16 | fp16")
      ("warmup", po::value(&cfg.warmup)->default_value(cfg.warmup), "untimed runs per case")
      ("iterations", po::value(&cfg.iterations)->default_value(cfg.iterations), "timed runs per case")
      ("seed", po::value(&cfg.seed)->default_value(cfg.seed), "seed of logits, weights and inputs")
      ("label", po::value(&label), "shape label printed in every row (default: the shape)")
      ("csv", po::bool_switch(&csv), "CSV rows instead of a table")
      ("no-header", "CSV without the header line");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    header = !vm.count("no-header");
    cfg.dtype = parse_dtype(dtype);
    std::string why;
    if (!cuda_device_available(&why)) {
      std::cerr << "moesim_gpu_bench: no usable CUDA device: " << why << "\n";
      return kExitResource;
    }
    if (label.empty()) {
      label = "N" + std::to_string(cfg.num_tokens) + " E" + std::to_string(cfg.num_experts) + " k" +
              std::to_string(cfg.top_k) + " H" + std::to_string(cfg.hidden) + " F" + std::to_string(cfg.ffn);
    }
    const std::vector<CudaBenchRow> rows = run_cuda_benchmarks(cfg);
    bool failed = false;
    if (csv) {
      if (header) std::cout << "shape,case,median_ms,min_ms,rate,unit,baseline,baseline_ms,baseline_rate,ratio,check\n";
      for (const CudaBenchRow& r : rows) {
        std::printf("%s,%s,%.4f,%.4f,%.4g,%s,%s,%.4f,%.4g,%.3f,\"%s\"\n", label.c_str(), r.name.c_str(), r.median_ms,
                    r.min_ms, r.rate, r.unit.c_str(), r.baseline.c_str(), r.baseline_ms, r.baseline_rate,
                    r.baseline_ms > 0 ? r.baseline_ms / r.median_ms : 0.0, r.verified.c_str());
        failed |= r.verified.rfind("ok", 0) != 0;
      }
    } else {
      std::printf("device: %s; shape %s, experts in %s, %d timed runs (median)\n",
                  cuda_device_description().c_str(), label.c_str(), dtype.c_str(), cfg.iterations);
      std::printf("%-58s %10s %12s %-9s | %-30s %10s %12s %7s | %s\n", "case", "ms", "rate", "unit", "baseline",
                  "ms", "rate", "x", "check");
      for (const CudaBenchRow& r : rows) {
        std::printf("%-58s %10.3f %12.4g %-9s | %-30s %10.3f %12.4g %7.2f | %s\n", r.name.c_str(), r.median_ms, r.rate,
                    r.unit.c_str(), r.baseline.c_str(), r.baseline_ms, r.baseline_rate,
                    r.baseline_ms > 0 ? r.baseline_ms / r.median_ms : 0.0, r.verified.c_str());
        failed |= r.verified.rfind("ok", 0) != 0;
      }
    }
    return failed ? kExitCheckFailed : kExitOk;
  } catch (const po::error& e) {
    std::cerr << "moesim_gpu_bench: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const Error& e) {
    std::cerr << "moesim_gpu_bench: " << e.what() << "\n";
    return e.exit_code();
  }
}
