// The executed MoE layer on the CUDA backend: dispatch plan (CUB histogram counts, CUB radix sort through the
// sort hook, scans and padding from kernels/permute.hpp), gather and combine kernels with 16-byte vector
// accesses, expert GEMMs on cuBLAS (grouped or per expert; fp32, tf32, bf16, fp16 storage, fp32
// accumulation), a fused SwiGLU kernel, CUDA-event phase times, the device check and the GPU benchmarks.
// x, y: [num_tokens, hidden] float32 on the host side of the API. Integer plans equal plan_dispatch_omp's;
// combine equals combine_omp's bit for bit. nvcc only. Tests: tests/gpu/{dispatch,experts,layer}_cuda_test.cpp.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/device/device_histogram.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/tabulate.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <climits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/cub_sort.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/combine.hpp"
#include "kernels/moe_layer.hpp"
#include "kernels/permute.hpp"
#include "router/route.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace cuda_detail {

// ================================================================================================
// Device check
// ================================================================================================

__global__ void probe_kernel() {}

namespace {

// "" when a device is usable, else the reason. Probing a kernel also catches a build without code for
// this device's architecture (cudaErrorNoKernelImageForDevice).
std::string device_problem() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
  }
  if (count == 0) return "cudaGetDeviceCount reports 0 devices";
  cudaFuncAttributes attr;
  status = cudaFuncGetAttributes(&attr, probe_kernel);
  if (status != cudaSuccess) {
    cudaGetLastError();
    int device = 0;
    cudaDeviceProp prop{};
    std::string arch;
    if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
      arch = " on sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
             " (rebuild with CMAKE_CUDA_ARCHITECTURES including it)";
    }
    return std::string("no usable kernel image: ") + cudaGetErrorName(status) + arch;
  }
  return "";
}

const std::string& cached_device_problem() {
  static const std::string problem = device_problem();
  return problem;
}

}  // namespace

void require_device() {
  const std::string& problem = cached_device_problem();
  if (!problem.empty()) throw ResourceError("no usable CUDA device: " + problem);
  static const bool pool_ready = [] {
    int device = 0;
    MOESIM_CUDA_CHECK(cudaGetDevice(&device));
    cudaMemPool_t pool;
    MOESIM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = std::numeric_limits<uint64_t>::max();
    MOESIM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    return true;
  }();
  (void)pool_ready;
}

// ================================================================================================
// Storage types and 4-wide vector access
// ================================================================================================

template <class T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// Four consecutive elements as floats. p is aligned to 4 elements: one 16-byte access for float, one
// 8-byte access for 16-bit types.
template <class T>
struct Vec4Io;
template <>
struct Vec4Io<float> {
  __device__ static float4 load(const float* p) { return *reinterpret_cast<const float4*>(p); }
  __device__ static void store(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
};
template <>
struct Vec4Io<__nv_bfloat16> {
  __device__ static float4 load(const __nv_bfloat16* p) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    return make_float4(a.x, a.y, b.x, b.y);
  }
  __device__ static void store(__nv_bfloat16* p, float4 v) {
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y);
    const __nv_bfloat162 b = __floats2bfloat162_rn(v.z, v.w);
    uint2 raw;
    raw.x = *reinterpret_cast<const unsigned*>(&a);
    raw.y = *reinterpret_cast<const unsigned*>(&b);
    *reinterpret_cast<uint2*>(p) = raw;
  }
};
template <>
struct Vec4Io<__half> {
  __device__ static float4 load(const __half* p) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
    return make_float4(a.x, a.y, b.x, b.y);
  }
  __device__ static void store(__half* p, float4 v) {
    const __half2 a = __floats2half2_rn(v.x, v.y);
    const __half2 b = __floats2half2_rn(v.z, v.w);
    uint2 raw;
    raw.x = *reinterpret_cast<const unsigned*>(&a);
    raw.y = *reinterpret_cast<const unsigned*>(&b);
    *reinterpret_cast<uint2*>(p) = raw;
  }
};

// Element access of width W (4: vectorised, 1: scalar) as floats.
template <class T, int W>
struct Lanes {
  float v[W];
  __device__ void load(const T* p) {
    if constexpr (W == 4) {
      const float4 f = Vec4Io<T>::load(p);
      v[0] = f.x;
      v[1] = f.y;
      v[2] = f.z;
      v[3] = f.w;
    } else {
      for (int i = 0; i < W; ++i) v[i] = to_f32(p[i]);
    }
  }
  __device__ void store(T* p) const {
    if constexpr (W == 4) {
      Vec4Io<T>::store(p, make_float4(v[0], v[1], v[2], v[3]));
    } else {
      for (int i = 0; i < W; ++i) p[i] = from_f32<T>(v[i]);
    }
  }
};

