// The CUDA backend's benchmark cases (tests/gpu/gpu_bench_cases.hpp) for one shape: route_cuda against
// route_omp, the device plan + gather against a device-to-device copy, the up-projection GEMMs (grouped and
// per expert) against one dense GEMM, the layer against balanced routing; each checked against the CPU path
// (exact integers, NMSE bounds on floats) before it is timed with CUDA events. White-box: drives the backend's
// internals (kernels/cuda/moe_layer_internal.cuh). nvcc; built only into moesim_gpu_bench (scripts/gpu-check.sh).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe_layer_internal.cuh"
#include "kernels/cuda_backend.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "src/common/clock.hpp"
#include "src/common/error.hpp"
#include "src/common/median.hpp"
#include "src/workload/synthetic_logits.hpp"
#include "tests/gpu/gpu_bench_cases.hpp"

namespace moesim {

using cuda_detail::DeviceBuffer;
using cuda_detail::to_device;
using cuda_detail::to_host;

namespace {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
};

Timing summarize(const std::vector<double>& ms) {
  Timing t;
  if (ms.empty()) return t;
  t.median_ms = median(ms);
  t.min_ms = *std::min_element(ms.begin(), ms.end());
  return t;
}

// Device time of f() (CUDA events) over `iterations` runs after `warmup` runs.
template <class F>
Timing time_device(int warmup, int iterations, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  MOESIM_CUDA_CHECK(cudaStreamSynchronize(cuda_detail::stream()));
  cuda_detail::EventTimer timer;
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    timer.start();
    f();
    ms.push_back(timer.stop_s() * 1e3);
  }
  return summarize(ms);
}

