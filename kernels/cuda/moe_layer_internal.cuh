// What the translation units of the CUDA MoE layer share (cuda_detail, private to the backend): the storage
// types, the launchers of the elementwise kernels, the cuBLAS GEMM problems, the routing and dispatch plan
// resident on the device, the experts in their storage type and the layer core behind CudaMoeLayer.
// Device memory in and out; integer plans equal plan_dispatch_omp's, combine equals combine_omp's bit for
// bit. nvcc only: kernels/cuda/{moe_kernels,dispatch_gemm,moe_layer}_cuda.cu and the GPU benchmarks
// (tests/gpu/gpu_bench_cases.cu). Covered by tests/gpu/{dispatch,experts,layer}_cuda_test.cpp.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda_backend.hpp"
#include "kernels/moe_layer.hpp"
#include "router/routing.hpp"
#include "src/common/error.hpp"
#include "src/config/experiment.hpp"

namespace moesim {
namespace cuda_detail {

// ---- device check (kernels/cuda/moe_kernels_cuda.cu) ------------------------------------------
// "" when a device is usable, else the reason; probed once per process.
const std::string& cached_device_problem();

// ---- storage types -----------------------------------------------------------------------------
// Calls f(T{}) with the storage type of dtype.
template <class F>
void with_storage_type(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::fp32:
    case Dtype::tf32: f(float{}); return;
    case Dtype::bf16: f(__nv_bfloat16{}); return;
    case Dtype::fp16: f(__half{}); return;
    default: break;
  }
  MOESIM_REQUIRE(false, "the CUDA experts support fp32, tf32, bf16 and fp16, not " << to_string(dtype));
}

// ---- elementwise kernels (kernels/cuda/moe_kernels_cuda.cu) ------------------------------------
// Each launches on stream() and returns; T is float, __nv_bfloat16 or __half (explicitly instantiated).
// Rows of a multiple of 4 elements are accessed 4 wide.

// out[i] = in[i] converted to Dst (round to nearest), n elements.
template <class Src, class Dst>
void launch_convert(const Src* in, Dst* out, int64_t n);

// xg[row] = x[token[row_assignment[row]]] in T, zeros for padding rows (row_assignment -1).
// x: [num_tokens, hidden] float; xg: [rows, hidden].
template <class T>
void launch_gather(const float* x, int64_t hidden, const int32_t* token, const int32_t* row_assignment, int64_t rows,
                   T* xg);

// h[r, j] = silu(h13[r, j]) * h13[r, ffn + j], computed in float. h13: [rows, 2 ffn]; h: [rows, ffn].
template <class T>
void launch_swiglu(const T* h13, int64_t rows, int64_t ffn, T* h);

// y[t] = sum over t's kept assignments (token_assign order) of weight * expert_out[row], then + shared_out[t]
// when shared_out is non-null: combine_omp's float operations in its order, so its bytes.
// expert_out: [rows, hidden]; shared_out, y: [num_tokens, hidden].
template <class T>
void launch_combine(const T* expert_out, const float* shared_out, const float* weight, const uint8_t* kept,
                    const int32_t* token_assign, const int64_t* token_offsets, const int32_t* assignment_row,
                    int64_t num_tokens, int64_t hidden, float* y);

// out[i] = sum over s = 0..num_shared-1, in that order, of per_expert[s][i] (float adds, as
// shared_experts_omp). per_expert: [num_shared, n] T; out: [n] float.
template <class T>
void launch_sum_shared(const T* per_expert, int num_shared, int64_t n, float* out);

// ---- cuBLAS GEMMs (kernels/cuda/dispatch_gemm_cuda.cu) -----------------------------------------
struct GemmSpec {
  cudaDataType_t type;
  cublasComputeType_t compute;
};

// The storage and compute types of dtype; throws PreconditionError for a dtype the experts do not support.
GemmSpec gemm_spec(Dtype dtype);

// Row-major C[m, n] = A[m, k] * B[k, n] (lda = k, ldb = n, ldc = n), all in the spec's storage type.
struct GemmProblem {
  int64_t m, n, k;
  const void* a;
  const void* b;
  void* c;
};

// True when built against cuBLAS >= 12.5 and no grouped call has been turned down (cuda_grouped_gemm_available).
bool grouped_gemm_compiled();

// The problems (those with m == 0 skipped) in one cublasGemmGroupedBatchedEx call (path grouped, when
// available) or one cublasGemmEx each over side streams joined back to stream().
void run_gemms(const std::vector<GemmProblem>& all, const GemmSpec& spec, CudaGemmPath path);

// ---- routing and dispatch plan on the device (kernels/cuda/dispatch_gemm_cuda.cu) ---------------
struct DeviceRouting {
  int64_t num_tokens = 0;
  int num_experts = 0;
  int64_t capacity = 0;
  int64_t n = 0;  // assignments
  DeviceBuffer<int32_t> token, expert;
  DeviceBuffer<float> weight;
  DeviceBuffer<uint8_t> kept;
};

DeviceRouting upload_routing(const Routing& r);

struct DevicePlan {
  Layout layout = Layout::dropless;
  int64_t num_kept = 0;
  int64_t rows = 0;
  std::vector<int64_t> counts_host;          // [E]
  std::vector<int64_t> padded_offsets_host;  // [E+1]
  DeviceBuffer<int64_t> counts, offsets, padded_offsets;
  DeviceBuffer<int32_t> sorted_keys, order, row_assignment;
};

// The dispatch plan of a device routing (plan_dispatch_omp's integers); downloads counts and padded offsets.
DevicePlan build_plan(const DeviceRouting& d, Layout layout, int block_size);

DispatchPlan download_plan(const DevicePlan& p, int num_experts);

// The token index of combine.hpp on the device (the sort hook runs CUB for expert-major routings).
struct DeviceTokenIndex {
  DeviceBuffer<int32_t> token_assign;
  DeviceBuffer<int64_t> token_offsets;
  DeviceBuffer<int32_t> assignment_row;
};

DeviceTokenIndex build_token_index_device(const DeviceRouting& d, const int32_t* row_assignment, int64_t rows);

// ---- experts on the device (kernels/cuda/moe_kernels_cuda.cu) -----------------------------------
// SwiGLU expert weights resident in T: w13 [E, hidden, 2 ffn] (W1 | W3), w2 [E, ffn, hidden].
template <class T>
struct DeviceExperts {
  int num_experts = 0;
  int64_t hidden = 0, ffn = 0;
  DeviceBuffer<T> w13, w2;
};

// Checks the weights and uploads them into T, W1 and W3 packed side by side.
template <class T>
DeviceExperts<T> upload_experts(const ExpertWeights& w);

// SwiGLU experts over row segments: segment i sends rows x_i[0, rows_i) through the expert (w13_i, w2_i)
// and writes rows [row0_i, row0_i + rows_i) of h13 ([*, 2 ffn]), h ([*, ffn]) and out ([*, hidden]).
// Every segment's up-projection goes into one grouped GEMM call, then one SwiGLU kernel over all
// total_rows rows, then one grouped call for the down-projections.
template <class T>
struct Segment {
  const T* x;
  int64_t row0;
  int64_t rows;
  const T* w13;
  const T* w2;
};

template <class T>
void run_swiglu_segments(const std::vector<Segment<T>>& segs, int64_t hidden, int64_t ffn, T* h13, T* h, T* out,
                         int64_t total_rows, const GemmSpec& spec, CudaGemmPath path);

// ---- the layer (kernels/cuda/moe_layer_cuda.cu) -------------------------------------------------
// Events recorded on stream() at phase boundaries; read after one synchronisation at the end.
class PhaseMarks {
 public:
  PhaseMarks() = default;
  PhaseMarks(const PhaseMarks&) = delete;
  PhaseMarks& operator=(const PhaseMarks&) = delete;
  ~PhaseMarks() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  void mark() {
    cudaEvent_t e = nullptr;
    MOESIM_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
    MOESIM_CUDA_CHECK(cudaEventRecord(e, stream()));
  }
  // Seconds between marks i and j (after the last mark has completed).
  double seconds(size_t i, size_t j) {
    MOESIM_CUDA_CHECK(cudaEventSynchronize(events_.back()));
    float ms = 0.0f;
    MOESIM_CUDA_CHECK(cudaEventElapsedTime(&ms, events_.at(i), events_.at(j)));
    return ms * 1e-3;
  }

