// Expert GEMMs on cuBLAS (kernels/cuda/dispatch_gemm_cuda.cu), typed over storage dtype (fp32, tf32, bf16,
// fp16) and path (one cublasGemmGroupedBatchedEx call, or a cublasGemmEx per expert): small integers
// equal OpenBLAS exactly in every dtype; real floats and the fused SwiGLU within an NMSE bound per dtype
// against the double references of kernels/moe_ref.hpp; padding rows compute to exact zeros.
// Label gpu; each test skips with the reason when no CUDA device is present.
#include <gtest/gtest.h>

#include <cstdio>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/cuda_test_support.hpp"
#include "src/common/digest.hpp"
#include "kernels/cuda_backend.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_ref.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

template <Dtype D, CudaGemmPath P>
struct GemmConfig {
  static constexpr Dtype kDtype = D;
  static constexpr CudaGemmPath kPath = P;
};

using GemmConfigs = ::testing::Types<
    GemmConfig<Dtype::fp32, CudaGemmPath::grouped>, GemmConfig<Dtype::fp32, CudaGemmPath::per_expert>,
    GemmConfig<Dtype::tf32, CudaGemmPath::grouped>, GemmConfig<Dtype::bf16, CudaGemmPath::grouped>,
    GemmConfig<Dtype::bf16, CudaGemmPath::per_expert>, GemmConfig<Dtype::fp16, CudaGemmPath::grouped>,
    GemmConfig<Dtype::fp16, CudaGemmPath::per_expert>>;

struct GemmConfigNames {
  template <class C>
  static std::string GetName(int) {
    std::string name = to_string(C::kDtype);
    name[0] = static_cast<char>(name[0] - 'a' + 'A');
    return name + (C::kPath == CudaGemmPath::grouped ? "Grouped" : "PerExpert");
  }
};

template <class C>
class ExpertsCuda : public test::CudaTest {};
TYPED_TEST_SUITE(ExpertsCuda, GemmConfigs, GemmConfigNames);

// Empty groups, single rows, and groups on both sides of a GEMM tile.
const std::vector<int64_t> kGroupRows = {0, 1, 15, 16, 17, 0, 100, 3, 40};

std::vector<int64_t> offsets_of(const std::vector<int64_t>& rows) {
  std::vector<int64_t> offsets(rows.size() + 1, 0);
  for (size_t g = 0; g < rows.size(); ++g) offsets[g + 1] = offsets[g] + rows[g];
  return offsets;
}

// Normalised mean squared error against a reference: sum (got - ref)^2 / sum ref^2.
double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

// Bounds for uniform [-1, 1] inputs. fp32: rounding of fp32 sums (~1e-13 observed scale). tf32 and fp16
// round inputs (and fp16 outputs) to 11 significant bits: ~1e-7. bf16 rounds inputs and outputs to 8
// significant bits: ~2e-5. Each bound leaves a factor >= 5 of room.
double gemm_bound(Dtype d) {
  switch (d) {
    case Dtype::fp32: return 1e-10;
    case Dtype::bf16: return 1e-4;
    default: return 1e-5;
  }
}

// SwiGLU stores the up-projection and the activation in the storage type too: three roundings more.
double swiglu_bound(Dtype d) {
  switch (d) {
    case Dtype::fp32: return 1e-9;
    case Dtype::bf16: return 5e-4;
    default: return 2e-5;
  }
}

// Integers in -2..2 with k = 64: every product and partial sum is an integer of magnitude <= 256, exact in
// fp32 accumulation and representable in bf16, fp16 and tf32, so cuBLAS must equal OpenBLAS exactly in
// every dtype and on either path (== on values: a zero's sign may legitimately differ).
TYPED_TEST(ExpertsCuda, SmallIntegersEqualOpenblasExactly) {
  const uint64_t seed = 7100;
  const int64_t k = 64, n = 96;
  const std::vector<int64_t> offsets = offsets_of(kGroupRows);
  const int groups = static_cast<int>(kGroupRows.size());
  const int64_t rows = offsets.back();
  const std::vector<float> a = test::random_small_ints(seed, rows * k, -2, 2);
  const std::vector<float> b = test::random_small_ints(seed + 1, groups * k * n, -2, 2);
  std::vector<float> want(rows * n), got(rows * n, 999.0f);
  grouped_gemm_omp(a.data(), b.data(), offsets.data(), groups, k, n, want.data());
  grouped_gemm_cuda(a.data(), b.data(), offsets.data(), groups, k, n, got.data(), TypeParam::kDtype,
                    TypeParam::kPath);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "element " << i << " seed " << seed;
  }
  // The digests users compare (common/digest.hpp: -0 hashed as +0), printed for scripts/gpu-check.sh.
  const std::string cpu = float_digest(want.data(), want.size()), cuda = float_digest(got.data(), got.size());
  std::printf("moesim-digest: %s cpu %s cuda %s\n", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
              cpu.c_str(), cuda.c_str());
  EXPECT_EQ(cpu, cuda);
}

