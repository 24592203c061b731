// Host calibration measurements (see calibrate.hpp), each the way the executed pipeline uses the machine:
// the copy and the weight stream on every OpenMP thread (first-touch by the reading thread), small-row
// GEMMs one per thread as kernels/host/gemm_openblas.cpp runs its tiles, large GEMMs on the threaded BLAS.
// Copies follow STREAM (McCalpin 1995): bytes read plus written, best of several runs. The profile YAML
// and the GPU fit are in calibrate_profile.cpp. Host only. Covered by tests/cost/calibrate_test.cpp.
#include "src/cost/calibrate.hpp"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "src/common/clock.hpp"
#include "src/common/host.hpp"
#include "src/common/error.hpp"
#include "src/common/median.hpp"

#if defined(MOESIM_HAS_OPENMP)
#include <omp.h>
#endif

namespace moesim {
namespace {

int thread_id() {
#if defined(MOESIM_HAS_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name;
  }
  return "unknown CPU";
}

int simd_fp32_lanes() {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx512f")) return 16;
  if (__builtin_cpu_supports("avx")) return 8;
#endif
  return 4;
}

// The largest cache of cpu0 in sysfs ("32768K"); glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) is a fallback
// only, as some glibc versions report the sum over all cache instances of a many-core part on AMD.
double last_level_cache_bytes() {
  double best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string text;
    if (!(in >> text) || text.empty()) continue;
    double scale = 1;
    const char unit = text.back();
    if (unit == 'K') scale = 1024.0;
    else if (unit == 'M') scale = 1024.0 * 1024;
    else if (unit == 'G') scale = 1024.0 * 1024 * 1024;
    best = std::max(best, std::atof(text.c_str()) * scale);
  }
  if (best > 0) return best;
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return llc > 0 ? static_cast<double>(llc) : 0.0;
}

// Uninitialised floats (std::vector would zero them on one thread, placing every page on its node).
std::unique_ptr<float[]> raw_floats(size_t n) { return std::unique_ptr<float[]>(new float[n]); }

// C[m, n] = A[m, k] B[k, n], row-major.
void sgemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
}

// Best (shortest) seconds of `timed` runs of f after one warm-up: STREAM's convention, and the figure
// least disturbed by other processes sharing the cores.
template <class F>
double best_time(int timed, F f) {
  f();
  double best = 0;
  for (int i = 0; i < timed; ++i) {
    const auto t0 = Clock::now();
    f();
    const double t = seconds_since(t0);
    if (i == 0 || t < best) best = t;
  }
  return best;
}

// A parallel copy of `bytes` between two buffers, each thread copying the slice it initialised.
double measure_copy(double bytes, int threads, int repeats) {
  const size_t n = static_cast<size_t>(bytes / sizeof(float));
  auto src = raw_floats(n), dst = raw_floats(n);
  float* s = src.get();
  float* d = dst.get();
  const size_t chunk = (n + threads - 1) / threads;
#pragma omp parallel num_threads(threads)
  {
    const size_t lo = std::min(n, chunk * thread_id()), hi = std::min(n, lo + chunk);
    for (size_t i = lo; i < hi; ++i) {
      s[i] = static_cast<float>(i & 1023);
      d[i] = 0.0f;
    }
  }
  const double t = best_time(repeats, [&] {
#pragma omp parallel num_threads(threads)
    {
      const size_t lo = std::min(n, chunk * thread_id()), hi = std::min(n, lo + chunk);
      if (hi > lo) std::memcpy(d + lo, s + lo, (hi - lo) * sizeof(float));
    }
  });
  MOESIM_REQUIRE(d[n - 1] == s[n - 1], "the calibration copy did not copy");
  return 2.0 * static_cast<double>(n) * sizeof(float) / t;
}