// 4-wide access when the row length is a multiple of 4 (buffers come from cudaMallocAsync, 256-byte
// aligned, so every row then starts on a 4-element boundary).
inline bool use_vec4(int64_t row_len) { return row_len % 4 == 0; }

// ================================================================================================
// Elementwise kernels: conversion, packing W1|W3, gather, SwiGLU, combine, shared-expert sum
// ================================================================================================

template <class Src, class Dst>
__global__ void convert_kernel(const Src* __restrict__ in, Dst* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_f32<Dst>(to_f32(in[i]));
  }
}

template <class Src, class Dst>
void launch_convert(const Src* in, Dst* out, int64_t n) {
  if (n == 0) return;
  convert_kernel<Src, Dst><<<grid_blocks(n, 256), 256, 0, stream()>>>(in, out, n);
  MOESIM_CUDA_LAUNCH_CHECK(convert_kernel);
}

// w13[e, i, :] = [w1[e, i, :], w3[e, i, :]]: W1 and W3 side by side, so one GEMM yields gate and up.
// w1, w3: [E, hidden, ffn] float; w13: [E, hidden, 2 ffn] T.
template <class T>
__global__ void pack_w13_kernel(const float* __restrict__ w1, const float* __restrict__ w3, int64_t rows, int64_t ffn,
                                T* __restrict__ w13) {
  const int64_t n = rows * 2 * ffn;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / (2 * ffn), c = i % (2 * ffn);
    w13[i] = from_f32<T>(c < ffn ? w1[r * ffn + c] : w3[r * ffn + c - ffn]);
  }
}

// xg[row] = x[token[row_assignment[row]]] in T, zeros for padding rows (row_assignment -1).
// Thread per W consecutive columns of one row. x: [num_tokens, hidden]; xg: [rows, hidden].
template <class T, int W>
__global__ void gather_rows_kernel(const float* __restrict__ x, int64_t hidden, const int32_t* __restrict__ token,
                                   const int32_t* __restrict__ row_assignment, int64_t rows, T* __restrict__ xg) {
  const int64_t chunks = hidden / W;
  const int64_t n = rows * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / chunks, c = (i % chunks) * W;
    const int32_t a = row_assignment[row];
    Lanes<float, W> v;
    if (a < 0) {
      for (int j = 0; j < W; ++j) v.v[j] = 0.0f;
    } else {
      v.load(x + static_cast<int64_t>(token[a]) * hidden + c);
    }
    Lanes<T, W> out;
    for (int j = 0; j < W; ++j) out.v[j] = v.v[j];
    out.store(xg + row * hidden + c);
  }
}

template <class T>
void launch_gather(const float* x, int64_t hidden, const int32_t* token, const int32_t* row_assignment, int64_t rows,
                   T* xg) {
  if (rows == 0) return;
  if (use_vec4(hidden)) {
    gather_rows_kernel<T, 4><<<grid_blocks(rows * hidden / 4, 256), 256, 0, stream()>>>(x, hidden, token,
                                                                                         row_assignment, rows, xg);
  } else {
    gather_rows_kernel<T, 1><<<grid_blocks(rows * hidden, 256), 256, 0, stream()>>>(x, hidden, token, row_assignment,
                                                                                    rows, xg);
  }
  MOESIM_CUDA_LAUNCH_CHECK(gather_rows_kernel);
}

// h[r, j] = silu(g) * u with g = h13[r, j], u = h13[r, ffn + j], in float, the host's formula
// g / (1 + exp(-g)) * u. h13: [rows, 2 ffn]; h: [rows, ffn].
template <class T, int W>
__global__ void swiglu_kernel(const T* __restrict__ h13, int64_t rows, int64_t ffn, T* __restrict__ h) {
  const int64_t chunks = ffn / W;
  const int64_t n = rows * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, c = (i % chunks) * W;
    Lanes<T, W> g, u, out;
    g.load(h13 + r * 2 * ffn + c);
    u.load(h13 + r * 2 * ffn + ffn + c);
    for (int j = 0; j < W; ++j) out.v[j] = g.v[j] / (1.0f + expf(-g.v[j])) * u.v[j];
    out.store(h + r * ffn + c);
  }
}

template <class T>
void launch_swiglu(const T* h13, int64_t rows, int64_t ffn, T* h) {
  if (rows == 0) return;
  if (use_vec4(ffn)) {
    swiglu_kernel<T, 4><<<grid_blocks(rows * ffn / 4, 256), 256, 0, stream()>>>(h13, rows, ffn, h);
  } else {
    swiglu_kernel<T, 1><<<grid_blocks(rows * ffn, 256), 256, 0, stream()>>>(h13, rows, ffn, h);
  }
  MOESIM_CUDA_LAUNCH_CHECK(swiglu_kernel);
}

