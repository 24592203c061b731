// One macro family for every CUDA runtime and cuBLAS call: MOESIM_CUDA_CHECK(expr), MOESIM_CUBLAS_CHECK(expr)
// and MOESIM_CUDA_LAUNCH_CHECK() after each kernel launch. All go through throw_backend_error, which
// records the call text, file and line and throws moesim::BackendError. With MOESIM_SYNC_CHECKS (CMake
// option) every launch check also synchronises the device, so an asynchronous fault names its launch.
// Header only; included by kernels/cuda/*.cu (nvcc). Covered by tests/gpu/cuda_check_test.cpp.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <sstream>
#include <string>

#include "src/common/error.hpp"

namespace moesim {
namespace cuda_detail {

// The one helper of the family: "<file>:<line>: <library> error <what> in `<expr>`".
[[noreturn]] inline void throw_backend_error(const char* library, const std::string& what, const char* expr,
                                             const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": " << library << " error " << what << " in `" << expr << "`";
  throw BackendError(os.str());
}

inline void check_cuda(cudaError_t status, const char* expr, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw_backend_error("CUDA", std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")", expr,
                      file, line);
}

inline void check_cublas(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw_backend_error("cuBLAS", std::string(cublasGetStatusName(status)) + " (" + cublasGetStatusString(status) + ")",
                      expr, file, line);
}

// After a launch: the configuration error now (cudaGetLastError), and with MOESIM_SYNC_CHECKS any fault
// of the kernel itself (cudaDeviceSynchronize).
inline void check_launch(const char* what, const char* file, int line) {
  check_cuda(cudaGetLastError(), what, file, line);
#if defined(MOESIM_SYNC_CHECKS)
  check_cuda(cudaDeviceSynchronize(), what, file, line);
#endif
}

}  // namespace cuda_detail
}  // namespace moesim

#define MOESIM_CUDA_CHECK(expr) ::moesim::cuda_detail::check_cuda((expr), #expr, __FILE__, __LINE__)
#define MOESIM_CUBLAS_CHECK(expr) ::moesim::cuda_detail::check_cublas((expr), #expr, __FILE__, __LINE__)
// Place right after a <<<...>>> launch; `name` is the kernel, for the message.
#define MOESIM_CUDA_LAUNCH_CHECK(name) ::moesim::cuda_detail::check_launch("launch of " #name, __FILE__, __LINE__)
