// The executed MoE layer on the CUDA backend and the backend's public entry points (kernels/cuda_backend.hpp)
// for dispatch, gather, combine, the grouped experts, the layer with CUDA-event phase times and the device
// measurements of `moesim calibrate`. x, y: [num_tokens, hidden] float32 host memory on the API side.
// Integer plans equal plan_dispatch_omp's; combine equals combine_omp's bit for bit. nvcc only.
// Tests: tests/gpu/{cuda_backend,dispatch,experts,layer}_cuda_test.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe_layer_internal.cuh"
#include "kernels/cuda_backend.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "src/common/error.hpp"
#include "src/common/median.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace cuda_detail {

// ================================================================================================
// The layer: gather -> grouped SwiGLU (+ shared experts) -> combine, with CUDA-event phase marks
// ================================================================================================

template <class T>
class TypedLayer final : public LayerCore {
 public:
  TypedLayer(const ExpertWeights& w, const ExpertWeights* shared, Dtype dtype, CudaGemmPath path)
      : routed_(upload_experts<T>(w)), spec_(gemm_spec(dtype)), path_(path) {
    if (shared != nullptr && shared->num_experts > 0) {
      MOESIM_REQUIRE(shared->hidden == w.hidden && shared->ffn == w.ffn,
                     "shared experts are " << shared->hidden << " x " << shared->ffn << ", routed experts "
                                           << w.hidden << " x " << w.ffn);
      shared_ = upload_experts<T>(*shared);
    }
  }

  int64_t hidden() const override { return routed_.hidden; }
  int num_experts() const override { return routed_.num_experts; }
  size_t storage_bytes() const override { return sizeof(T); }
  void to_storage(const float* in, void* out, int64_t n) const override {
    launch_convert(in, static_cast<T*>(out), n);
  }
  void from_storage(const void* in, float* out, int64_t n) const override {
    launch_convert(static_cast<const T*>(in), out, n);
  }

  void run(const DeviceRouting& d, const int32_t* row_assignment, const std::vector<int64_t>& padded_offsets,
           const float* x, float* y, PhaseMarks* marks) override {
    const int64_t hidden = routed_.hidden, ffn = routed_.ffn;
    const int num_e = routed_.num_experts;
    const int64_t n_tok = d.num_tokens;
    const int64_t rows = padded_offsets[num_e];
    const int num_shared = shared_.num_experts;

    DeviceBuffer<T> xg(rows * hidden);
    launch_gather(x, hidden, d.token.get(), row_assignment, rows, xg.get());
    if (marks) marks->mark();

    // Routed segments, then one segment of all tokens per shared expert, in one grouped call per stage.
    const int64_t total_rows = rows + static_cast<int64_t>(num_shared) * n_tok;
    DeviceBuffer<T> x_shared(num_shared > 0 ? n_tok * hidden : 0);
    if (num_shared > 0) launch_convert(x, x_shared.get(), n_tok * hidden);
    std::vector<Segment<T>> segs;
    for (int e = 0; e < num_e; ++e) {
      const int64_t r0 = padded_offsets[e];
      segs.push_back({xg.get() + r0 * hidden, r0, padded_offsets[e + 1] - r0,
                      routed_.w13.get() + static_cast<int64_t>(e) * hidden * 2 * ffn,
                      routed_.w2.get() + static_cast<int64_t>(e) * ffn * hidden});
    }
    for (int s = 0; s < num_shared; ++s) {
      segs.push_back({x_shared.get(), rows + static_cast<int64_t>(s) * n_tok, n_tok,
                      shared_.w13.get() + static_cast<int64_t>(s) * hidden * 2 * ffn,
                      shared_.w2.get() + static_cast<int64_t>(s) * ffn * hidden});
    }
    DeviceBuffer<T> h13(total_rows * 2 * ffn);
    DeviceBuffer<T> h(total_rows * ffn);
    DeviceBuffer<T> out(total_rows * hidden);
    run_swiglu_segments(segs, hidden, ffn, h13.get(), h.get(), out.get(), total_rows, spec_, path_);
    DeviceBuffer<float> shared_sum(num_shared > 0 ? n_tok * hidden : 0);
    if (num_shared > 0 && n_tok > 0) {
      launch_sum_shared(out.get() + rows * hidden, num_shared, n_tok * hidden, shared_sum.get());
    }
    if (marks) marks->mark();

    const DeviceTokenIndex ix = build_token_index_device(d, row_assignment, rows);
    launch_combine(out.get(), num_shared > 0 ? shared_sum.get() : nullptr, d.weight.get(), d.kept.get(),
                   ix.token_assign.get(), ix.token_offsets.get(), ix.assignment_row.get(), n_tok, hidden, y);
    if (marks) marks->mark();
  }

