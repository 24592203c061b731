// The CUDA backend's error handling and device handling, which run on any machine: the check macros
// (common/cuda_check.hpp) throw BackendError with the call text, file and line; without a device every
// entry point throws ResourceError (exit code 3) naming the reason, and `moesim run --backend cuda`
// exits 3 with that message; --backend rejects unknown names (exit 2); the backend module loads on any
// machine with the CUDA runtime and fills every entry of its table. Label gpu.
#include <gtest/gtest.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>
#include <vector>

#include "src/common/cuda_check.hpp"
#include "src/common/error.hpp"
#include "tests/gpu/cuda_test_support.hpp"
#include "kernels/cuda_backend.hpp"
#include "kernels/cuda_backend_module.hpp"
#include "tests/support/router_support.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CudaCheck, CudaErrorThrowsBackendErrorWithCallFileAndLine) {
  const cudaError_t failing = cudaErrorInvalidValue;
  try {
    MOESIM_CUDA_CHECK(failing);
    FAIL() << "MOESIM_CUDA_CHECK did not throw";
  } catch (const BackendError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "cudaErrorInvalidValue")) << what;
    EXPECT_TRUE(contains(what, "`failing`")) << what;
    EXPECT_TRUE(contains(what, "cuda_backend_test.cpp:")) << what;
    EXPECT_EQ(e.exit_code(), 4);
  }
  EXPECT_NO_THROW(MOESIM_CUDA_CHECK(cudaSuccess));
}

TEST(CudaCheck, CublasErrorThrowsBackendErrorWithCallFileAndLine) {
  try {
    MOESIM_CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED);
    FAIL() << "MOESIM_CUBLAS_CHECK did not throw";
  } catch (const BackendError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "cuBLAS")) << what;
    EXPECT_TRUE(contains(what, "CUBLAS_STATUS_NOT_INITIALIZED")) << what;
    EXPECT_TRUE(contains(what, "cuda_backend_test.cpp:")) << what;
  }
  EXPECT_NO_THROW(MOESIM_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
}

TEST(CudaDevice, AvailabilityComesWithAReason) {
  std::string why = "unset";
  if (cuda_device_available(&why)) {
    EXPECT_TRUE(why.empty());
    EXPECT_FALSE(cuda_device_description().empty());
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(cuda_device_description(), ResourceError);
  }
  EXPECT_EQ(cuda_device_available(nullptr), why.empty());
}

// The module moesim loads on first use (kernels/cuda_backend_module.hpp) loads without a device, its one
// export answers with this build's ABI, and no entry of the table is missing; without a device the driver
// check answers first, so this is the only test that loads it on a CPU machine.
TEST(CudaModule, LoadsWithoutADeviceAndFillsItsTable) {
  void* handle = dlopen(MOESIM_CUDA_MODULE_FILE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  using Entry = const CudaModuleTable* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaModuleEntry));
  ASSERT_NE(entry, nullptr) << kCudaModuleEntry << " is not exported";
  const CudaModuleTable* t = entry();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->abi, kCudaModuleAbi);
  const void* entries[] = {reinterpret_cast<const void*>(t->device_available),
                           reinterpret_cast<const void*>(t->device_description),
                           reinterpret_cast<const void*>(t->route),
                           reinterpret_cast<const void*>(t->token_choice_topk),
                           reinterpret_cast<const void*>(t->plan_dispatch),
                           reinterpret_cast<const void*>(t->gather_rows),
                           reinterpret_cast<const void*>(t->combine),
                           reinterpret_cast<const void*>(t->grouped_gemm_available),
                           reinterpret_cast<const void*>(t->supports_dtype),
                           reinterpret_cast<const void*>(t->grouped_gemm),
                           reinterpret_cast<const void*>(t->grouped_swiglu),
                           reinterpret_cast<const void*>(t->layer_create),
                           reinterpret_cast<const void*>(t->layer_destroy),
                           reinterpret_cast<const void*>(t->layer_forward),
                           reinterpret_cast<const void*>(t->layer_forward_routed),
                           reinterpret_cast<const void*>(t->layer_hidden),
                           reinterpret_cast<const void*>(t->layer_dtype),
                           reinterpret_cast<const void*>(t->time_layer),
                           reinterpret_cast<const void*>(t->moe_forward),
                           reinterpret_cast<const void*>(t->measure_device),
                           reinterpret_cast<const void*>(t->cached_attention),
                           reinterpret_cast<const void*>(t->cached_attention_device)};
  for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); ++i) EXPECT_NE(entries[i], nullptr) << "entry " << i;
  // The ABI number padded to a pointer, then the entries: a new entry fails this until it is listed above.
  static_assert(sizeof(CudaModuleTable) == 23 * sizeof(void*), "CudaModuleTable changed: list its entries above");
  EXPECT_TRUE(t->supports_dtype(Dtype::bf16));
  EXPECT_FALSE(t->supports_dtype(Dtype::fp8));
}

// Runs only where no device is usable: every entry point refuses with ResourceError (exit code 3).
TEST(CudaDevice, WithoutDeviceEntryPointsThrowResourceError) {
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present: this test covers machines without one";
  const std::vector<float> logits = test::random_logits(4, 4, 1);
  const RouteRequest req = test::make_request(logits, 4, 4, 2);
  try {
    route_cuda(RouterConfig{}, req, nullptr);
    FAIL() << "route_cuda ran without a device";
  } catch (const ResourceError& e) {
    EXPECT_TRUE(contains(e.what(), "no usable CUDA device")) << e.what();
    EXPECT_TRUE(contains(e.what(), why)) << e.what();
    EXPECT_EQ(e.exit_code(), kExitResource);
  }
  const Routing r = route_omp(RouterConfig{}, req, nullptr);
  EXPECT_THROW(plan_dispatch_cuda(r, Layout::dropless, 1), ResourceError);
  EXPECT_THROW(CudaMoeLayer(make_expert_weights(4, 8, 8, 1), nullptr), ResourceError);
  std::vector<int32_t> ex(8);
  std::vector<float> w(8);
  EXPECT_THROW(token_choice_topk_cuda(logits.data(), 4, 4, 2, GateWeightRule{}, ex.data(), w.data()), ResourceError);
}

TEST(CudaBackendOption, BackendCudaWithoutDeviceExitsThree) {
  std::string why;
  const testing::CliResult res = testing::run_cli("run --backend cuda --no-execute --format json");
  if (cuda_device_available(&why)) {
    EXPECT_EQ(res.exit_code, 0) << res.err;
  } else {
    EXPECT_EQ(res.exit_code, kExitResource) << res.err;
    EXPECT_TRUE(contains(res.err, "--backend cuda")) << res.err;
    EXPECT_TRUE(contains(res.err, "no usable CUDA device")) << res.err;
  }
}

TEST(CudaBackendOption, AutoAndCpuRunEverywhereAndUnknownNamesAreRejected) {
  EXPECT_EQ(testing::run_cli("run --backend cpu --no-execute --format json").exit_code, 0);
  EXPECT_EQ(testing::run_cli("run --backend auto --no-execute --format json").exit_code, 0);
  const testing::CliResult bad = testing::run_cli("run --backend tpu --no-execute");
  EXPECT_EQ(bad.exit_code, kExitBadInput) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--backend")) << bad.err;
}

}  // namespace
}  // namespace moesim