// y[t] = sum over t's kept assignments (token_assign order) of weight * expert_out[row], then + shared.
// The same float operations in the same order as combine.hpp's CombineTokenOp; _rn intrinsics keep nvcc
// from contracting them into FMAs, so the result equals the host's bit for bit (x86-64 g++ does not
// contract either). Thread per W consecutive columns of one token.
template <class T, int W>
__global__ void combine_kernel(const T* __restrict__ expert_out, const float* __restrict__ shared_out,
                               const float* __restrict__ weight, const uint8_t* __restrict__ kept,
                               const int32_t* __restrict__ token_assign, const int64_t* __restrict__ token_offsets,
                               const int32_t* __restrict__ assignment_row, int64_t num_tokens, int64_t hidden,
                               float* __restrict__ y) {
  const int64_t chunks = hidden / W;
  const int64_t n = num_tokens * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / chunks, c = (i % chunks) * W;
    Lanes<float, W> acc;
    for (int j = 0; j < W; ++j) acc.v[j] = 0.0f;
    for (int64_t s = token_offsets[t]; s < token_offsets[t + 1]; ++s) {
      const int32_t a = token_assign[s];
      if (!kept[a]) continue;
      const float w = weight[a];
      Lanes<T, W> src;
      src.load(expert_out + static_cast<int64_t>(assignment_row[a]) * hidden + c);
      for (int j = 0; j < W; ++j) acc.v[j] = __fadd_rn(acc.v[j], __fmul_rn(w, src.v[j]));
    }
    if (shared_out != nullptr) {
      Lanes<float, W> sh;
      sh.load(shared_out + t * hidden + c);
      for (int j = 0; j < W; ++j) acc.v[j] = __fadd_rn(acc.v[j], sh.v[j]);
    }
    acc.store(y + t * hidden + c);
  }
}

template <class T>
void launch_combine(const T* expert_out, const float* shared_out, const float* weight, const uint8_t* kept,
                    const int32_t* token_assign, const int64_t* token_offsets, const int32_t* assignment_row,
                    int64_t num_tokens, int64_t hidden, float* y) {
  if (num_tokens == 0) return;
  if (use_vec4(hidden)) {
    combine_kernel<T, 4><<<grid_blocks(num_tokens * hidden / 4, 256), 256, 0, stream()>>>(
        expert_out, shared_out, weight, kept, token_assign, token_offsets, assignment_row, num_tokens, hidden, y);
  } else {
    combine_kernel<T, 1><<<grid_blocks(num_tokens * hidden, 256), 256, 0, stream()>>>(
        expert_out, shared_out, weight, kept, token_assign, token_offsets, assignment_row, num_tokens, hidden, y);
  }
  MOESIM_CUDA_LAUNCH_CHECK(combine_kernel);
}

// out[i] = sum over s = 0..S-1, in that order, of per_expert[s][i] (float adds, as shared_experts_omp).
// per_expert: [S, n] T; out: [n] float.
template <class T>
__global__ void sum_shared_kernel(const T* __restrict__ per_expert, int num_shared, int64_t n,
                                  float* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = to_f32(per_expert[i]);
    for (int s = 1; s < num_shared; ++s) acc = __fadd_rn(acc, to_f32(per_expert[static_cast<int64_t>(s) * n + i]));
    out[i] = acc;
  }
}

// ================================================================================================
// cuBLAS: row-major GEMMs, one grouped call or one call per problem
// ================================================================================================

struct GemmSpec {
  cudaDataType_t type;
  cublasComputeType_t compute;
};

GemmSpec gemm_spec(Dtype dtype) {
  switch (dtype) {
    case Dtype::fp32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case Dtype::tf32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
    case Dtype::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case Dtype::fp16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    default: break;
  }
  MOESIM_REQUIRE(false, "the CUDA experts support fp32, tf32, bf16 and fp16, not " << to_string(dtype));
  return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
}

// One handle per host thread, bound to stream(). Kept until the process exits: destroying it from a
// thread_local destructor could run after the CUDA runtime has been torn down.
cublasHandle_t cublas_handle() {
  thread_local cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    MOESIM_CUBLAS_CHECK(cublasCreate(&h));
    MOESIM_CUBLAS_CHECK(cublasSetStream(h, stream()));
    return h;
  }();
  return handle;
}

