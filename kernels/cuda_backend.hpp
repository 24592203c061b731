// The CUDA backend's host API: router, dispatch plan, gather, grouped GEMM/SwiGLU experts (cuBLAS), combine,
// the whole layer with CUDA-event phase times, device measurements and KV-cache attention. Host memory in
// and out unless a name ends in _device. Integer outputs equal the OpenMP path's exactly; floats within
// the tolerances written in tests/gpu. Plain C++ (no CUDA types): g++ code includes it under
// #if MOESIM_HAS_CUDA; implemented by kernels/cuda/*.cu (nvcc), which build the module libmoesim_cuda.so that
// the host side loads on first use (kernels/cuda_backend_module.hpp). Tests: tests/gpu/*_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "kernels/moe_layer.hpp"
#include "router/gating_common.hpp"
#include "router/route.hpp"
#include "router/routing.hpp"

#if defined(MOESIM_CUDA_BACKEND_IMPL)
#define MOESIM_CUDA_API_NS device_impl
#else
#define MOESIM_CUDA_API_NS host_api
#endif

namespace moesim {

// ---- the types of the API ----------------------------------------------------------------------
// grouped: one cublasGemmGroupedBatchedEx call (cuBLAS >= 12.5; older builds fall back to per_expert);
// per_expert: one cublasGemmEx per non-empty expert, spread over 4 side streams (forked from and joined
// back to the calling thread's stream with events) so that small experts overlap.
enum class CudaGemmPath { grouped, per_expert };

// Phase times of one CudaMoeLayer::forward, in seconds, from CUDA events on the device timeline.
struct CudaLayerTimes {
  double router_s = 0;    // logits upload, gating, capacity, Routing download
  double dispatch_s = 0;  // permutation plan (sort, counts, offsets, padding) and gather
  double experts_s = 0;   // routed grouped SwiGLU and shared experts
  double combine_s = 0;   // token index, weighted un-permute
  double layer_s = 0;     // all of the above, end to end
};

struct CudaLayerOutput {
  Routing routing;     // what route_omp returns for the same inputs
  DispatchPlan plan;   // what plan_dispatch_omp(routing, cfg.layout, cfg.block_size) returns
  CudaLayerTimes times;
};

// What measure_cuda_device times (a calibrated profile of the device).
struct CudaMeasureConfig {
  Dtype dtype = Dtype::bf16;                     // expert storage (cuda_supports_dtype)
  int64_t hidden = 4096;                         // expert shape of the per-expert timings
  int64_t ffn = 14336;
  std::vector<int64_t> expert_rows = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  int64_t copy_bytes = int64_t(1) << 30;         // buffer of the device-to-device copy
  int repeats = 10;                              // timed runs per figure (the median is kept)
};

// One SwiGLU expert (up-projection [n, hidden] x [hidden, 2 ffn], SwiGLU, down-projection) on n rows.
struct CudaExpertTiming {
  int64_t rows = 0;
  double seconds = 0;       // median of the timed runs, CUDA events
  double flops_per_s = 0;   // 6 n hidden ffn / seconds
  double weight_bytes_per_s = 0;  // 3 hidden ffn elem_bytes / seconds (the weight stream)
};

struct CudaMeasurements {
  std::string device;                       // cuda_device_description()
  Dtype dtype = Dtype::bf16;
  double copy_bandwidth_bytes_per_s = 0;    // (read + written bytes) / time of a device-to-device copy
  double launch_overhead_s = 0;             // an empty kernel, launch to completion, median
  std::vector<CudaExpertTiming> expert;     // per entry of expert_rows: the measured t(n)
};

// The functions and the layer below are one inline namespace: `host_api` in every g++ translation unit,
// where src/pipeline/cuda_backend_loader.cpp implements them by calling the backend module
// (libmoesim_cuda.so, loaded on first use), and `device_impl` in the nvcc translation units of
// kernels/cuda (MOESIM_CUDA_BACKEND_IMPL), which are the module. Callers write moesim::route_cuda either way.
inline namespace MOESIM_CUDA_API_NS {

// ---- device ------------------------------------------------------------------------------------
// True when a CUDA device can be used; otherwise false with the reason in *why (when non-null), e.g.
// "cudaGetDeviceCount: cudaErrorNoDevice (no CUDA-capable device is detected)". Never throws.
bool cuda_device_available(std::string* why);

// "NVIDIA H200 (sm_90, 140 GiB, CUDA runtime 13.0)"; throws ResourceError without a device.
std::string cuda_device_description();

// ---- router ------------------------------------------------------------------------------------
// route_with (router/route_driver.hpp) on the CUDA policy; token_choice runs the fused kernel below.
// Same contract as route_omp: identical integers, weights within 1e-6 relative (device exp may differ
// from the host libm in the last bit of a double). Logits are uploaded and the Routing downloaded.
Routing route_cuda(const RouterConfig& cfg, const RouteRequest& req, RouterState* state);

// The fused softmax + top-k kernel alone (one warp per token row; ties to the lower expert index).
// logits: [num_tokens, num_experts]; expert, weight: [num_tokens * top_k] token-major, host memory.
void token_choice_topk_cuda(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                            const GateWeightRule& rule, int32_t* expert, float* weight);

// ---- dispatch ----------------------------------------------------------------------------------
// plan_dispatch_omp on the device: CUB radix sort over ceil(log2(E+1)) key bits, CUB histogram counts,
// exclusive scan offsets, block/capacity padding. Every field equals plan_dispatch_omp's exactly.
DispatchPlan plan_dispatch_cuda(const Routing& r, Layout layout, int block_size);

// gather_rows_omp on the device (16-byte vector loads). x: [r.num_tokens, hidden]; xg: [plan.rows, hidden].
void gather_rows_cuda(const float* x, int64_t hidden, const Routing& r, const DispatchPlan& plan, float* xg);

// combine_omp on the device: same order of float operations per element, no atomics, so the output
// equals combine_omp's bit for bit. expert_out: [plan.rows, hidden]; shared_out: [r.num_tokens, hidden]
// or nullptr; y: [r.num_tokens, hidden].
void combine_cuda(const Routing& r, const DispatchPlan& plan, const float* expert_out, const float* shared_out,
                  int64_t hidden, float* y);

// ---- experts -----------------------------------------------------------------------------------

// True when CudaGemmPath::grouped calls cublasGemmGroupedBatchedEx: built against cuBLAS >= 12.5 and not
// turned down by the device (a NOT_SUPPORTED answer switches the process to the per-expert loop).
bool cuda_grouped_gemm_available();

// Storage dtypes of the CUDA experts: fp32, tf32 (fp32 storage, TF32 tensor-core math), bf16, fp16;
// accumulation is fp32 for all. Others throw PreconditionError.
bool cuda_supports_dtype(Dtype dtype);

// grouped_gemm_omp on the device: c rows [off[g], off[g+1]) = a rows * b_g. Inputs are rounded to dtype,
// products accumulated in fp32, outputs stored in dtype and returned as float.
// a: [offsets[G], k]; b: [G, k, n]; c: [offsets[G], n]; offsets: [G+1]; host memory.
void grouped_gemm_cuda(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k, int64_t n,
                       float* c, Dtype dtype = Dtype::fp32, CudaGemmPath path = CudaGemmPath::grouped);

// grouped_swiglu_omp on the device: W1 and W3 fused into one [hidden, 2 ffn] GEMM per expert, SwiGLU in
// one elementwise kernel, then W2. xg, out: [offsets[E], w.hidden]; offsets: [E+1].
void grouped_swiglu_cuda(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out,
                         Dtype dtype = Dtype::fp32, CudaGemmPath path = CudaGemmPath::grouped);

// ---- the layer ---------------------------------------------------------------------------------

// The executed MoE layer on one device, expert weights resident in `dtype` (uploaded once).
class CudaMoeLayer {
 public:
  // shared may be null (no shared experts). Throws ResourceError without a device.
  CudaMoeLayer(const ExpertWeights& w, const ExpertWeights* shared, Dtype dtype = Dtype::fp32,
               CudaGemmPath path = CudaGemmPath::grouped);
  ~CudaMoeLayer();
  CudaMoeLayer(CudaMoeLayer&&) noexcept;
  CudaMoeLayer& operator=(CudaMoeLayer&&) noexcept;

  // route_omp(cfg, req, state) + plan_dispatch_omp(r, cfg.layout, cfg.block_size) + moe_forward_omp on
  // the device. x, y: [req.num_tokens, hidden] host memory (x is uploaded before the clock starts).
  CudaLayerOutput forward(const RouterConfig& cfg, const RouteRequest& req, RouterState* state, const float* x,
                          float* y);

  // moe_forward_omp on the device for a given routing and plan. times (device timeline) may be null.
  void forward_routed(const float* x, const Routing& r, const DispatchPlan& plan, float* y, MoePhaseTimes* times);

  int64_t hidden() const;
  Dtype dtype() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The pipeline's executed-layer timing on the device (time_layer in src/pipeline/run_experiment.cpp):
// uploads the weights once, runs forward() once to warm up and `repeats` times timed, each with a fresh
// RouterState (timing must not evolve a bias), and returns the median of each phase. y: the last run's
// output; *routing_out (when non-null): its routing; *per_repeat (when non-null): every timed repeat's
// times, in order (the pipeline's spread). dtype: ExecuteConfig::dtype (cuda_supports_dtype).
CudaLayerTimes time_layer_cuda(const RouterConfig& cfg, const RouteRequest& req, const ExpertWeights& w,
                               const ExpertWeights* shared, Dtype dtype, const float* x, float* y, int repeats,
                               Routing* routing_out, std::vector<CudaLayerTimes>* per_repeat = nullptr);

// One-shot moe_forward_omp on the device (uploads the weights each call; tests and --verify).
void moe_forward_cuda(const ExpertWeights& w, const ExpertWeights* shared, const float* x, const Routing& r,
                      const DispatchPlan& plan, float* y, MoePhaseTimes* times, Dtype dtype = Dtype::fp32);

// ---- device measurements (for a calibrated profile of the device) --------------------------------
// Measures the device: the per-expert SwiGLU time t(n) over cfg.expert_rows (what the cost model's
// efficiencies are fitted to), the copy bandwidth and the launch overhead. Weights are random.
CudaMeasurements measure_cuda_device(const CudaMeasureConfig& cfg);

// ---- decoder attention -------------------------------------------------------------------------
// cached_attention (src/decoder/attention.hpp) on the device, with the same inputs and output: query
// token t of sequence seq[t] at position pos[t] attends to cached positions 0..pos[t] of its sequence,
// whose rows start at slot seq_offset[seq[t]]; head h reads KV head h / (heads / kv_heads); scale
// 1/sqrt(head_dim). q, out: [num_tokens, heads, head_dim]; k_cache, v_cache: [seq_offset[num_seqs],
// kv_heads, head_dim]; seq_offset: [num_seqs + 1]; seq, pos: [num_tokens]; float32, head_dim <= 256.
// One thread block per (token, head); scores in float with a fixed reduction order (deterministic),
// so the output matches the double-precision host path within 1e-5 + 1e-4 relative.
// Host memory: uploads the cache, runs, downloads out.
void cached_attention_cuda(const float* q, const float* k_cache, const float* v_cache, const int64_t* seq_offset,
                           int num_seqs, const int32_t* seq, const int32_t* pos, int64_t num_tokens, int heads,
                           int kv_heads, int head_dim, float* out);

// Device memory (a cache kept resident on the device), on the calling thread's default stream
// (cudaStreamPerThread); returns after the launch.
void cached_attention_cuda_device(const float* q, const float* k_cache, const float* v_cache,
                                  const int64_t* seq_offset, const int32_t* seq, const int32_t* pos,
                                  int64_t num_tokens, int heads, int kv_heads, int head_dim, float* out);

}  // inline namespace MOESIM_CUDA_API_NS
}  // namespace moesim
