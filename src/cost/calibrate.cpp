// Host calibration (see calibrate.hpp). Each figure is measured the way the executed pipeline uses the
// machine: the copy and the weight stream run on every OpenMP thread (first-touch initialised by the
// thread that reads it), small-row GEMMs run one per thread as kernels/host/gemm_openblas.cpp runs its
// tiles, large GEMMs on the threaded BLAS (the aggregate rate the pipeline's tiles reach across
// threads). The copy convention is STREAM's (McCalpin 1995): bytes read plus bytes written, best of
// several runs. Host only. Covered by tests/cost/calibrate_test.cpp.
#include "src/cost/calibrate.hpp"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "src/common/error.hpp"
#include "src/common/median.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/roofline.hpp"

#if defined(MOESIM_HAS_OPENMP)
#include <omp.h>
#endif

namespace moesim {
namespace {

using Clock = std::chrono::steady_clock;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

int max_threads() {
#if defined(MOESIM_HAS_OPENMP)
  return std::max(1, omp_get_max_threads());
#else
  return 1;
#endif
}

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
    const double t0 = now_s();
    f();
    const double t = now_s() - t0;
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
  const double start = now_s();
  while (t.size() < 3 || (now_s() - start < min_seconds && t.size() < 200)) {
    const double t0 = now_s();
    sgemm(a.data(), b.data(), c.data(), m, k, n);
    t.push_back(now_s() - t0);
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
    const double t0 = now_s();
#pragma omp parallel num_threads(threads)
    {
      if (thread_id() == 0) sgemm(a, b, c, 1, 16, 16);
    }
    if (i >= 0) t.push_back(now_s() - t0);
  }
  return median(t);
}

std::string num(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string utc_date() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// YAML double-quoted scalar.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

CalibrationResult calibrate_host(const CalibrationOptions& opts) {
  const double t_start = now_s();
  CalibrationResult r;
  r.cpu_model = cpu_model_name();
  r.blas = std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ")";
  r.threads = max_threads();
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
  r.seconds = now_s() - t_start;
  return r;
}

std::string calibration_profile_yaml(const CalibrationResult& r, const std::string& name, const std::string& note) {
  const std::string date = utc_date();
  const std::string how = "moesim calibrate, " + date + ", " + std::to_string(r.threads) + " threads";
  std::ostringstream os;
  os << "# " << name << ": this machine, measured by `moesim calibrate` on " << date << " (" << num(r.seconds, 3)
     << " s).\n"
     << "# CPU: " << r.cpu_model << "; BLAS: " << r.blas << ".\n"
     << "# The CPU in the GPU vocabulary: sm_count = threads (cores), a tile = 1 row x one SIMD register of\n"
     << "# fp32 outputs (tile_m 1, tile_n = lanes), l2_mib = the last-level cache. The executed pipeline runs\n"
     << "# fp32 only, so fp32 is the only peak. peak = the best sgemm rate measured here (no datasheet peak\n"
     << "# is trusted inside a VM); efficiency_flops = median rate of the m >= 256 shapes / peak;\n"
     << "# memory_bandwidth = parallel copy, bytes read + written; efficiency_bw = 1-row sgemm weight stream\n"
     << "# (one per thread) / copy, at most 1; memory_compute_overlap: how much of the shorter of the memory\n"
     << "# and compute terms hides under the longer (1: roofline max, 0: their sum), fitted to threaded sgemms\n"
     << "# near the ridge whose weights stream from DRAM.\n"
     << "# sgemm throughput per shape (row-major [m, k] x [k, n], all threads):\n"
     << "#        m       k       n     GFLOP/s   of peak\n";
  for (const GemmSample& s : r.gemm) {
    char line[128];
    std::snprintf(line, sizeof line, "#  %7lld %7lld %7lld  %10.2f  %7.3f\n", static_cast<long long>(s.m),
                  static_cast<long long>(s.k), static_cast<long long>(s.n), s.flops_per_s / 1e9,
                  s.flops_per_s / r.peak_fp32_flops_per_s);
    os << line;
  }
  os << "name: " << name << "\n"
     << "description: " << quoted(r.cpu_model + ", " + std::to_string(r.threads) + " threads (moesim calibrate)") << "\n"
     << "source: " << quoted(how + "; " + r.blas + (note.empty() ? "" : "; " + note)) << "\n"
     << "peak_tflops: {fp32: " << num(r.peak_fp32_flops_per_s / 1e12, 5) << "}\n"
     << "memory_bandwidth_gbs: " << num(r.copy_bandwidth_bytes_per_s / 1e9, 5) << "\n";
  if (r.memory_bytes > 0) os << "memory_gib: " << num(r.memory_bytes / (1024.0 * 1024 * 1024), 4) << "\n";
  os << "sm_count: " << r.threads << "\n"
     << "link_bandwidth_gbs: " << num(r.copy_bandwidth_bytes_per_s / 2e9, 5) << "\n";
  if (r.llc_bytes > 0) os << "l2_mib: " << num(r.llc_bytes / (1024.0 * 1024), 4) << "\n";
  os << "launch_overhead_us: " << num(r.launch_overhead_s * 1e6, 4) << "\n"
     << "tile_m: 1\n"
     << "tile_n: " << r.simd_fp32_lanes << "\n"
     << "efficiency_flops: " << num(r.efficiency_flops, 4) << "\n"
     << "efficiency_bw: " << num(r.efficiency_bw, 4) << "\n"
     << "memory_compute_overlap: " << num(r.memory_compute_overlap, 3) << "\n"
     << "calibrated: true\n"
     << "sources:\n"
     << "  peak_tflops.fp32: " << quoted(how + ": best sgemm rate over " + std::to_string(r.gemm.size()) + " shapes") << "\n"
     << "  memory_bandwidth_gbs: "
     << quoted(how + ": parallel memcpy of 2 x " + num(r.copy_bytes / (1024.0 * 1024), 4) +
               " MiB, bytes read + written, best run")
     << "\n";
  if (r.memory_bytes > 0) os << "  memory_gib: " << quoted("sysconf(_SC_PHYS_PAGES) x page size") << "\n";
  os << "  sm_count: " << quoted("OpenMP/BLAS threads: one core = one SM") << "\n"
     << "  link_bandwidth_gbs: "
     << quoted("expert-parallel 'devices' on one host exchange activations by memcpy: the copy's payload rate, "
               "half its read + written bandwidth")
     << "\n";
  if (r.llc_bytes > 0) os << "  l2_mib: " << quoted("sysfs (cpu0 cache sizes): the last-level cache, the CPU's L2 analogue") << "\n";
  os << "  launch_overhead_us: " << quoted(how + ": OpenMP fork-join around a 1x16x16 sgemm, median") << "\n"
     << "  tile_m: " << quoted("a CPU GEMM pads no rows: one row is the quantum") << "\n"
     << "  tile_n: " << quoted("fp32 lanes of the widest SIMD register (" + std::to_string(r.simd_fp32_lanes) + ")") << "\n"
     << "  efficiency_flops: " << quoted(how + ": median sgemm rate of the m >= 256 shapes / peak") << "\n"
     << "  efficiency_bw: "
     << quoted(how + ": 1-row sgemm weight stream " + num(r.stream_bandwidth_bytes_per_s / 1e9, 4) +
               " GB/s / copy " + num(r.copy_bandwidth_bytes_per_s / 1e9, 4) + " GB/s, at most 1")
     << "\n"
     << "  memory_compute_overlap: "
     << quoted(how + ": median over threaded sgemms near the ridge, weights from DRAM, of (memory + compute - "
               "measured) / min(memory, compute)")
     << "\n"
     << "  calibrated: " << quoted(how) << "\n";
  return os.str();
}

std::string calibration_summary(const CalibrationResult& r) {
  std::ostringstream os;
  os << "cpu: " << r.cpu_model << ", " << r.threads << " threads, " << r.simd_fp32_lanes << " fp32 SIMD lanes\n"
     << "blas: " << r.blas << "\n"
     << "copy bandwidth (read + written): " << num(r.copy_bandwidth_bytes_per_s / 1e9, 4) << " GB/s\n"
     << "1-row sgemm weight stream:       " << num(r.stream_bandwidth_bytes_per_s / 1e9, 4) << " GB/s (efficiency_bw "
     << num(r.efficiency_bw, 3) << ")\n"
     << "best sgemm rate (peak):          " << num(r.peak_fp32_flops_per_s / 1e9, 4) << " GFLOP/s (efficiency_flops "
     << num(r.efficiency_flops, 3) << ")\n"
     << "fork-join + tiny sgemm:          " << num(r.launch_overhead_s * 1e6, 3) << " us\n"
     << "memory/compute overlap:          " << num(r.memory_compute_overlap, 3) << " (";
  for (size_t i = 0; i < r.overlap.size(); ++i) {
    const OverlapSample& o = r.overlap[i];
    os << (i ? "; " : "") << "m " << o.m << ": " << num(o.seconds * 1e3, 3) << " ms measured, memory "
       << num(o.memory_s * 1e3, 3) << " + compute " << num(o.compute_s * 1e3, 3) << " ms";
  }
  os << ")\n"
     << "sgemm per shape:\n      m       k       n     GFLOP/s\n";
  for (const GemmSample& s : r.gemm) {
    char line[128];
    std::snprintf(line, sizeof line, "%7lld %7lld %7lld  %10.2f\n", static_cast<long long>(s.m),
                  static_cast<long long>(s.k), static_cast<long long>(s.n), s.flops_per_s / 1e9);
    os << line;
  }
  os << "measured in " << num(r.seconds, 3) << " s\n";
  return os.str();
}

DeviceFit fit_device(const DeviceMeasurements& m, const HardwareProfile& datasheet) {
  MOESIM_REQUIRE(m.hidden >= 1 && m.ffn >= 1, "device measurements need the expert shape");
  HardwareProfile hw = datasheet;
  hw.launch_overhead_s = m.launch_overhead_s;
  const ExpertRoofline rm(hw, m.hidden, m.ffn, m.dtype);
  DeviceFit fit;
  struct Sample {
    double memory_s, compute_s, log_measured;
  };
  std::vector<Sample> samples;
  for (const DeviceExpertSample& s : m.expert) {
    GroupedCost g(rm);
    g.add(s.rows);
    const GroupedCost::Terms t = g.terms();
    DeviceFit::Row row;
    row.rows = s.rows;
    row.measured_s = s.seconds;
    row.memory_s = t.memory_s;
    row.compute_s = t.compute_s;
    fit.rows.push_back(row);
    if (s.rows >= 1 && s.seconds > 0 && std::isfinite(s.seconds)) {
      samples.push_back({t.memory_s, t.compute_s, std::log(s.seconds)});
    }
  }
  const double launches_s = 2.0 * m.launch_overhead_s, overlap = datasheet.memory_compute_overlap;
  const auto model_s = [&](const Sample& s, double eff_bw, double eff_flops) {
    return combine_terms(s.memory_s / eff_bw, s.compute_s / eff_flops, overlap) + launches_s;
  };
  const auto loss = [&](double log_bw, double log_flops) {
    const double eb = std::exp(log_bw), ef = std::exp(log_flops);
    double sum = 0;
    for (const Sample& s : samples) {
      const double d = std::log(model_s(s, eb, ef)) - s.log_measured;
      sum += d * d;
    }
    return sum;
  };
  // Least squares in log time over log efficiencies in [0.001, 1]: a 121 x 121 grid, then three rounds
  // of a 21 x 21 grid around the best point at a tenth of the step. Scanned from the highest efficiencies
  // down, so where a term binds no sample (the loss is flat along it) the highest value, 1, is kept.
  const double lo = std::log(0.001);
  double step = -lo / 120.0, best_bw = 0, best_flops = 0, best = HUGE_VAL;
  if (!samples.empty()) {
    for (int i = 120; i >= 0; --i) {
      for (int j = 120; j >= 0; --j) {
        const double l = loss(lo + i * step, lo + j * step);
        if (l < best) best = l, best_bw = lo + i * step, best_flops = lo + j * step;
      }
    }
    for (int round = 0; round < 3; ++round) {
      const double c_bw = best_bw, c_flops = best_flops;
      step /= 10.0;
      for (int i = 10; i >= -10; --i) {
        for (int j = 10; j >= -10; --j) {
          const double a = std::clamp(c_bw + i * step, lo, 0.0), b = std::clamp(c_flops + j * step, lo, 0.0);
          const double l = loss(a, b);
          if (l < best) best = l, best_bw = a, best_flops = b;
        }
      }
    }
  }
  fit.efficiency_bw = samples.empty() ? datasheet.efficiency_bw : std::exp(best_bw);
  fit.efficiency_flops = samples.empty() ? datasheet.efficiency_flops : std::exp(best_flops);
  // A term that no sample is bound by is not measured: the datasheet's value stands when the samples
  // stay bound as they are with it.
  const auto count_bound = [&](double eb, double ef, bool compute) {
    int n = 0;
    for (const Sample& s : samples) n += ((s.compute_s / ef > s.memory_s / eb) == compute) ? 1 : 0;
    return n;
  };
  fit.flops_samples = count_bound(fit.efficiency_bw, fit.efficiency_flops, true);
  fit.bw_samples = count_bound(fit.efficiency_bw, fit.efficiency_flops, false);
  if (fit.flops_samples == 0 && count_bound(fit.efficiency_bw, datasheet.efficiency_flops, true) == 0) {
    fit.efficiency_flops = datasheet.efficiency_flops;
  }
  if (fit.bw_samples == 0 && count_bound(datasheet.efficiency_bw, fit.efficiency_flops, false) == 0) {
    fit.efficiency_bw = datasheet.efficiency_bw;
  }
  hw.efficiency_flops = fit.efficiency_flops;
  hw.efficiency_bw = fit.efficiency_bw;
  const ExpertRoofline fitted(hw, m.hidden, m.ffn, m.dtype);
  for (DeviceFit::Row& row : fit.rows) {
    row.fitted_s = expert_time(fitted, row.rows).calibrated_s;
    row.compute_bound = row.compute_s / fit.efficiency_flops > row.memory_s / fit.efficiency_bw;
  }
  return fit;
}

std::string device_profile_yaml(const DeviceMeasurements& m, const std::string& base_yaml, const std::string& name,
                                const std::string& note) {
  const HardwareProfile datasheet = parse_hardware_profile(base_yaml, "--base");
  const DeviceFit fit = fit_device(m, datasheet);
  YAML::Node root = YAML::Load(base_yaml);
  const std::string date = utc_date();
  const std::string how = "moesim calibrate --backend cuda, " + date + ", " + m.device + ", " + to_string(m.dtype) +
                          " experts " + std::to_string(m.hidden) + " x " + std::to_string(m.ffn) +
                          (note.empty() ? "" : "; " + note);
  const std::string base_name = datasheet.name;
  root["name"] = name;
  root["description"] = m.device + " (measured; datasheet figures from " + base_name + ")";
  root["source"] = "datasheet profile " + base_name + " with efficiencies and launch overhead measured by " + how;
  root["launch_overhead_us"] = YAML::Load(num(m.launch_overhead_s * 1e6, 4));
  root["efficiency_flops"] = YAML::Load(num(fit.efficiency_flops, 4));
  root["efficiency_bw"] = YAML::Load(num(fit.efficiency_bw, 4));
  root["calibrated"] = true;
  if (!root["sources"] || !root["sources"].IsMap()) root["sources"] = YAML::Node(YAML::NodeType::Map);
  root["sources"]["launch_overhead_us"] = how + ": an empty kernel, launch to completion, median";
  const std::string fitted = how + ": least-squares fit (log time) of the calibrated column to " +
                             std::to_string(fit.rows.size()) + " expert timings, ";
  root["sources"]["efficiency_flops"] =
      fit.flops_samples > 0 ? fitted + std::to_string(fit.flops_samples) + " of them bound by compute"
                            : "no expert timing bound by compute: the datasheet profile's value";
  root["sources"]["efficiency_bw"] =
      fit.bw_samples > 0 ? fitted + std::to_string(fit.bw_samples) + " of them bound by memory"
                         : "no expert timing bound by memory: the datasheet profile's value";
  YAML::Emitter out;
  out << root;
  std::ostringstream os;
  os << "# " << name << ": " << m.device << ", measured by `moesim calibrate --backend cuda` on " << date << ".\n"
     << "# Datasheet figures (peaks, bandwidth, SMs, tiles, links) from " << base_name
     << "; fitted here: efficiency_flops, efficiency_bw, launch_overhead_us.\n"
     << "# Device-to-device copy: " << num(m.copy_bandwidth_bytes_per_s / 1e9, 4) << " GB/s read + written ("
     << num(m.copy_bandwidth_bytes_per_s / datasheet.memory_bandwidth_bytes_per_s, 3) << " of the datasheet "
     << num(datasheet.memory_bandwidth_bytes_per_s / 1e9, 4) << " GB/s).\n"
     << "# One " << to_string(m.dtype) << " SwiGLU expert, hidden " << m.hidden << ", ffn " << m.ffn
     << " (times in us; model terms at the datasheet peak and bandwidth):\n"
     << "#     rows   measured     memory    compute  calibrated  bound\n";
  for (const DeviceFit::Row& r : fit.rows) {
    char line[160];
    std::snprintf(line, sizeof line, "#  %7lld  %9.2f  %9.2f  %9.2f  %10.2f  %s\n", static_cast<long long>(r.rows),
                  r.measured_s * 1e6, r.memory_s * 1e6, r.compute_s * 1e6, r.fitted_s * 1e6,
                  r.compute_bound ? "compute" : "memory");
    os << line;
  }
  os << out.c_str() << "\n";
  const std::string text = os.str();
  parse_hardware_profile(text, name + ".yaml");  // loads as written, or this is a bug reported before writing
  return text;
}

}  // namespace moesim