  void up_projection(const void* xg, const std::vector<int64_t>& padded_offsets, void* h13,
                     CudaGemmPath path) override {
    const int64_t hidden = routed_.hidden, ffn = routed_.ffn;
    std::vector<GemmProblem> up;
    for (int e = 0; e < routed_.num_experts; ++e) {
      const int64_t r0 = padded_offsets[e];
      up.push_back({padded_offsets[e + 1] - r0, 2 * ffn, hidden, static_cast<const T*>(xg) + r0 * hidden,
                    routed_.w13.get() + static_cast<int64_t>(e) * hidden * 2 * ffn,
                    static_cast<T*>(h13) + r0 * 2 * ffn});
    }
    run_gemms(up, spec_, path);
  }

  void expert_swiglu(int expert, const void* x, int64_t rows, void* h13, void* h, void* out) override {
    const int64_t hidden = routed_.hidden, ffn = routed_.ffn;
    const std::vector<Segment<T>> segs = {{static_cast<const T*>(x), 0, rows,
                                           routed_.w13.get() + static_cast<int64_t>(expert) * hidden * 2 * ffn,
                                           routed_.w2.get() + static_cast<int64_t>(expert) * ffn * hidden}};
    run_swiglu_segments(segs, hidden, ffn, static_cast<T*>(h13), static_cast<T*>(h), static_cast<T*>(out), rows,
                        spec_, path_);
  }

  void dense_up_projection(const void* xg, int64_t rows, void* h13) override {
    run_gemms({{rows, 2 * routed_.ffn, routed_.hidden, xg, routed_.w13.get(), h13}}, spec_,
              CudaGemmPath::per_expert);
  }

 private:
  DeviceExperts<T> routed_;
  DeviceExperts<T> shared_;  // num_experts 0: none
  GemmSpec spec_;
  CudaGemmPath path_;
};

std::unique_ptr<LayerCore> make_layer(const ExpertWeights& w, const ExpertWeights* shared, Dtype dtype,
                                      CudaGemmPath path) {
  require_device();
  std::unique_ptr<LayerCore> core;
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    core = std::make_unique<TypedLayer<T>>(w, shared, dtype, path);
  });
  return core;
}

}  // namespace cuda_detail

// ================================================================================================
// Public API (kernels/cuda_backend.hpp)
// ================================================================================================