// The per-expert loop spreads its GEMMs over a few side streams, each with its own cuBLAS handle (a handle's
// workspace must not be shared by concurrent streams), forked from and joined back to stream() with
// events, so that small experts overlap. Per host thread, kept until exit like cublas_handle().
constexpr int kGemmSideStreams = 4;

struct SideStreams {
  cudaStream_t stream[kGemmSideStreams];
  cublasHandle_t handle[kGemmSideStreams];
  cudaEvent_t done[kGemmSideStreams];
  cudaEvent_t fork;
};

SideStreams& side_streams() {
  thread_local SideStreams side = [] {
    SideStreams s;
    MOESIM_CUDA_CHECK(cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming));
    for (int i = 0; i < kGemmSideStreams; ++i) {
      MOESIM_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream[i], cudaStreamNonBlocking));
      MOESIM_CUDA_CHECK(cudaEventCreateWithFlags(&s.done[i], cudaEventDisableTiming));
      MOESIM_CUBLAS_CHECK(cublasCreate(&s.handle[i]));
      MOESIM_CUBLAS_CHECK(cublasSetStream(s.handle[i], s.stream[i]));
    }
    return s;
  }();
  return side;
}

// Row-major C[m, n] = A[m, k] * B[k, n] (lda = k, ldb = n, ldc = n), all in the spec's storage type.
struct GemmProblem {
  int64_t m, n, k;
  const void* a;
  const void* b;
  void* c;
};

// Set when the device or cuBLAS turned a grouped call down (CUBLAS_STATUS_NOT_SUPPORTED or
// ARCH_MISMATCH for a dtype or architecture): later grouped requests go straight to the per-expert loop.
std::atomic<bool>& grouped_gemm_refused() {
  static std::atomic<bool> refused{false};
  return refused;
}

bool grouped_gemm_compiled() {
#if CUBLAS_VER_MAJOR > 12 || (CUBLAS_VER_MAJOR == 12 && CUBLAS_VER_MINOR >= 5)
  return !grouped_gemm_refused().load();
#else
  return false;
#endif
}

// cuBLAS is column-major: row-major C = A B is column-major C^T = B^T A^T, so B is passed first and the
// m/n roles swap. Problems with m == 0 are skipped.
void run_gemms(const std::vector<GemmProblem>& all, const GemmSpec& spec, CudaGemmPath path) {
  std::vector<GemmProblem> probs;
  for (const GemmProblem& p : all) {
    if (p.m > 0) probs.push_back(p);
  }
  if (probs.empty()) return;
  for (const GemmProblem& p : probs) {
    MOESIM_REQUIRE(p.m <= INT_MAX && p.n <= INT_MAX && p.k <= INT_MAX,
                   "GEMM dimensions exceed 32 bits: " << p.m << " x " << p.n << " x " << p.k);
  }
  cublasHandle_t handle = cublas_handle();
  const float one = 1.0f, zero = 0.0f;
#if CUBLAS_VER_MAJOR > 12 || (CUBLAS_VER_MAJOR == 12 && CUBLAS_VER_MINOR >= 5)
  if (path == CudaGemmPath::grouped && !grouped_gemm_refused().load()) {
    const int count = static_cast<int>(probs.size());
    std::vector<cublasOperation_t> ops(count, CUBLAS_OP_N);
    std::vector<int> m(count), n(count), k(count), lda(count), ldb(count), ldc(count), group_size(count, 1);
    std::vector<float> alpha(count, 1.0f), beta(count, 0.0f);
    std::vector<const void*> ptrs(3 * static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      const GemmProblem& p = probs[i];
      m[i] = static_cast<int>(p.n);
      n[i] = static_cast<int>(p.m);
      k[i] = static_cast<int>(p.k);
      lda[i] = static_cast<int>(p.n);
      ldb[i] = static_cast<int>(p.k);
      ldc[i] = static_cast<int>(p.n);
      ptrs[i] = p.b;
      ptrs[count + i] = p.a;
      ptrs[2 * count + i] = p.c;
    }
    // The pointer arrays live in device memory; stream-ordered, so freeing them after the call is safe.
    DeviceBuffer<const void*> d_ptrs = to_device(ptrs);
    const void* const* a_array = d_ptrs.get();
    const void* const* b_array = d_ptrs.get() + count;
    void* const* c_array = const_cast<void* const*>(d_ptrs.get() + 2 * count);
    const cublasStatus_t status = cublasGemmGroupedBatchedEx(
        handle, ops.data(), ops.data(), m.data(), n.data(), k.data(), alpha.data(), a_array, spec.type, lda.data(),
        b_array, spec.type, ldb.data(), beta.data(), c_array, spec.type, ldc.data(), count, group_size.data(),
        spec.compute);
    if (status == CUBLAS_STATUS_SUCCESS) return;
    if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_ARCH_MISMATCH) {
      check_cublas(status, "cublasGemmGroupedBatchedEx(...)", __FILE__, __LINE__);
    }
    grouped_gemm_refused().store(true);  // fall through to the per-expert loop
  }