 private:
  std::vector<cudaEvent_t> events_;
};

// The layer of CudaMoeLayer: expert weights resident in one storage type, behind a type-free interface.
class LayerCore {
 public:
  virtual ~LayerCore() = default;
  virtual int64_t hidden() const = 0;
  virtual int num_experts() const = 0;
  // Gather, experts and combine for a device routing and its row placement; marks the end of each phase.
  // x, y: device [d.num_tokens, hidden] float.
  virtual void run(const DeviceRouting& d, const int32_t* row_assignment, const std::vector<int64_t>& padded_offsets,
                   const float* x, float* y, PhaseMarks* marks) = 0;
  // The routed up-projection GEMMs alone over a gathered buffer (benchmarks): rows of expert e are
  // [padded_offsets[e], padded_offsets[e+1]) of xg [rows, hidden] (T), h13 [rows, 2 ffn] (T).
  virtual void up_projection(const void* xg, const std::vector<int64_t>& padded_offsets, void* h13,
                             CudaGemmPath path) = 0;
  // One dense GEMM of the same total size as up_projection: [rows, hidden] x expert 0's [hidden, 2 ffn].
  virtual void dense_up_projection(const void* xg, int64_t rows, void* h13) = 0;
  // Routed expert `expert` alone on `rows` rows: x [rows, hidden], h13 [rows, 2 ffn], h [rows, ffn],
  // out [rows, hidden], all in the storage type.
  virtual void expert_swiglu(int expert, const void* x, int64_t rows, void* h13, void* h, void* out) = 0;
  virtual size_t storage_bytes() const = 0;
  // Device float <-> the storage type, n elements.
  virtual void to_storage(const float* in, void* out, int64_t n) const = 0;
  virtual void from_storage(const void* in, float* out, int64_t n) const = 0;
};

// Uploads the routed (and shared, when non-null and non-empty) experts in dtype's storage type.
std::unique_ptr<LayerCore> make_layer(const ExpertWeights& w, const ExpertWeights* shared, Dtype dtype,
                                      CudaGemmPath path);

}  // namespace cuda_detail
}  // namespace moesim