inline namespace MOESIM_CUDA_API_NS {

using cuda_detail::DeviceBuffer;
using cuda_detail::to_device;
using cuda_detail::to_host;

bool cuda_device_available(std::string* why) {
  const std::string& problem = cuda_detail::cached_device_problem();
  if (why != nullptr) *why = problem;
  return problem.empty();
}

std::string cuda_device_description() {
  cuda_detail::require_device();
  int device = 0, runtime = 0;
  cudaDeviceProp prop{};
  MOESIM_CUDA_CHECK(cudaGetDevice(&device));
  MOESIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  MOESIM_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::ostringstream os;
  os << prop.name << " (sm_" << prop.major << prop.minor << ", "
     << static_cast<int64_t>(prop.totalGlobalMem / (1024.0 * 1024 * 1024) + 0.5) << " GiB, CUDA runtime "
     << runtime / 1000 << "." << (runtime % 1000) / 10 << ")";
  return os.str();
}

bool cuda_grouped_gemm_available() { return cuda_detail::grouped_gemm_compiled(); }

bool cuda_supports_dtype(Dtype dtype) {
  return dtype == Dtype::fp32 || dtype == Dtype::tf32 || dtype == Dtype::bf16 || dtype == Dtype::fp16;
}

DispatchPlan plan_dispatch_cuda(const Routing& r, Layout layout, int block_size) {
  require_valid_routing(r);
  MOESIM_REQUIRE(layout != Layout::block || block_size >= 1, "block layout needs block_size >= 1, got " << block_size);
  cuda_detail::require_device();
  const cuda_detail::DeviceRouting d = cuda_detail::upload_routing(r);
  const cuda_detail::DevicePlan p = cuda_detail::build_plan(d, layout, block_size);
  return cuda_detail::download_plan(p, r.num_experts);
}

void gather_rows_cuda(const float* x, int64_t hidden, const Routing& r, const DispatchPlan& plan, float* xg) {
  MOESIM_REQUIRE(hidden >= 1, "gather needs hidden >= 1, got " << hidden);
  require_valid_routing(r);
  require_plan_matches(r, plan);
  cuda_detail::require_device();
  const DeviceBuffer<float> d_x = to_device(x, static_cast<size_t>(r.num_tokens * hidden));
  const DeviceBuffer<int32_t> d_token = to_device(r.token);
  const DeviceBuffer<int32_t> d_rows = to_device(plan.row_assignment);
  DeviceBuffer<float> d_xg(plan.rows * hidden);
  cuda_detail::launch_gather(d_x.get(), hidden, d_token.get(), d_rows.get(), plan.rows, d_xg.get());
  cuda_detail::copy_to_host(xg, d_xg.get(), d_xg.size());
}

void combine_cuda(const Routing& r, const DispatchPlan& plan, const float* expert_out, const float* shared_out,
                  int64_t hidden, float* y) {
  MOESIM_REQUIRE(hidden >= 1, "combine needs hidden >= 1, got " << hidden);
  require_valid_routing(r);
  require_plan_matches(r, plan);
  cuda_detail::require_device();
  const cuda_detail::DeviceRouting d = cuda_detail::upload_routing(r);
  const DeviceBuffer<int32_t> d_rows = to_device(plan.row_assignment);
  const DeviceBuffer<float> d_out = to_device(expert_out, static_cast<size_t>(plan.rows * hidden));
  const DeviceBuffer<float> d_shared =
      shared_out ? to_device(shared_out, static_cast<size_t>(r.num_tokens * hidden)) : DeviceBuffer<float>();
  DeviceBuffer<float> d_y(r.num_tokens * hidden);
  const cuda_detail::DeviceTokenIndex ix = cuda_detail::build_token_index_device(d, d_rows.get(), plan.rows);
  cuda_detail::launch_combine(d_out.get(), shared_out ? d_shared.get() : nullptr, d.weight.get(), d.kept.get(),
                              ix.token_assign.get(), ix.token_offsets.get(), ix.assignment_row.get(), r.num_tokens,
                              hidden, d_y.get());
  cuda_detail::copy_to_host(y, d_y.get(), d_y.size());
}

void grouped_gemm_cuda(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k, int64_t n,
                       float* c, Dtype dtype, CudaGemmPath path) {
  MOESIM_REQUIRE(num_groups >= 0 && offsets != nullptr && offsets[0] == 0,
                 "grouped GEMM needs num_groups >= 0 and offsets starting at 0");
  for (int g = 0; g < num_groups; ++g) {
    MOESIM_REQUIRE(offsets[g + 1] >= offsets[g], "offsets must be non-decreasing (group " << g << ")");
  }
  MOESIM_REQUIRE(k >= 1 && n >= 1, "grouped GEMM needs k, n >= 1, got k=" << k << " n=" << n);
  const cuda_detail::GemmSpec spec = cuda_detail::gemm_spec(dtype);
  cuda_detail::require_device();
  const int64_t rows = offsets[num_groups];
  if (rows == 0) return;
  const DeviceBuffer<float> d_a = to_device(a, static_cast<size_t>(rows * k));
  const DeviceBuffer<float> d_b = to_device(b, static_cast<size_t>(num_groups) * k * n);
  DeviceBuffer<float> d_c(rows * n);
  cuda_detail::with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    DeviceBuffer<T> ta(d_a.size()), tb(d_b.size()), tc(d_c.size());
    cuda_detail::launch_convert(d_a.get(), ta.get(), d_a.size());
    cuda_detail::launch_convert(d_b.get(), tb.get(), d_b.size());
    std::vector<cuda_detail::GemmProblem> probs;
    for (int g = 0; g < num_groups; ++g) {
      probs.push_back({offsets[g + 1] - offsets[g], n, k, ta.get() + offsets[g] * k,
                       tb.get() + static_cast<int64_t>(g) * k * n, tc.get() + offsets[g] * n});
    }
    cuda_detail::run_gemms(probs, spec, path);
    cuda_detail::launch_convert(tc.get(), d_c.get(), d_c.size());
  });
  cuda_detail::copy_to_host(c, d_c.get(), d_c.size());
}