#else
  (void)path;
#endif
  auto gemm = [&](cublasHandle_t h, const GemmProblem& p) {
    MOESIM_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(p.n), static_cast<int>(p.m),
                                     static_cast<int>(p.k), &one, p.b, spec.type, static_cast<int>(p.n), p.a,
                                     spec.type, static_cast<int>(p.k), &zero, p.c, spec.type, static_cast<int>(p.n),
                                     spec.compute, CUBLAS_GEMM_DEFAULT));
  };
  if (probs.size() == 1) {
    gemm(handle, probs.front());
    return;
  }
  // Fork: every side stream waits for the work queued so far; join: stream() waits for every side stream,
  // so buffers freed later on stream() (stream-ordered) outlive the GEMMs that read them.
  SideStreams& side = side_streams();
  const int used = static_cast<int>(std::min<size_t>(probs.size(), kGemmSideStreams));
  MOESIM_CUDA_CHECK(cudaEventRecord(side.fork, stream()));
  for (int i = 0; i < used; ++i) MOESIM_CUDA_CHECK(cudaStreamWaitEvent(side.stream[i], side.fork, 0));
  for (size_t j = 0; j < probs.size(); ++j) gemm(side.handle[j % kGemmSideStreams], probs[j]);
  for (int i = 0; i < used; ++i) {
    MOESIM_CUDA_CHECK(cudaEventRecord(side.done[i], side.stream[i]));
    MOESIM_CUDA_CHECK(cudaStreamWaitEvent(stream(), side.done[i], 0));
  }
}

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

// ================================================================================================
// Routing and dispatch plan on the device
// ================================================================================================

struct DeviceRouting {
  int64_t num_tokens = 0;
  int num_experts = 0;
  int64_t capacity = 0;
  int64_t n = 0;  // assignments
  DeviceBuffer<int32_t> token, expert;
  DeviceBuffer<float> weight;
  DeviceBuffer<uint8_t> kept;
};

DeviceRouting upload_routing(const Routing& r) {
  DeviceRouting d;
  d.num_tokens = r.num_tokens;
  d.num_experts = r.num_experts;
  d.capacity = r.capacity;
  d.n = r.num_assignments();
  d.token = to_device(r.token);
  d.expert = to_device(r.expert);
  d.weight = to_device(r.weight);
  d.kept = to_device(r.kept);
  return d;
}

struct DevicePlan {
  Layout layout = Layout::dropless;
  int64_t num_kept = 0;
  int64_t rows = 0;
  std::vector<int64_t> counts_host;          // [E]
  std::vector<int64_t> padded_offsets_host;  // [E+1]
  DeviceBuffer<int64_t> counts, offsets, padded_offsets;
  DeviceBuffer<int32_t> sorted_keys, order, row_assignment;
};

struct CountToInt64 {
  __host__ __device__ int64_t operator()(int c) const { return c; }
};