TYPED_TEST(ExpertsCuda, RealFloatsWithinDtypeBound) {
  const uint64_t seed = 7200;
  const int64_t k = 72, n = 40;
  const std::vector<int64_t> offsets = offsets_of(kGroupRows);
  const int groups = static_cast<int>(kGroupRows.size());
  const int64_t rows = offsets.back();
  const std::vector<float> a = test::random_floats(seed, rows * k, -1.0f, 1.0f);
  const std::vector<float> b = test::random_floats(seed + 1, groups * k * n, -1.0f, 1.0f);
  std::vector<float> ref(rows * n), got(rows * n, 999.0f);
  grouped_gemm_ref(a.data(), b.data(), offsets.data(), groups, k, n, ref.data());
  grouped_gemm_cuda(a.data(), b.data(), offsets.data(), groups, k, n, got.data(), TypeParam::kDtype,
                    TypeParam::kPath);
  EXPECT_LE(nmse(got, ref), gemm_bound(TypeParam::kDtype)) << "seed " << seed;
}

TYPED_TEST(ExpertsCuda, SwigluWithinDtypeBound) {
  const uint64_t seed = 7300;
  for (int64_t hidden : {24, 30}) {  // ffn 48: vectorised SwiGLU; ffn 30: scalar path
    const int64_t ffn = hidden == 24 ? 48 : 30;
    const ExpertWeights w = make_expert_weights(static_cast<int>(kGroupRows.size()), hidden, ffn, seed);
    const std::vector<int64_t> offsets = offsets_of(kGroupRows);
    const int64_t rows = offsets.back();
    const std::vector<float> xg = test::random_floats(seed + 1, rows * hidden, -1.0f, 1.0f);
    std::vector<float> got(rows * hidden, 7.0f), ref(rows * hidden);
    grouped_swiglu_cuda(w, xg.data(), offsets.data(), got.data(), TypeParam::kDtype, TypeParam::kPath);
    std::vector<double> out;
    for (int e = 0; e < w.num_experts; ++e) {
      for (int64_t row = offsets[e]; row < offsets[e + 1]; ++row) {
        swiglu_token_ref(w, e, xg.data() + row * hidden, out);
        for (int64_t c = 0; c < hidden; ++c) ref[row * hidden + c] = static_cast<float>(out[c]);
      }
    }
    EXPECT_LE(nmse(got, ref), swiglu_bound(TypeParam::kDtype)) << "seed " << seed << " hidden " << hidden;
  }
}

// Zero rows in, silu(0) * 0 = 0, so padding rows come out exactly zero in every dtype.
TYPED_TEST(ExpertsCuda, PaddingRowsComputeToZero) {
  const ExpertWeights w = make_expert_weights(3, 16, 32, 7400);
  const std::vector<int64_t> offsets = {0, 4, 4, 40};
  std::vector<float> xg(40 * 16, 0.0f), out(40 * 16, 5.0f);
  grouped_swiglu_cuda(w, xg.data(), offsets.data(), out.data(), TypeParam::kDtype, TypeParam::kPath);
  for (float v : out) ASSERT_EQ(v, 0.0f);
}

class ExpertsCudaShapes : public test::CudaTest {};

TEST_F(ExpertsCudaShapes, BadShapesAndDtypesAreRejected) {
  ExpertWeights w = make_expert_weights(2, 8, 8, 1);
  const std::vector<int64_t> bad = {0, 2, 1};
  std::vector<float> xg(16 * 8), out(16 * 8);
  EXPECT_THROW(grouped_swiglu_cuda(w, xg.data(), bad.data(), out.data()), PreconditionError);
  const std::vector<int64_t> good = {0, 1, 2};
  EXPECT_THROW(grouped_swiglu_cuda(w, xg.data(), good.data(), out.data(), Dtype::int8), PreconditionError);
  w.w2.pop_back();
  EXPECT_THROW(grouped_swiglu_cuda(w, xg.data(), good.data(), out.data()), PreconditionError);
  EXPECT_FALSE(cuda_supports_dtype(Dtype::fp8));
  EXPECT_TRUE(cuda_supports_dtype(Dtype::bf16));
}

}  // namespace
}  // namespace moesim