void grouped_swiglu_cuda(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out, Dtype dtype,
                         CudaGemmPath path) {
  require_valid_weights(w);
  MOESIM_REQUIRE(offsets != nullptr && offsets[0] == 0, "offsets must start at 0");
  for (int e = 0; e < w.num_experts; ++e) {
    MOESIM_REQUIRE(offsets[e + 1] >= offsets[e], "offsets must be non-decreasing (expert " << e << ")");
  }
  const cuda_detail::GemmSpec spec = cuda_detail::gemm_spec(dtype);
  cuda_detail::require_device();
  const int64_t rows = offsets[w.num_experts];
  if (rows == 0) return;
  const int64_t hidden = w.hidden, ffn = w.ffn;
  const DeviceBuffer<float> d_x = to_device(xg, static_cast<size_t>(rows * hidden));
  DeviceBuffer<float> d_out(rows * hidden);
  cuda_detail::with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    const cuda_detail::DeviceExperts<T> ex = cuda_detail::upload_experts<T>(w);
    DeviceBuffer<T> tx(d_x.size()), h13(rows * 2 * ffn), h(rows * ffn), tout(rows * hidden);
    cuda_detail::launch_convert(d_x.get(), tx.get(), d_x.size());
    std::vector<cuda_detail::Segment<T>> segs;
    for (int e = 0; e < w.num_experts; ++e) {
      segs.push_back({tx.get() + offsets[e] * hidden, offsets[e], offsets[e + 1] - offsets[e],
                      ex.w13.get() + static_cast<int64_t>(e) * hidden * 2 * ffn,
                      ex.w2.get() + static_cast<int64_t>(e) * ffn * hidden});
    }
    cuda_detail::run_swiglu_segments(segs, hidden, ffn, h13.get(), h.get(), tout.get(), rows, spec, path);
    cuda_detail::launch_convert(tout.get(), d_out.get(), d_out.size());
  });
  cuda_detail::copy_to_host(out, d_out.get(), d_out.size());
}

struct CudaMoeLayer::Impl {
  std::unique_ptr<cuda_detail::LayerCore> core;
  Dtype dtype;
};

CudaMoeLayer::CudaMoeLayer(const ExpertWeights& w, const ExpertWeights* shared, Dtype dtype, CudaGemmPath path)
    : impl_(std::make_unique<Impl>(Impl{cuda_detail::make_layer(w, shared, dtype, path), dtype})) {}
CudaMoeLayer::~CudaMoeLayer() = default;
CudaMoeLayer::CudaMoeLayer(CudaMoeLayer&&) noexcept = default;
CudaMoeLayer& CudaMoeLayer::operator=(CudaMoeLayer&&) noexcept = default;

int64_t CudaMoeLayer::hidden() const { return impl_->core->hidden(); }
Dtype CudaMoeLayer::dtype() const { return impl_->dtype; }