// The dispatch plan of a device routing: keys (expert, or E for dropped) and CUB histogram counts, the
// stable CUB radix sort through the sort hook, CUB exclusive-scan offsets, then permute.hpp's padding
// and row placement. Downloads the counts and padded offsets (the host sizes the buffers and GEMMs).
DevicePlan build_plan(const DeviceRouting& d, Layout layout, int block_size) {
  const auto policy = cuda_policy();
  const int num_e = d.num_experts;
  const int64_t n = d.n;
  DevicePlan p;
  p.layout = layout;
  p.sorted_keys = DeviceBuffer<int32_t>(n);
  p.order = DeviceBuffer<int32_t>(n);
  p.counts = DeviceBuffer<int64_t>(num_e);
  p.offsets = DeviceBuffer<int64_t>(num_e + 1);
  p.padded_offsets = DeviceBuffer<int64_t>(num_e + 1);
  DeviceBuffer<int> histogram(num_e + 1);  // bin E counts the dropped assignments
  if (n > 0) {
    thrust::tabulate(policy, p.sorted_keys.get(), p.sorted_keys.get() + n,
                     detail::ExpertKeyOp{d.expert.get(), d.kept.get(), num_e});
    thrust::tabulate(policy, p.order.get(), p.order.get() + n, detail::IotaOp{});
    size_t bytes = 0;
    MOESIM_CUDA_CHECK(cub::DeviceHistogram::HistogramEven(nullptr, bytes, p.sorted_keys.get(), histogram.get(),
                                                          num_e + 2, 0, num_e + 1, static_cast<int>(n), stream()));
    DeviceBuffer<unsigned char> temp(bytes);
    MOESIM_CUDA_CHECK(cub::DeviceHistogram::HistogramEven(temp.get(), bytes, p.sorted_keys.get(), histogram.get(),
                                                          num_e + 2, 0, num_e + 1, static_cast<int>(n), stream()));
    stable_sort_small_keys(policy, p.sorted_keys.get(), p.order.get(), n, SortKeyBound{num_e});
  } else {
    MOESIM_CUDA_CHECK(cudaMemsetAsync(histogram.get(), 0, (num_e + 1) * sizeof(int), stream()));
  }
  {
    const auto counts64 = thrust::make_transform_iterator(histogram.get(), CountToInt64{});
    size_t bytes = 0;
    MOESIM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, counts64, p.offsets.get(), num_e + 1, stream()));
    DeviceBuffer<unsigned char> temp(bytes);
    MOESIM_CUDA_CHECK(
        cub::DeviceScan::ExclusiveSum(temp.get(), bytes, counts64, p.offsets.get(), num_e + 1, stream()));
  }
  expert_counts(policy, p.offsets.get(), num_e, p.counts.get());
  p.counts_host = to_host(p.counts.get(), num_e);
  for (int64_t c : p.counts_host) p.num_kept += c;

  int64_t capacity = 0;
  if (layout == Layout::capacity) {
    Routing header;  // layout_capacity reads only the capacity of the routing
    header.capacity = d.capacity;
    capacity = layout_capacity(header, p.counts_host);
  }
  pad_offsets(policy, p.offsets.get(), num_e, layout, block_size, capacity, p.padded_offsets.get());
  p.padded_offsets_host = to_host(p.padded_offsets.get(), num_e + 1);
  p.rows = p.padded_offsets_host[num_e];
  p.row_assignment = DeviceBuffer<int32_t>(p.rows);
  fill_row_assignment(policy, p.sorted_keys.get(), p.order.get(), p.num_kept, p.offsets.get(),
                      p.padded_offsets.get(), p.rows, p.row_assignment.get());
  return p;
}

DispatchPlan download_plan(const DevicePlan& p, int num_experts) {
  DispatchPlan plan;
  plan.num_experts = num_experts;
  plan.layout = p.layout;
  plan.num_kept = p.num_kept;
  plan.rows = p.rows;
  plan.counts = p.counts_host;
  plan.offsets = to_host(p.offsets.get(), num_experts + 1);
  plan.padded_offsets = p.padded_offsets_host;
  plan.order = to_host(p.order.get(), p.num_kept);
  plan.row_assignment = to_host(p.row_assignment.get(), p.rows);
  return plan;
}

// The token index of combine.hpp on the device (the sort hook runs CUB for expert-major routings).
struct DeviceTokenIndex {
  DeviceBuffer<int32_t> token_assign;
  DeviceBuffer<int64_t> token_offsets;
  DeviceBuffer<int32_t> assignment_row;
};

DeviceTokenIndex build_token_index_device(const DeviceRouting& d, const int32_t* row_assignment, int64_t rows) {
  const auto policy = cuda_policy();
  DeviceTokenIndex ix;
  DeviceBuffer<int32_t> keys(d.n);
  ix.token_assign = DeviceBuffer<int32_t>(d.n);
  ix.token_offsets = DeviceBuffer<int64_t>(d.num_tokens + 1);
  ix.assignment_row = DeviceBuffer<int32_t>(d.n);
  build_token_index(policy, d.token.get(), d.n, d.num_tokens, keys.get(), ix.token_assign.get(),
                    ix.token_offsets.get());
  invert_row_assignment(policy, row_assignment, rows, d.n, ix.assignment_row.get());
  return ix;
}

// ================================================================================================
// Experts on the device
// ================================================================================================

// SwiGLU expert weights resident in T: w13 [E, hidden, 2 ffn] (W1 | W3), w2 [E, ffn, hidden].
template <class T>
struct DeviceExperts {
  int num_experts = 0;
  int64_t hidden = 0, ffn = 0;
  DeviceBuffer<T> w13, w2;
};

