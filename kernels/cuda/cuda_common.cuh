// What every CUDA translation unit of moesim shares: the stream (cudaStreamPerThread), the Thrust CUDA
// policy with a stream-ordered allocator (CudaPolicy, the exact type the CUB overloads take), owning device
// buffers, host<->device copies, CUDA-event timers, the device check and the router traits for
// route_with (router/route_driver.hpp). Every call is checked (common/cuda_check.hpp).
// nvcc only (kernels/cuda/*.cu). Covered by every tests/gpu/*_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <thrust/system/cuda/execution_policy.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/common/cuda_check.hpp"
#include "src/common/error.hpp"
#include "kernels/cuda_backend.hpp"

namespace moesim {
namespace cuda_detail {

// All moesim work on the device runs on the calling thread's default stream: no stream has to be
// threaded through the backend-neutral templates, and two host threads never serialise on each other.
inline cudaStream_t stream() { return cudaStreamPerThread; }

// Throws ResourceError when no device can be used; otherwise, once per process, raises the release
// threshold of the device's default memory pool so that stream-ordered allocations are reused
// instead of returned to the driver at every synchronisation.
void require_device();

// Thrust's temporary storage (sort, scan buffers) from cudaMallocAsync on stream(): no device-wide
// synchronisation per algorithm call, as plain cudaMalloc/cudaFree would cause.
struct StreamAllocator {
  using value_type = char;
  char* allocate(std::ptrdiff_t bytes) {
    void* p = nullptr;
    if (bytes > 0) MOESIM_CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(bytes), stream()));
    return static_cast<char*>(p);
  }
  void deallocate(char* p, size_t) {
    if (p != nullptr) cudaFreeAsync(p, stream());  // no throw from a deallocation path
  }
};

inline StreamAllocator& thrust_allocator() {
  static StreamAllocator alloc;
  return alloc;
}

// The CUDA execution policy of moesim: no optional synchronisation, temporary storage stream-ordered.
using CudaPolicy = decltype(thrust::cuda::par_nosync(thrust_allocator()).on(cudaStream_t{}));

inline CudaPolicy cuda_policy() { return thrust::cuda::par_nosync(thrust_allocator()).on(stream()); }

// An owning device array of n elements, allocated stream-ordered, not initialised.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : size_(n) {
    if (n > 0) {
      void* p = nullptr;
      MOESIM_CUDA_CHECK(cudaMallocAsync(&p, n * sizeof(T), stream()));
      ptr_ = static_cast<T*>(p);
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  T* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void release() {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream());
    ptr_ = nullptr;
    size_ = 0;
  }
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

template <class T>
void copy_to_device(T* dst, const T* host, size_t n) {
  if (n > 0) MOESIM_CUDA_CHECK(cudaMemcpyAsync(dst, host, n * sizeof(T), cudaMemcpyHostToDevice, stream()));
}

template <class T>
DeviceBuffer<T> to_device(const T* host, size_t n) {
  DeviceBuffer<T> d(n);
  copy_to_device(d.get(), host, n);
  return d;
}

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  return to_device(host.data(), host.size());
}

// Copies n elements to host memory and waits for them.
template <class T>
void copy_to_host(T* host, const T* src, size_t n) {
  if (n == 0) return;
  MOESIM_CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream()));
  MOESIM_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

template <class T>
std::vector<T> to_host(const T* src, size_t n) {
  std::vector<T> out(n);
  copy_to_host(out.data(), src, n);
  return out;
}

template <class T>
T read_one(const T* src) {
  T v{};
  copy_to_host(&v, src, 1);
  return v;
}

// Elapsed device time between two points on stream(), from CUDA events.
class EventTimer {
 public:
  EventTimer() {
    MOESIM_CUDA_CHECK(cudaEventCreate(&start_));
    MOESIM_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start() { MOESIM_CUDA_CHECK(cudaEventRecord(start_, stream())); }
  // Records the stop event, waits for it and returns the seconds since start().
  double stop_s() {
    MOESIM_CUDA_CHECK(cudaEventRecord(stop_, stream()));
    MOESIM_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    MOESIM_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Blocks for a grid-stride loop over n items: enough to fill the device, at most 65535 * 8.
inline unsigned grid_blocks(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 524280 ? 524280 : blocks));
}

// Traits of route_with (router/route_driver.hpp) on the device: DeviceBuffer storage, cuda_policy().
struct CudaRouteTraits {
  template <class T>
  using vector = DeviceBuffer<T>;
  static CudaPolicy policy() { return cuda_policy(); }
  template <class T>
  static vector<T> make(size_t n) {
    return vector<T>(n);
  }
  template <class T>
  static T* data(vector<T>& v) {
    return v.get();
  }
  template <class T>
  static vector<T> copy_in(const T* host, size_t n) {
    return to_device(host, n);
  }
  template <class T>
  static const T* view(const T* host, size_t n, vector<T>& holder) {
    holder = to_device(host, n);
    return holder.get();
  }
  template <class T>
  static std::vector<T> copy_out(vector<T>&& v) {
    vector<T> owned = std::move(v);
    return to_host(owned.get(), owned.size());
  }
};

}  // namespace cuda_detail
}  // namespace moesim