CudaLayerOutput CudaMoeLayer::forward(const RouterConfig& cfg, const RouteRequest& req, RouterState* state,
                                      const float* x, float* y) {
  cuda_detail::LayerCore& core = *impl_->core;
  MOESIM_REQUIRE(req.num_experts == core.num_experts(),
                 "request has " << req.num_experts << " experts, the layer " << core.num_experts());
  MOESIM_REQUIRE(cfg.layout != Layout::block || cfg.block_size >= 1,
                 "block layout needs block_size >= 1, got " << cfg.block_size);
  const int64_t hidden = core.hidden();
  const DeviceBuffer<float> d_x = to_device(x, static_cast<size_t>(req.num_tokens * hidden));
  DeviceBuffer<float> d_y(req.num_tokens * hidden);

  cuda_detail::PhaseMarks marks;
  marks.mark();
  CudaLayerOutput out;
  out.routing = route_cuda(cfg, req, state);
  marks.mark();
  require_valid_routing(out.routing);
  const cuda_detail::DeviceRouting d = cuda_detail::upload_routing(out.routing);
  const cuda_detail::DevicePlan p = cuda_detail::build_plan(d, cfg.layout, cfg.block_size);
  core.run(d, p.row_assignment.get(), p.padded_offsets_host, d_x.get(), d_y.get(), &marks);
  out.times.router_s = marks.seconds(0, 1);
  out.times.dispatch_s = marks.seconds(1, 2);
  out.times.experts_s = marks.seconds(2, 3);
  out.times.combine_s = marks.seconds(3, 4);
  out.times.layer_s = marks.seconds(0, 4);
  out.plan = cuda_detail::download_plan(p, req.num_experts);
  cuda_detail::copy_to_host(y, d_y.get(), d_y.size());
  return out;
}

void CudaMoeLayer::forward_routed(const float* x, const Routing& r, const DispatchPlan& plan, float* y,
                                  MoePhaseTimes* times) {
  cuda_detail::LayerCore& core = *impl_->core;
  require_valid_routing(r);
  MOESIM_REQUIRE(r.num_experts == core.num_experts(),
                 "routing has " << r.num_experts << " experts, the layer " << core.num_experts());
  require_plan_matches(r, plan);
  const int64_t hidden = core.hidden();
  const DeviceBuffer<float> d_x = to_device(x, static_cast<size_t>(r.num_tokens * hidden));
  DeviceBuffer<float> d_y(r.num_tokens * hidden);
  const cuda_detail::DeviceRouting d = cuda_detail::upload_routing(r);
  const DeviceBuffer<int32_t> d_rows = to_device(plan.row_assignment);
  cuda_detail::PhaseMarks marks;
  marks.mark();
  core.run(d, d_rows.get(), plan.padded_offsets, d_x.get(), d_y.get(), &marks);
  if (times != nullptr) {
    times->dispatch_s = marks.seconds(0, 1);
    times->experts_s = marks.seconds(1, 2);
    times->combine_s = marks.seconds(2, 3);
  }
  cuda_detail::copy_to_host(y, d_y.get(), d_y.size());
}

void moe_forward_cuda(const ExpertWeights& w, const ExpertWeights* shared, const float* x, const Routing& r,
                      const DispatchPlan& plan, float* y, MoePhaseTimes* times, Dtype dtype) {
  CudaMoeLayer layer(w, shared, dtype);
  layer.forward_routed(x, r, plan, y, times);
}

CudaLayerTimes time_layer_cuda(const RouterConfig& cfg, const RouteRequest& req, const ExpertWeights& w,
                               const ExpertWeights* shared, Dtype dtype, const float* x, float* y, int repeats,
                               Routing* routing_out, std::vector<CudaLayerTimes>* per_repeat) {
  MOESIM_REQUIRE(repeats >= 0, "repeats must be >= 0, got " << repeats);
  CudaMoeLayer layer(w, shared, dtype);
  std::vector<double> t_router, t_dispatch, t_experts, t_combine, t_layer;
  if (per_repeat != nullptr) per_repeat->clear();
  for (int rep = -1; rep < repeats; ++rep) {
    RouterState state;
    CudaLayerOutput out = layer.forward(cfg, req, &state, x, y);
    if (rep >= 0) {
      if (per_repeat != nullptr) per_repeat->push_back(out.times);
      t_router.push_back(out.times.router_s);
      t_dispatch.push_back(out.times.dispatch_s);
      t_experts.push_back(out.times.experts_s);
      t_combine.push_back(out.times.combine_s);
      t_layer.push_back(out.times.layer_s);
    }
    if (routing_out != nullptr) *routing_out = std::move(out.routing);
  }
  CudaLayerTimes t;
  t.router_s = median(t_router);
  t.dispatch_s = median(t_dispatch);
  t.experts_s = median(t_experts);
  t.combine_s = median(t_combine);
  t.layer_s = median(t_layer);
  return t;
}

