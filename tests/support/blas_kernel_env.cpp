// A global test environment of moesim_tests: when OPENBLAS_CORETYPE names an AVX-512 kernel (SkylakeX,
// Cooperlake, SapphireRapids) on a CPU without AVX-512, OpenBLAS would execute instructions the CPU
// lacks, so every test is skipped, with the reason printed, before any BLAS call. CTest's
// determinism.blas_SkylakeX entry (tests/CMakeLists.txt) reads that line as "skipped".
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

namespace {

class BlasKernelEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* v = std::getenv("OPENBLAS_CORETYPE");
    if (v == nullptr) return;
    std::string kernel = v;
    std::transform(kernel.begin(), kernel.end(), kernel.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool avx512_kernel = kernel == "skylakex" || kernel == "cooperlake" || kernel == "sapphirerapids";
#if defined(__x86_64__)
    const bool cpu_has_avx512 = __builtin_cpu_supports("avx512f");
#else
    const bool cpu_has_avx512 = false;
#endif
    if (avx512_kernel && !cpu_has_avx512) {
      std::printf("moesim-tests: skipped: OPENBLAS_CORETYPE=%s needs AVX-512, which this CPU lacks\n", v);
      GTEST_SKIP() << "OPENBLAS_CORETYPE=" << v << " needs AVX-512, which this CPU lacks";
    }
  }
};

const ::testing::Environment* const kBlasKernelEnvironment =
    ::testing::AddGlobalTestEnvironment(new BlasKernelEnvironment);

}  // namespace
