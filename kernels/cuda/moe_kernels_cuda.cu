// The kernels of the CUDA MoE layer and their launchers: float <-> storage type (fp32/tf32 as float, bf16,
// fp16) with 4-wide vector access, W1|W3 packing, gather, SwiGLU, combine and the shared-expert sum; the
// experts' upload and SwiGLU over row segments; the device check. Device memory in and out (declarations in
// kernels/cuda/moe_layer_internal.cuh); combine equals combine_omp's bit for bit (fixed order, no FMA
// contraction). nvcc only. Tests: tests/gpu/{cuda_backend,dispatch,experts,layer}_cuda_test.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe_layer_internal.cuh"
#include "kernels/moe_layer.hpp"
#include "src/common/error.hpp"

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

}  // namespace

const std::string& cached_device_problem() {
  static const std::string problem = device_problem();
  return problem;
}

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

template <class T>
void launch_sum_shared(const T* per_expert, int num_shared, int64_t n, float* out) {
  if (n == 0) return;
  sum_shared_kernel<T><<<grid_blocks(n, 256), 256, 0, stream()>>>(per_expert, num_shared, n, out);
  MOESIM_CUDA_LAUNCH_CHECK(sum_shared_kernel);
}

// ================================================================================================
// Experts on the device
// ================================================================================================

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
// Instantiations for the storage types (the other translation units see the declarations only)
// ================================================================================================

#define MOESIM_INSTANTIATE_STORAGE(T)                                                                         \
  template void launch_gather<T>(const float*, int64_t, const int32_t*, const int32_t*, int64_t, T*);         \
  template void launch_swiglu<T>(const T*, int64_t, int64_t, T*);                                             \
  template void launch_combine<T>(const T*, const float*, const float*, const uint8_t*, const int32_t*,       \
                                  const int64_t*, const int32_t*, int64_t, int64_t, float*);                  \
  template void launch_sum_shared<T>(const T*, int, int64_t, float*);                                         \
  template DeviceExperts<T> upload_experts<T>(const ExpertWeights&);                                          \
  template void run_swiglu_segments<T>(const std::vector<Segment<T>>&, int64_t, int64_t, T*, T*, T*, int64_t, \
                                       const GemmSpec&, CudaGemmPath);
MOESIM_INSTANTIATE_STORAGE(float)
MOESIM_INSTANTIATE_STORAGE(__nv_bfloat16)
MOESIM_INSTANTIATE_STORAGE(__half)
#undef MOESIM_INSTANTIATE_STORAGE

template void launch_convert<float, float>(const float*, float*, int64_t);
template void launch_convert<float, __nv_bfloat16>(const float*, __nv_bfloat16*, int64_t);
template void launch_convert<__nv_bfloat16, float>(const __nv_bfloat16*, float*, int64_t);
template void launch_convert<float, __half>(const float*, __half*, int64_t);
template void launch_convert<__half, float>(const __half*, float*, int64_t);

}  // namespace cuda_detail
}  // namespace moesim