// ================================================================================================
// Device measurements
// ================================================================================================

}  // inline namespace MOESIM_CUDA_API_NS

namespace cuda_detail {

__global__ void empty_kernel() {}

}  // namespace cuda_detail

inline namespace MOESIM_CUDA_API_NS {

CudaMeasurements measure_cuda_device(const CudaMeasureConfig& cfg) {
  MOESIM_REQUIRE(cfg.hidden >= 1 && cfg.ffn >= 1 && cfg.repeats >= 1 && cfg.copy_bytes >= 4,
                 "measurements need hidden, ffn, repeats >= 1 and copy_bytes >= 4");
  MOESIM_REQUIRE(!cfg.expert_rows.empty(), "measurements need at least one entry in expert_rows");
  for (int64_t n : cfg.expert_rows) MOESIM_REQUIRE(n >= 1, "expert_rows must be >= 1, got " << n);
  MOESIM_REQUIRE(cuda_supports_dtype(cfg.dtype), "the CUDA experts do not support " << to_string(cfg.dtype));
  cuda_detail::require_device();
  CudaMeasurements m;
  m.device = cuda_device_description();
  m.dtype = cfg.dtype;
  auto median_s = [&](auto&& f) {
    cuda_detail::EventTimer timer;
    f();  // warm-up
    std::vector<double> s;
    for (int i = 0; i < cfg.repeats; ++i) {
      timer.start();
      f();
      s.push_back(timer.stop_s());
    }
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  };

  {
    const size_t n = static_cast<size_t>(cfg.copy_bytes) / sizeof(float);
    DeviceBuffer<float> src(n), dst(n);
    MOESIM_CUDA_CHECK(cudaMemsetAsync(src.get(), 0, n * sizeof(float), cuda_detail::stream()));
    const double t = median_s([&] {
      MOESIM_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                                        cuda_detail::stream()));
    });
    m.copy_bandwidth_bytes_per_s = 2.0 * n * sizeof(float) / t;
  }
  m.launch_overhead_s = median_s([] {
    cuda_detail::empty_kernel<<<1, 1, 0, cuda_detail::stream()>>>();
    MOESIM_CUDA_LAUNCH_CHECK(empty_kernel);
  });

  // Expert 0 of a one-expert layer on n rows: the layer's own GEMM calls and SwiGLU kernel.
  const ExpertWeights w = make_expert_weights(1, cfg.hidden, cfg.ffn, 11);
  std::unique_ptr<cuda_detail::LayerCore> core =
      cuda_detail::make_layer(w, nullptr, cfg.dtype, CudaGemmPath::per_expert);
  const int64_t most = *std::max_element(cfg.expert_rows.begin(), cfg.expert_rows.end());
  const size_t esz = core->storage_bytes();
  const DeviceBuffer<float> x_f = to_device(synthetic_hidden(most, cfg.hidden, 12));
  DeviceBuffer<unsigned char> x(most * cfg.hidden * esz), h13(most * 2 * cfg.ffn * esz), h(most * cfg.ffn * esz),
      out(most * cfg.hidden * esz);
  core->to_storage(x_f.get(), x.get(), most * cfg.hidden);
  for (int64_t n : cfg.expert_rows) {
    CudaExpertTiming e;
    e.rows = n;
    e.seconds = median_s([&] { core->expert_swiglu(0, x.get(), n, h13.get(), h.get(), out.get()); });
    e.flops_per_s = 6.0 * n * cfg.hidden * cfg.ffn / e.seconds;
    e.weight_bytes_per_s = 3.0 * cfg.hidden * cfg.ffn * esz / e.seconds;
    m.expert.push_back(e);
  }
  return m;
}

}  // inline namespace MOESIM_CUDA_API_NS

}  // namespace moesim