// Weight bytes per second of 1-row sgemms ([1, k] x [k, n]), each thread streaming its own matrices in
// parallel: the pipeline's small-expert path (one expert per thread, single-threaded BLAS).
double measure_weight_stream(double bytes, int threads, int repeats, int64_t k, int64_t n) {
  const size_t per_matrix = static_cast<size_t>(k * n);
  const int per_thread = std::max<int>(1, static_cast<int>(bytes / sizeof(float) / per_matrix / threads));
  const size_t total = per_matrix * per_thread * threads;
  auto w = raw_floats(total);
  auto x = raw_floats(static_cast<size_t>(k) * threads), y = raw_floats(static_cast<size_t>(n) * threads);
  float* wp = w.get();
  float* xp = x.get();
  float* yp = y.get();
#pragma omp parallel num_threads(threads)
  {
    const int t = thread_id();
    float* mine = wp + per_matrix * per_thread * t;
    for (size_t i = 0; i < per_matrix * per_thread; ++i) mine[i] = static_cast<float>((i % 7) - 3) * 0.01f;
    for (int64_t i = 0; i < k; ++i) xp[t * k + i] = 1.0f;
  }
  const double secs = best_time(repeats, [&] {
#pragma omp parallel num_threads(threads)
    {
      const int t = thread_id();
      for (int j = 0; j < per_thread; ++j)
        sgemm(xp + t * k, wp + per_matrix * (static_cast<size_t>(per_thread) * t + j), yp + t * n, 1, k, n);
    }
  });
  return static_cast<double>(total) * sizeof(float) / secs;
}

// Best seconds per call of threaded [m, k] x [k, n] sgemms that each read a different weight matrix, the
// matrices totalling `bytes` (several times the last-level cache): weights stream from DRAM, as the
// executed pipeline's experts' do.
double measure_streamed_gemm(int64_t m, int64_t k, int64_t n, double bytes, int repeats) {
  const size_t per_matrix = static_cast<size_t>(k * n);
  const int count = std::max<int>(2, static_cast<int>(bytes / sizeof(float) / per_matrix));
  auto w = raw_floats(per_matrix * count);
  float* wp = w.get();
  const size_t total = per_matrix * count;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < total; ++i) wp[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.01f;
  std::vector<float> a(static_cast<size_t>(m * k), 0.5f), c(static_cast<size_t>(m * n));
  const double secs = best_time(repeats, [&] {
    for (int j = 0; j < count; ++j) sgemm(a.data(), wp + per_matrix * j, c.data(), m, k, n);
  });
  return secs / count;
}

GemmSample measure_gemm(int64_t m, int64_t k, int64_t n, double min_seconds) {
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i % 5) - 2) * 0.1f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i % 3) - 1) * 0.1f;
  sgemm(a.data(), b.data(), c.data(), m, k, n);  // warm-up
  std::vector<double> t;
  const auto start = Clock::now();
  while (t.size() < 3 || (seconds_since(start) < min_seconds && t.size() < 200)) {
    const auto t0 = Clock::now();
    sgemm(a.data(), b.data(), c.data(), m, k, n);
    t.push_back(seconds_since(t0));
  }
  GemmSample s;
  s.m = m;
  s.k = k;
  s.n = n;
  s.seconds = *std::min_element(t.begin(), t.end());
  s.flops_per_s = 2.0 * static_cast<double>(m) * k * n / s.seconds;
  return s;
}

// One fork-join with a tiny sgemm on thread 0: what the pipeline pays per grouped kernel before any work.
double measure_launch(int threads, int repeats) {
  float a[16] = {}, b[16 * 16] = {}, c[16] = {};
  std::vector<double> t;
  for (int i = -10; i < repeats; ++i) {
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      if (thread_id() == 0) sgemm(a, b, c, 1, 16, 16);
    }
    if (i >= 0) t.push_back(seconds_since(t0));
  }
  return median(t);
}

}  // namespace

MachineSignature this_machine(int threads) {
  MachineSignature m;
  m.cpu_model = cpu_model_name();
  m.cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  m.blas_core = openblas_get_corename();
  m.threads = threads;
  return m;
}

std::string calibration_problem(const CalibrationResult& r) {
  std::ostringstream os;
  const int cores = r.machine.cores > 0 ? r.machine.cores : r.threads;
  if (r.load_before > cores + 1.0) {
    os << "taken under heavy load (1-minute load average " << r.load_before << " on " << cores
       << " cores): other processes held the cores";
  } else if (r.peak_fp32_flops_per_s < 0.5e9 * r.simd_fp32_lanes * r.threads) {
    os << "peak fp32 " << r.peak_fp32_flops_per_s / 1e9 << " GFLOP/s is below 0.5 GFLOP/s per SIMD lane ("
       << r.simd_fp32_lanes << " lanes x " << r.threads << " threads): no CPU of that width is that slow";
  } else if (r.copy_bandwidth_bytes_per_s < 1e9) {
    os << "copy bandwidth " << r.copy_bandwidth_bytes_per_s / 1e9 << " GB/s is below 1 GB/s";
  } else if (r.efficiency_flops < 0.05 || r.efficiency_bw < 0.05) {
    os << "efficiency_flops " << r.efficiency_flops << " or efficiency_bw " << r.efficiency_bw << " is below 0.05";
  }
  return os.str();
}

