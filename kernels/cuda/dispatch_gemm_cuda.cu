// The CUDA layer's library calls: expert GEMMs on cuBLAS (one cublasGemmGroupedBatchedEx, or one cublasGemmEx
// per problem over side streams; fp32, tf32, bf16, fp16 storage, fp32 accumulation) and the dispatch plan of a
// device routing (CUB histogram counts, CUB radix sort through the sort hook, scans and padding from
// kernels/permute.hpp) with the token index of kernels/combine.hpp. Device memory in and out; integer plans
// equal plan_dispatch_omp's. nvcc only. Tests: tests/gpu/{dispatch,experts,layer}_cuda_test.cpp.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cub/device/device_histogram.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/tabulate.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <vector>

// cub_sort.cuh first: its radix-sort overload of the sort hook must precede the permute.hpp and
// combine.hpp instantiations below.
#include "kernels/cuda/cub_sort.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe_layer_internal.cuh"
#include "kernels/combine.hpp"
#include "kernels/moe_layer.hpp"
#include "kernels/permute.hpp"
#include "router/routing.hpp"
#include "src/common/error.hpp"

namespace moesim {
namespace cuda_detail {

// ================================================================================================
// cuBLAS: row-major GEMMs, one grouped call or one call per problem
// ================================================================================================

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

// ================================================================================================
// Routing and dispatch plan on the device
// ================================================================================================

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

}  // namespace cuda_detail
}  // namespace moesim
