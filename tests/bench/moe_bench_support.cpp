// Shared pieces of moesim_bench's cases (see moe_bench_support.hpp). Host only.
#include "tests/bench/moe_bench_support.hpp"

#include "tests/bench/moe_bench.hpp"

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "src/cost/hardware_profile.hpp"
#include "src/cost/placement.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "tests/bench/bench_inputs.hpp"

namespace moesim::bench::detail {

using bench::options;

// The Mixtral rule, as the PyTorch reference computes it: softmax over all E, top-k, renormalise.
RouterConfig mixtral_router() {
  RouterConfig cfg;
  cfg.gating = Gating::token_choice;
  cfg.score = ScoreFunction::softmax;
  cfg.pre_softmax = true;
  cfg.renormalize = true;
  return cfg;
}

void sgemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
}

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void set_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

// Records a verification failure: the case reports the error and moesim_bench exits 1.
void fail(State& state, const std::string& what) {
  options().failures += 1;
  state.SkipWithError(what.c_str());
}

// route_omp against route_ref: experts exactly, weights within 1e-6 relative (both evaluate the same
// double formulas; the bound leaves room for a changed summation order before the float rounding).
std::string compare_routing(const Routing& got, const Routing& want) {
  if (got.expert != want.expert) return "experts differ from route_ref";
  if (got.token != want.token || got.kept != want.kept) return "tokens or kept flags differ from route_ref";
  for (size_t i = 0; i < got.weight.size(); ++i) {
    if (std::fabs(static_cast<double>(got.weight[i]) - want.weight[i]) >
        1e-6 * std::max(1.0, std::fabs(static_cast<double>(want.weight[i])))) {
      std::ostringstream os;
      os << "weight " << i << " = " << got.weight[i] << ", route_ref " << want.weight[i];
      return os.str();
    }
  }
  return "";
}

std::string compare_plans(const DispatchPlan& got, const DispatchPlan& want) {
  if (got.counts != want.counts || got.offsets != want.offsets || got.padded_offsets != want.padded_offsets ||
      got.order != want.order || got.row_assignment != want.row_assignment || got.rows != want.rows) {
    return "dispatch plan differs from plan_dispatch_ref";
  }
  return "";
}

// Float tolerance of GEMM outputs against the double references: float32 products summed over
// K <= 2816 terms in a blocked order; |err| <= 2e-4 * (1 + |want|) holds with a wide margin.
std::string compare_floats(const float* got, const std::vector<double>& want, const std::string& what) {
  for (size_t c = 0; c < want.size(); ++c) {
    if (!(std::fabs(got[c] - want[c]) <= 2e-4 * (1.0 + std::fabs(want[c])))) {
      std::ostringstream os;
      os << what << " column " << c << ": " << got[c] << ", reference " << want[c];
      return os.str();
    }
  }
  return "";
}

// Parallel copy of the large-copy ceiling: each thread copies one contiguous chunk.
void parallel_copy(const float* src, float* dst, int64_t n) {
#pragma omp parallel
  {
#ifdef _OPENMP
    const int64_t nt = omp_get_num_threads();
    const int64_t id = omp_get_thread_num();
#else
    const int64_t nt = 1;
    const int64_t id = 0;
#endif
    const int64_t lo = n * id / nt;
    const int64_t hi = n * (id + 1) / nt;
    std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

namespace {

// 512 MiB source and destination, past the last-level cache: at 128 MiB each, the cache of the 2-vCPU Zen 5
// EPYC development machine served part of the copy (74.6 GB/s, against 52-55 GB/s for copies of 256 MiB up),
// a ceiling no phase whose data does not fit the cache can reach.
struct CopyBuffers {
  std::vector<float> src, dst;
  CopyBuffers() : src(kCopyFloats, 1.0f), dst(kCopyFloats, 0.0f) {}
  static constexpr int64_t kCopyFloats = int64_t(128) << 20;
};

CopyBuffers& copy_buffers() {
  static CopyBuffers b;
  return b;
}

}  // namespace

// Large-copy ceiling: bytes read + written per second (Counter "bytes_per_second").
void run_copy_ceiling(State& state) {
  CopyBuffers& b = copy_buffers();
  parallel_copy(b.src.data(), b.dst.data(), CopyBuffers::kCopyFloats);
  if (options().verify && b.dst[CopyBuffers::kCopyFloats - 1] != 1.0f) fail(state, "copy did not copy");
  for (auto _ : state) {
    parallel_copy(b.src.data(), b.dst.data(), CopyBuffers::kCopyFloats);
    benchmark::ClobberMemory();
  }
  const double bytes = 2.0 * CopyBuffers::kCopyFloats * sizeof(float);
  state.counters["bytes"] = bytes;
  state.counters["bytes_per_second"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

// Rows spread over the whole buffer for the sampled GEMM checks.
std::vector<int64_t> sample_rows(int64_t rows, int64_t count) {
  std::vector<int64_t> out;
  if (rows == 0) return out;
  count = std::min(count, rows);
  for (int64_t i = 0; i < count; ++i) out.push_back(i * rows / count);
  out.push_back(rows - 1);
  return out;
}

// Expert of each row of a plan (-1: padding).
std::vector<int> row_expert(const DispatchPlan& plan) {
  std::vector<int> out(static_cast<size_t>(plan.rows), -1);
  for (int e = 0; e < plan.num_experts; ++e) {
    for (int64_t row = plan.padded_offsets[e]; row < plan.padded_offsets[e + 1]; ++row) out[row] = e;
  }
  return out;
}

// Sampled check of a grouped SwiGLU output against swiglu_token_ref (double).
std::string check_swiglu_rows(const ExpertWeights& w, const DispatchPlan& plan, const std::vector<float>& xg,
                              const std::vector<float>& out) {
  const std::vector<int> expert = row_expert(plan);
  std::vector<double> want;
  for (int64_t row : sample_rows(plan.rows, 48)) {
    if (expert[row] < 0 || plan.row_assignment[row] < 0) continue;
    swiglu_token_ref(w, expert[row], xg.data() + row * w.hidden, want);
    const std::string m = compare_floats(out.data() + row * w.hidden, want, "row " + std::to_string(row));
    if (!m.empty()) return m;
  }
  return "";
}

}  // namespace moesim::bench::detail