template <class T>
DeviceExperts<T> upload_experts(const ExpertWeights& w) {
  require_valid_weights(w);
  DeviceExperts<T> d;
  d.num_experts = w.num_experts;
  d.hidden = w.hidden;
  d.ffn = w.ffn;
  const int64_t per = static_cast<int64_t>(w.num_experts) * w.hidden * w.ffn;
  d.w13 = DeviceBuffer<T>(2 * per);
  d.w2 = DeviceBuffer<T>(per);
  if (per == 0) return d;
  {
    DeviceBuffer<float> w1 = to_device(w.w1);
    DeviceBuffer<float> w3 = to_device(w.w3);
    const int64_t rows = static_cast<int64_t>(w.num_experts) * w.hidden;
    pack_w13_kernel<T><<<grid_blocks(2 * per, 256), 256, 0, stream()>>>(w1.get(), w3.get(), rows, w.ffn, d.w13.get());
    MOESIM_CUDA_LAUNCH_CHECK(pack_w13_kernel);
  }
  DeviceBuffer<float> w2 = to_device(w.w2);
  launch_convert(w2.get(), d.w2.get(), per);
  return d;
}

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
                         int64_t total_rows, const GemmSpec& spec, CudaGemmPath path) {
  std::vector<GemmProblem> up, down;
  for (const Segment<T>& s : segs) {
    up.push_back({s.rows, 2 * ffn, hidden, s.x, s.w13, h13 + s.row0 * 2 * ffn});
    down.push_back({s.rows, hidden, ffn, h + s.row0 * ffn, s.w2, out + s.row0 * hidden});
  }
  run_gemms(up, spec, path);
  launch_swiglu(h13, total_rows, ffn, h);
  run_gemms(down, spec, path);
}