// Sum of squared differences over the sum of squared references.
double nmse(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

// NMSE bounds of the benchmark checks against a double reference, by storage type: fp32 rounding only;
// tf32 and fp16 round inputs to 10-11 mantissa bits; bf16 to 8 bits (and the SwiGLU input again).
double gemm_nmse_bound(Dtype d) {
  switch (d) {
    case Dtype::fp32: return 1e-9;
    case Dtype::bf16: return 1e-4;
    default: return 1e-5;
  }
}

// How many rows (tokens) a double-precision host check of `cost` multiply-adds each can afford within
// `budget` multiply-adds (about a second of one core), between 2 and `most`.
int64_t sample_count(double budget, double cost, int64_t most) {
  return std::max<int64_t>(2, std::min<int64_t>(most, static_cast<int64_t>(budget / cost)));
}

std::string verdict(double err, double bound) {
  std::ostringstream os;
  os << (err <= bound ? "ok" : "FAIL") << " (nmse " << err << "; bound " << bound << ")";
  return os.str();
}

// The inputs every case shares: token-choice routing of synthetic logits, seeded weights and hidden states.
struct BenchInputs {
  std::vector<float> logits;
  RouterConfig rc;
  RouteRequest req;  // req.logits points into logits
  ExpertWeights w;
  std::vector<float> x;
};

// ---- router: route_cuda (fused top-k) against route_omp on the host -------------------------
CudaBenchRow bench_router(const CudaBenchConfig& cfg, const BenchInputs& in, const Routing& r) {
  const int64_t n_tok = cfg.num_tokens;
  const Routing host = route_omp(in.rc, in.req, nullptr);
  std::string verified = "ok";
  for (int64_t i = 0; i < host.num_assignments() && verified == "ok"; ++i) {
    if (r.expert[i] != host.expert[i] || r.token[i] != host.token[i] || r.kept[i] != host.kept[i] ||
        std::fabs(r.weight[i] - host.weight[i]) > 1e-6f * std::max(1.0f, std::fabs(host.weight[i]))) {
      verified = "FAIL at assignment " + std::to_string(i);
    }
  }
  const Timing t = time_device(cfg.warmup, cfg.iterations, [&] { route_cuda(in.rc, in.req, nullptr); });
  std::vector<double> host_ms;
  for (int i = 0; i < std::max(1, cfg.iterations / 4); ++i) {
    const auto t0 = Clock::now();
    route_omp(in.rc, in.req, nullptr);
    host_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const Timing h = summarize(host_ms);
  return {"router token_choice", t.median_ms, t.min_ms, n_tok / (t.median_ms * 1e-3), "tokens/s",
          "route_omp (host)", h.median_ms, n_tok / (h.median_ms * 1e-3), verified};
}

// ---- permutation: plan + gather against a device-to-device copy of the gathered bytes --------
CudaBenchRow bench_permutation(const CudaBenchConfig& cfg, const Routing& r, const cuda_detail::DeviceRouting& d,
                               const DeviceBuffer<float>& d_x, const cuda_detail::DevicePlan& plan,
                               DeviceBuffer<float>& xg) {
  const int64_t hidden = cfg.hidden, rows = plan.rows;
  const int num_e = cfg.num_experts;
  const DispatchPlan got = cuda_detail::download_plan(plan, num_e);
  const DispatchPlan want = plan_dispatch_omp(r, Layout::dropless, 1);
  const bool same = got.counts == want.counts && got.offsets == want.offsets &&
                    got.padded_offsets == want.padded_offsets && got.order == want.order &&
                    got.row_assignment == want.row_assignment;
  const Timing t = time_device(cfg.warmup, cfg.iterations, [&] {
    const cuda_detail::DevicePlan p = cuda_detail::build_plan(d, Layout::dropless, 1);
    cuda_detail::launch_gather(d_x.get(), hidden, d.token.get(), p.row_assignment.get(), p.rows, xg.get());
  });
  DeviceBuffer<float> copy(rows * hidden);
  const size_t bytes = static_cast<size_t>(rows * hidden) * sizeof(float);
  const Timing b = time_device(cfg.warmup, cfg.iterations, [&] {
    MOESIM_CUDA_CHECK(
        cudaMemcpyAsync(copy.get(), xg.get(), bytes, cudaMemcpyDeviceToDevice, cuda_detail::stream()));
  });
  const double moved = 2.0 * bytes;  // each gathered byte is read once and written once
  return {"permutation (plan + gather)", t.median_ms, t.min_ms, moved / (t.median_ms * 1e-3) / 1e9,
          "GB/s", "cudaMemcpy D2D", b.median_ms, moved / (b.median_ms * 1e-3) / 1e9,
          same ? "ok" : "FAIL: plan differs from plan_dispatch_omp"};
}

// ---- grouped GEMM (up-projection W1|W3) against one dense GEMM of the same total size ------------
// xg: the gathered rows of plan; appends one row per GEMM path.
void bench_expert_gemm(const CudaBenchConfig& cfg, const BenchInputs& in, const Routing& r,
                       const cuda_detail::DevicePlan& plan, const DeviceBuffer<float>& xg,
                       std::vector<CudaBenchRow>& rows_out) {
  const int64_t hidden = cfg.hidden, ffn = cfg.ffn, rows = plan.rows;
  const int num_e = cfg.num_experts;
  std::unique_ptr<cuda_detail::LayerCore> core = cuda_detail::make_layer(in.w, nullptr, cfg.dtype, CudaGemmPath::grouped);
  const size_t esz = core->storage_bytes();
  DeviceBuffer<unsigned char> xg_t(rows * hidden * esz), h13(rows * 2 * ffn * esz);
  core->to_storage(xg.get(), xg_t.get(), rows * hidden);
  const double flops = 2.0 * rows * hidden * 2 * ffn;
  const Timing dense = time_device(cfg.warmup, cfg.iterations, [&] { core->dense_up_projection(xg_t.get(), rows, h13.get()); });
  for (CudaGemmPath path : {CudaGemmPath::grouped, CudaGemmPath::per_expert}) {
    // Check 64 rows spread over the buffer against a double reference of the float inputs.
    core->up_projection(xg_t.get(), plan.padded_offsets_host, h13.get(), path);
    DeviceBuffer<float> h13_f(rows * 2 * ffn);
    core->from_storage(h13.get(), h13_f.get(), rows * 2 * ffn);
    const std::vector<float> got_all = to_host(h13_f.get(), h13_f.size());
    const DispatchPlan host_plan = cuda_detail::download_plan(plan, num_e);
    std::vector<double> got, ref;
    const int64_t samples = std::min<int64_t>(rows, sample_count(1e9, 2.0 * ffn * hidden, 64));
    for (int64_t i = 0; i < samples; ++i) {
      const int64_t row = i * rows / samples;
      const int e = static_cast<int>(std::upper_bound(host_plan.padded_offsets.begin(), host_plan.padded_offsets.end(), row) -
                                     host_plan.padded_offsets.begin()) - 1;
      const float* xr = in.x.data() + static_cast<int64_t>(r.token[host_plan.row_assignment[row]]) * hidden;
      for (int64_t j = 0; j < 2 * ffn; ++j) {
        const std::vector<float>& wm = j < ffn ? in.w.w1 : in.w.w3;
        const int64_t col = j < ffn ? j : j - ffn;
        double acc = 0;
        for (int64_t c = 0; c < hidden; ++c) acc += static_cast<double>(xr[c]) * wm[(e * hidden + c) * ffn + col];
        ref.push_back(acc);
        got.push_back(got_all[row * 2 * ffn + j]);
      }
    }
    const Timing t = time_device(cfg.warmup, cfg.iterations,
                                 [&] { core->up_projection(xg_t.get(), plan.padded_offsets_host, h13.get(), path); });
    const bool grouped = path == CudaGemmPath::grouped;
    rows_out.push_back({std::string("expert GEMM ") + (grouped ? (cuda_grouped_gemm_available()
                                                                       ? "grouped (GemmGroupedBatchedEx)"
                                                                       : "grouped (fallback loop)")
                                                                 : "per-expert GemmEx loop") +
                            " " + to_string(cfg.dtype),
                        t.median_ms, t.min_ms, flops / (t.median_ms * 1e-3) / 1e12, "TFLOP/s",
                        "one dense GEMM (same FLOPs)", dense.median_ms, flops / (dense.median_ms * 1e-3) / 1e12,
                        verdict(nmse(got, ref), gemm_nmse_bound(cfg.dtype))});
  }
}

// ---- the whole layer, against the same layer under balanced routing -------------------------
CudaBenchRow bench_layer(const CudaBenchConfig& cfg, const BenchInputs& in) {
  const int64_t n_tok = cfg.num_tokens, hidden = cfg.hidden, ffn = cfg.ffn;
  CudaMoeLayer layer(in.w, nullptr, cfg.dtype, CudaGemmPath::grouped);
  std::vector<float> y(static_cast<size_t>(n_tok * hidden));
  const CudaLayerOutput first = layer.forward(in.rc, in.req, nullptr, in.x.data(), y.data());
  std::vector<double> got, ref;
  std::vector<double> expert_out;
  const int64_t samples = std::min<int64_t>(n_tok, sample_count(2e9, 3.0 * hidden * ffn * cfg.top_k, 8));
  for (int64_t i = 0; i < samples; ++i) {
    const int64_t t = i * n_tok / samples;
    std::vector<double> acc(hidden, 0.0);
    for (int64_t a = 0; a < first.routing.num_assignments(); ++a) {
      if (first.routing.token[a] != t || !first.routing.kept[a]) continue;
      swiglu_token_ref(in.w, first.routing.expert[a], in.x.data() + t * hidden, expert_out);
      for (int64_t c = 0; c < hidden; ++c) acc[c] += static_cast<double>(first.routing.weight[a]) * expert_out[c];
    }
    for (int64_t c = 0; c < hidden; ++c) {
      ref.push_back(acc[c]);
      got.push_back(y[t * hidden + c]);
    }
  }
  // The layer rounds the SwiGLU input and the expert outputs to the storage type as well.
  const double bound = cfg.dtype == Dtype::fp32 ? 1e-8 : (cfg.dtype == Dtype::bf16 ? 1e-3 : 1e-4);
  auto run_layer = [&](const RouterConfig& c) {
    std::vector<double> ms;
    for (int i = 0; i < cfg.warmup; ++i) layer.forward(c, in.req, nullptr, in.x.data(), y.data());
    for (int i = 0; i < cfg.iterations; ++i) ms.push_back(layer.forward(c, in.req, nullptr, in.x.data(), y.data()).times.layer_s * 1e3);
    return summarize(ms);
  };
  RouterConfig balanced = in.rc;
  balanced.gating = Gating::balanced;
  const Timing t = run_layer(in.rc);
  const Timing b = run_layer(balanced);
  return {std::string("MoE layer (route + dispatch + SwiGLU + combine) ") + to_string(cfg.dtype),
          t.median_ms, t.min_ms, n_tok / (t.median_ms * 1e-3), "tokens/s", "same layer (balanced routing)",
          b.median_ms, n_tok / (b.median_ms * 1e-3), verdict(nmse(got, ref), bound)};
}

}  // namespace

std::vector<CudaBenchRow> run_cuda_benchmarks(const CudaBenchConfig& cfg) {
  MOESIM_REQUIRE(cfg.num_tokens >= 1 && cfg.num_experts >= 1 && cfg.top_k >= 1 && cfg.top_k <= cfg.num_experts &&
                     cfg.hidden >= 1 && cfg.ffn >= 1 && cfg.iterations >= 1 && cfg.warmup >= 0,
                 "benchmark shape needs tokens, experts, hidden, ffn, iterations >= 1 and 1 <= top_k <= experts");
  MOESIM_REQUIRE(cuda_supports_dtype(cfg.dtype), "the CUDA experts do not support " << to_string(cfg.dtype));
  cuda_detail::require_device();
  const int64_t n_tok = cfg.num_tokens, hidden = cfg.hidden, ffn = cfg.ffn;
  const int num_e = cfg.num_experts;

  BenchInputs in;
  in.logits = synthetic_logits(n_tok, num_e, cfg.skew, cfg.seed);
  in.rc.gating = Gating::token_choice;
  in.req.logits = in.logits.data();
  in.req.num_tokens = n_tok;
  in.req.num_experts = num_e;
  in.req.top_k = cfg.top_k;
  in.req.seed = cfg.seed;
  in.w = make_expert_weights(num_e, hidden, ffn, cfg.seed);
  in.x = synthetic_hidden(n_tok, hidden, cfg.seed + 1);
  std::vector<CudaBenchRow> rows_out;

  const Routing r = route_cuda(in.rc, in.req, nullptr);
  rows_out.push_back(bench_router(cfg, in, r));

  const cuda_detail::DeviceRouting d = cuda_detail::upload_routing(r);
  const DeviceBuffer<float> d_x = to_device(in.x);
  const cuda_detail::DevicePlan plan = cuda_detail::build_plan(d, Layout::dropless, 1);
  DeviceBuffer<float> xg(plan.rows * hidden);
  rows_out.push_back(bench_permutation(cfg, r, d, d_x, plan, xg));
  cuda_detail::launch_gather(d_x.get(), hidden, d.token.get(), plan.row_assignment.get(), plan.rows, xg.get());

  bench_expert_gemm(cfg, in, r, plan, xg, rows_out);
  rows_out.push_back(bench_layer(cfg, in));
  return rows_out;
}

}  // namespace moesim