CalibrationResult calibrate_host(const CalibrationOptions& opts) {
  const auto t_start = Clock::now();
  CalibrationResult r;
  r.load_before = load_average_1min();
  r.cpu_model = cpu_model_name();
  r.blas = std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ")";
  r.threads = openmp_max_threads();
  r.machine = this_machine(r.threads);
  r.simd_fp32_lanes = simd_fp32_lanes();
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  r.memory_bytes = std::max(0.0, static_cast<double>(sysconf(_SC_PHYS_PAGES)) * page);
  r.llc_bytes = last_level_cache_bytes();

  const double mib = 1024.0 * 1024.0;
  // Buffers several times the last-level cache so that the copy and the stream reach DRAM.
  r.copy_bytes = (opts.quick ? 32 : 256) * mib;
  r.copy_bandwidth_bytes_per_s = measure_copy(r.copy_bytes, r.threads, opts.quick ? 3 : 10);
  const int64_t stream_dim = opts.quick ? 512 : 1024;
  r.stream_bandwidth_bytes_per_s =
      measure_weight_stream(opts.quick ? 32 * mib : 256 * mib, r.threads, opts.quick ? 3 : 15, stream_dim, stream_dim);

  // GEMM shapes: rows from one token to a large batch, through square and SwiGLU-like (k != n) weights.
  const std::vector<int64_t> rows = opts.quick ? std::vector<int64_t>{1, 16, 256}
                                               : std::vector<int64_t>{1, 4, 16, 64, 256, 1024, 4096};
  const std::vector<std::pair<int64_t, int64_t>> kn =
      opts.quick ? std::vector<std::pair<int64_t, int64_t>>{{256, 256}}
                 : std::vector<std::pair<int64_t, int64_t>>{{1024, 1024}, {1024, 4096}, {4096, 1024}};
  const double min_seconds = opts.quick ? 0.01 : 0.15;
  for (const auto& [k, n] : kn)
    for (int64_t m : rows) r.gemm.push_back(measure_gemm(m, k, n, min_seconds));

  for (const GemmSample& s : r.gemm) r.peak_fp32_flops_per_s = std::max(r.peak_fp32_flops_per_s, s.flops_per_s);
  std::vector<double> compute_bound;
  for (const GemmSample& s : r.gemm)
    if (s.m >= 256) compute_bound.push_back(s.flops_per_s / r.peak_fp32_flops_per_s);
  r.efficiency_flops = compute_bound.empty() ? 1.0 : std::clamp(median(compute_bound), 1e-3, 1.0);
  r.efficiency_bw = std::clamp(r.stream_bandwidth_bytes_per_s / r.copy_bandwidth_bytes_per_s, 1e-3, 1.0);

  // Overlap of memory and compute: GEMMs around the ridge row count m* = 2 F_eff / stream (where a
  // [k, n] fp32 weight takes as long to stream as 2 m k n FLOPs take to compute), at m*/2, m*, 2 m*.
  const double stream = r.copy_bandwidth_bytes_per_s * r.efficiency_bw;
  const double flops = r.peak_fp32_flops_per_s * r.efficiency_flops;
  const double ridge_rows = 2.0 * flops / stream;
  std::vector<double> fitted;
  const std::vector<double> factors = opts.quick ? std::vector<double>{1.0} : std::vector<double>{0.5, 1.0, 2.0};
  for (double f : factors) {
    OverlapSample o;
    o.m = std::max<int64_t>(1, std::llround(ridge_rows * f));
    o.k = stream_dim;
    o.n = stream_dim;
    o.seconds = measure_streamed_gemm(o.m, o.k, o.n, opts.quick ? 32 * mib : 256 * mib, opts.quick ? 2 : 5);
    o.memory_s = static_cast<double>(o.k * o.n) * sizeof(float) / stream;
    o.compute_s = 2.0 * static_cast<double>(o.m) * o.k * o.n / flops;
    o.overlap = std::clamp((o.memory_s + o.compute_s - o.seconds) / std::min(o.memory_s, o.compute_s), 0.0, 1.0);
    fitted.push_back(o.overlap);
    r.overlap.push_back(o);
  }
  r.memory_compute_overlap = median(fitted);
  r.launch_overhead_s = measure_launch(r.threads, opts.quick ? 200 : 2000);
  r.seconds = seconds_since(t_start);
  return r;
}

}  // namespace moesim