// ================================================================================================
// The layer: gather -> grouped SwiGLU (+ shared experts) -> combine, with CUDA-event phase marks
// ================================================================================================

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
      const int64_t n = n_tok * hidden;
      sum_shared_kernel<T><<<grid_blocks(n, 256), 256, 0, stream()>>>(out.get() + rows * hidden, num_shared, n,
                                                                      shared_sum.get());
      MOESIM_CUDA_LAUNCH_CHECK(sum_shared_kernel);
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
                               Routing* routing_out) {
  MOESIM_REQUIRE(repeats >= 0, "repeats must be >= 0, got " << repeats);
  CudaMoeLayer layer(w, shared, dtype);
  std::vector<double> t_router, t_dispatch, t_experts, t_combine, t_layer;
  for (int rep = -1; rep < repeats; ++rep) {
    RouterState state;
    CudaLayerOutput out = layer.forward(cfg, req, &state, x, y);
    if (rep >= 0) {
      t_router.push_back(out.times.router_s);
      t_dispatch.push_back(out.times.dispatch_s);
      t_experts.push_back(out.times.experts_s);
      t_combine.push_back(out.times.combine_s);
      t_layer.push_back(out.times.layer_s);
    }
    if (routing_out != nullptr) *routing_out = std::move(out.routing);
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
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

namespace cuda_detail {

__global__ void empty_kernel() {}

}  // namespace cuda_detail

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

// ================================================================================================
// Benchmarks
// ================================================================================================

namespace {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
};

Timing summarize(std::vector<double> ms) {
  Timing t;
  if (ms.empty()) return t;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  t.min_ms = ms.front();
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

}  // namespace

std::vector<CudaBenchRow> run_cuda_benchmarks(const CudaBenchConfig& cfg) {
  MOESIM_REQUIRE(cfg.num_tokens >= 1 && cfg.num_experts >= 1 && cfg.top_k >= 1 && cfg.top_k <= cfg.num_experts &&
                     cfg.hidden >= 1 && cfg.ffn >= 1 && cfg.iterations >= 1 && cfg.warmup >= 0,
                 "benchmark shape needs tokens, experts, hidden, ffn, iterations >= 1 and 1 <= top_k <= experts");
  MOESIM_REQUIRE(cuda_supports_dtype(cfg.dtype), "the CUDA experts do not support " << to_string(cfg.dtype));
  cuda_detail::require_device();
  using Clock = std::chrono::steady_clock;
  const int64_t n_tok = cfg.num_tokens, hidden = cfg.hidden, ffn = cfg.ffn;
  const int num_e = cfg.num_experts;

  std::vector<float> logits = synthetic_logits(n_tok, num_e, cfg.skew, cfg.seed);
  RouterConfig rc;
  rc.gating = Gating::token_choice;
  RouteRequest req;
  req.logits = logits.data();
  req.num_tokens = n_tok;
  req.num_experts = num_e;
  req.top_k = cfg.top_k;
  req.seed = cfg.seed;
  const ExpertWeights w = make_expert_weights(num_e, hidden, ffn, cfg.seed);
  const std::vector<float> x = synthetic_hidden(n_tok, hidden, cfg.seed + 1);
  std::vector<CudaBenchRow> rows_out;

  // ---- router: route_cuda (fused top-k) against route_omp on the host -------------------------
  Routing r = route_cuda(rc, req, nullptr);
  {
    const Routing host = route_omp(rc, req, nullptr);
    std::string verified = "ok";
    for (int64_t i = 0; i < host.num_assignments() && verified == "ok"; ++i) {
      if (r.expert[i] != host.expert[i] || r.token[i] != host.token[i] || r.kept[i] != host.kept[i] ||
          std::fabs(r.weight[i] - host.weight[i]) > 1e-6f * std::max(1.0f, std::fabs(host.weight[i]))) {
        verified = "FAIL at assignment " + std::to_string(i);
      }
    }
    const Timing t = time_device(cfg.warmup, cfg.iterations, [&] { route_cuda(rc, req, nullptr); });
    std::vector<double> host_ms;
    for (int i = 0; i < std::max(1, cfg.iterations / 4); ++i) {
      const auto t0 = Clock::now();
      route_omp(rc, req, nullptr);
      host_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    const Timing h = summarize(host_ms);
    rows_out.push_back({"router token_choice", t.median_ms, t.min_ms, n_tok / (t.median_ms * 1e-3), "tokens/s",
                        "route_omp (host)", h.median_ms, n_tok / (h.median_ms * 1e-3), verified});
  }

  // ---- permutation: plan + gather against a device-to-device copy of the gathered bytes --------
  const cuda_detail::DeviceRouting d = cuda_detail::upload_routing(r);
  const DeviceBuffer<float> d_x = to_device(x);
  cuda_detail::DevicePlan plan = cuda_detail::build_plan(d, Layout::dropless, 1);
  const int64_t rows = plan.rows;
  DeviceBuffer<float> xg(rows * hidden);
  {
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
    rows_out.push_back({"permutation (plan + gather)", t.median_ms, t.min_ms, moved / (t.median_ms * 1e-3) / 1e9,
                        "GB/s", "cudaMemcpy D2D", b.median_ms, moved / (b.median_ms * 1e-3) / 1e9,
                        same ? "ok" : "FAIL: plan differs from plan_dispatch_omp"});
  }
  cuda_detail::launch_gather(d_x.get(), hidden, d.token.get(), plan.row_assignment.get(), rows, xg.get());

  // ---- grouped GEMM (up-projection W1|W3) against one dense GEMM of the same total size ------------
  {
    std::unique_ptr<cuda_detail::LayerCore> core = cuda_detail::make_layer(w, nullptr, cfg.dtype, CudaGemmPath::grouped);
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
        const float* xr = x.data() + static_cast<int64_t>(r.token[host_plan.row_assignment[row]]) * hidden;
        for (int64_t j = 0; j < 2 * ffn; ++j) {
          const std::vector<float>& wm = j < ffn ? w.w1 : w.w3;
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
  {
    CudaMoeLayer layer(w, nullptr, cfg.dtype, CudaGemmPath::grouped);
    std::vector<float> y(static_cast<size_t>(n_tok * hidden));
    const CudaLayerOutput first = layer.forward(rc, req, nullptr, x.data(), y.data());
    std::vector<double> got, ref;
    std::vector<double> expert_out;
    const int64_t samples = std::min<int64_t>(n_tok, sample_count(2e9, 3.0 * hidden * ffn * cfg.top_k, 8));
    for (int64_t i = 0; i < samples; ++i) {
      const int64_t t = i * n_tok / samples;
      std::vector<double> acc(hidden, 0.0);
      for (int64_t a = 0; a < first.routing.num_assignments(); ++a) {
        if (first.routing.token[a] != t || !first.routing.kept[a]) continue;
        swiglu_token_ref(w, first.routing.expert[a], x.data() + t * hidden, expert_out);
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
      for (int i = 0; i < cfg.warmup; ++i) layer.forward(c, req, nullptr, x.data(), y.data());
      for (int i = 0; i < cfg.iterations; ++i) ms.push_back(layer.forward(c, req, nullptr, x.data(), y.data()).times.layer_s * 1e3);
      return summarize(ms);
    };
    RouterConfig balanced = rc;
    balanced.gating = Gating::balanced;
    const Timing t = run_layer(rc);
    const Timing b = run_layer(balanced);
    rows_out.push_back({std::string("MoE layer (route + dispatch + SwiGLU + combine) ") + to_string(cfg.dtype),
                        t.median_ms, t.min_ms, n_tok / (t.median_ms * 1e-3), "tokens/s", "same layer (balanced routing)",
                        b.median_ms, n_tok / (b.median_ms * 1e-3), verdict(nmse(got, ref), bound)});
  }
  return rows_out;
}

}  // namespace moesim
