// A grow-only float buffer reused across calls, one per Tag type (each user names its own, so two users
// never share storage). Large fresh allocations are mapped anew by malloc and cost a page fault per 4 KiB
// page on first touch, about 10 us each on a virtual machine (1.4 s per 512 MiB measured here): as much as
// the GEMMs of a mid-size layer. One caller holds the buffer at a time; a concurrent caller gets a buffer
// of its own. The shared one stays allocated, at the largest size asked, until exit.
// Host only. Used by kernels/host/gemm_openblas.cpp (GEMM scratch) and moe_layer_omp.cpp (expert rows).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

namespace moesim {

template <class Tag>
class ReusedBuffer {
 public:
  explicit ReusedBuffer(size_t n) : lock_(shared().mutex, std::try_to_lock) {
    Storage& s = lock_.owns_lock() ? shared() : own_;
    if (s.size < n) {
      s.data.reset();  // release before allocating: the old and new buffers never coexist
      s.data.reset(new float[n]);
      s.size = n;
    }
    ptr_ = s.data.get();
  }
  float* get() const { return ptr_; }

 private:
  struct Storage {
    std::mutex mutex;
    std::unique_ptr<float[]> data;
    size_t size = 0;
  };
  static Storage& shared() {
    static Storage s;
    return s;
  }
  std::unique_lock<std::mutex> lock_;
  Storage own_;
  float* ptr_ = nullptr;
};

}  // namespace moesim
