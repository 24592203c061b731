// Tests of the grouped expert GEMMs on OpenBLAS (kernels/grouped_gemm.hpp): the plain grouped GEMM on
// small integers must equal the double reference bit for bit; grouped SwiGLU and shared experts against
// kernels/moe_ref.hpp within a stated tolerance; padding rows compute to zeros; the small-expert rule.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_ref.hpp"
#include "tests/support/kernel_support.hpp"

namespace moesim {
namespace {

// Groups of one row, a few rows, many rows, and empty ones.
const std::vector<int64_t> kGroupRows = {0, 1, 15, 16, 17, 0, 100, 3, 40};

std::vector<int64_t> offsets_of(const std::vector<int64_t>& rows) {
  std::vector<int64_t> offsets(rows.size() + 1, 0);
  for (size_t g = 0; g < rows.size(); ++g) offsets[g + 1] = offsets[g] + rows[g];
  return offsets;
}

// Integers in -2..2 with k = 64: every product and partial sum is an integer below 2^24, so float32 is
// exact in any summation order and OpenBLAS and the fixed-order kernel must equal the reference bit for
// bit (at 1, 2 and 3 threads).
TEST(GroupedGemm, SmallIntegersMatchReferenceExactly) {
  const uint64_t seed = 6100;
  const int64_t k = 64;
  const int64_t n = 96;
  const std::vector<int64_t> offsets = offsets_of(kGroupRows);
  const int groups = static_cast<int>(kGroupRows.size());
  const int64_t rows = offsets.back();
  const std::vector<float> a = test::random_small_ints(seed, rows * k, -2, 2);
  const std::vector<float> b = test::random_small_ints(seed + 1, groups * k * n, -2, 2);
  std::vector<float> ref(rows * n, 1.0f);
  grouped_gemm_ref(a.data(), b.data(), offsets.data(), groups, k, n, ref.data());
  for (HostGemm gemm : {HostGemm::openblas, HostGemm::fixed_order}) {
    for (int threads : {1, 2, 3}) {
      test::ScopedOmpThreads scoped(threads);
      std::vector<float> got(rows * n, -1.0f);
      grouped_gemm_omp(a.data(), b.data(), offsets.data(), groups, k, n, got.data(), gemm);
      EXPECT_TRUE(test::same_bytes(got, ref)) << "seed=" << seed << " threads=" << threads
                                              << " fixed=" << (gemm == HostGemm::fixed_order);
    }
  }
}

// Tolerance 1e-4 + 1e-3 * |ref| per element: float32 BLAS sums of up to ffn = 48 terms and a float exp,
// against a double reference; the observed error is ~1e-6 relative, the bound leaves room for cancellation.
TEST(GroupedGemm, SwigluMatchesReference) {
  const uint64_t seed = 6200;
  const ExpertWeights w = make_expert_weights(static_cast<int>(kGroupRows.size()), 24, 48, seed);
  const std::vector<int64_t> offsets = offsets_of(kGroupRows);
  const int64_t rows = offsets.back();
  const std::vector<float> xg = test::random_floats(seed + 1, rows * w.hidden, -1.0f, 1.0f);
  std::vector<float> ref(rows * w.hidden);
  std::vector<double> out;
  for (int e = 0; e < w.num_experts; ++e) {
    for (int64_t row = offsets[e]; row < offsets[e + 1]; ++row) {
      swiglu_token_ref(w, e, xg.data() + row * w.hidden, out);
      for (int64_t c = 0; c < w.hidden; ++c) ref[row * w.hidden + c] = static_cast<float>(out[c]);
    }
  }
  for (HostGemm gemm : {HostGemm::openblas, HostGemm::fixed_order}) {
    std::vector<float> got(rows * w.hidden, 7.0f);
    grouped_swiglu_omp(w, xg.data(), offsets.data(), got.data(), nullptr, gemm);
    EXPECT_TRUE(test::all_near(got, ref, 1e-4, 1e-3)) << "seed=" << seed << " fixed=" << (gemm == HostGemm::fixed_order);
  }
}

// Padding rows are zeros in the gathered buffer; silu(0) * 0 = 0 and 0 * W2 = 0, so they cost compute
// but must come out exactly zero.
TEST(GroupedGemm, PaddingRowsComputeToZero) {
  const ExpertWeights w = make_expert_weights(3, 16, 32, 6300);
  const std::vector<int64_t> offsets = {0, 4, 4, 40};
  std::vector<float> xg(40 * 16, 0.0f);
  std::vector<float> out(40 * 16, 5.0f);
  grouped_swiglu_omp(w, xg.data(), offsets.data(), out.data());
  for (float v : out) ASSERT_EQ(v, 0.0f);
}

// Same tolerance and reason as SwigluMatchesReference; the two shared outputs are summed in float.
TEST(GroupedGemm, SharedExpertsMatchReference) {
  const uint64_t seed = 6400;
  for (int64_t num_tokens : {0, 1, 5, 40}) {
    const ExpertWeights shared = make_expert_weights(2, 16, 40, seed);
    const std::vector<float> x = test::random_floats(seed + 1, num_tokens * 16, -1.0f, 1.0f);
    std::vector<float> got(num_tokens * 16, 3.0f);
    shared_experts_omp(shared, x.data(), num_tokens, got.data());
    std::vector<float> ref(num_tokens * 16);
    std::vector<double> out;
    for (int64_t t = 0; t < num_tokens; ++t) {
      std::vector<double> acc(16, 0.0);
      for (int s = 0; s < 2; ++s) {
        swiglu_token_ref(shared, s, x.data() + t * 16, out);
        for (int c = 0; c < 16; ++c) acc[c] += out[c];
      }
      for (int c = 0; c < 16; ++c) ref[t * 16 + c] = static_cast<float>(acc[c]);
    }
    EXPECT_TRUE(test::all_near(got, ref, 1e-4, 1e-3)) << "seed=" << seed << " num_tokens=" << num_tokens;
  }
}

// gemm_tiles(1500, 1100), worked by hand: ceil(1500 / 1024) = 2 row blocks of 750; ceil(1100 / 1024) = 2
// column blocks of 550, rounded up to 560 (kTileColAlign), the last 540 wide.
TEST(GroupedGemm, TilesOfAWorkedShape) {
  const std::vector<GemmTile> t = gemm_tiles(1500, 1100);
  ASSERT_EQ(t.size(), 4u);
  const int64_t want[4][4] = {{0, 750, 0, 560}, {0, 750, 560, 540}, {750, 750, 0, 560}, {750, 750, 560, 540}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(t[i].row0, want[i][0]);
    EXPECT_EQ(t[i].rows, want[i][1]);
    EXPECT_EQ(t[i].col0, want[i][2]);
    EXPECT_EQ(t[i].cols, want[i][3]);
  }
  EXPECT_TRUE(gemm_tiles(0, 300).empty());
  EXPECT_TRUE(gemm_tiles(5, 0).empty());
}

// Every output element in exactly one tile, no tile over the limits, on awkward shapes.
TEST(GroupedGemm, TilesCoverTheOutputOnce) {
  for (int64_t rows : {1, 7, 1023, 1024, 1025, 2049, 4097}) {
    for (int64_t cols : {1, 15, 16, 17, 1023, 1024, 1025, 2816}) {
      std::vector<int> hits(static_cast<size_t>(rows * cols), 0);
      for (const GemmTile& t : gemm_tiles(rows, cols)) {
        ASSERT_LE(t.rows, kTileMaxRows);
        ASSERT_LE(t.cols, kTileMaxCols);
        ASSERT_GE(t.rows, 1);
        ASSERT_GE(t.cols, 1);
        for (int64_t r = t.row0; r < t.row0 + t.rows; ++r)
          for (int64_t c = t.col0; c < t.col0 + t.cols; ++c) ++hits[r * cols + c];
      }
      for (int h : hits) ASSERT_EQ(h, 1) << "rows=" << rows << " cols=" << cols;
    }
  }
}

// The tiles are fixed by the shape, so the grouped SwiGLU gives the same bytes at 1, 2 and 3 threads, on
// OpenBLAS and on the fixed-order kernel, with experts above one tile (1100, 1025 rows), ffn over two
// column tiles, and empty experts; fresh random inputs each run (the seed is printed).
TEST(GroupedGemm, SwigluSameBytesAtOneTwoAndThreeThreads) {
  const uint64_t seed = std::random_device{}();
  const std::vector<int64_t> rows_of = {0, 1, 1100, 17, 1025, 3, 0, 40};
  const ExpertWeights w = make_expert_weights(static_cast<int>(rows_of.size()), 40, 1030, seed);
  const std::vector<int64_t> offsets = offsets_of(rows_of);
  const std::vector<float> xg = test::random_floats(seed + 1, offsets.back() * w.hidden, -1.0f, 1.0f);
  for (HostGemm gemm : {HostGemm::openblas, HostGemm::fixed_order}) {
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      test::ScopedOmpThreads scoped(threads);
      std::vector<float> got(offsets.back() * w.hidden, 7.0f);
      grouped_swiglu_omp(w, xg.data(), offsets.data(), got.data(), nullptr, gemm);
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_TRUE(test::same_bytes(got, first)) << "seed=" << seed << " threads=" << threads
                                                   << " gemm=" << (gemm == HostGemm::openblas ? "openblas" : "fixed");
      }
    }
  }
}

// Without caller scratch the experts run in waves of at most 2^24 floats of g and u; here ffn = 4096 makes a
// wave at most 2048 rows, so the five experts (one alone over the bound) run in four waves. The output must
// equal, byte for byte, the one-wave run on a caller's [2 x rows x ffn] scratch, in place as moe_forward_omp
// calls it.
TEST(GroupedGemm, WavesOfOwnScratchEqualOneWave) {
  const uint64_t seed = std::random_device{}();
  const std::vector<int64_t> rows_of = {1500, 0, 1200, 3, 2100};
  const ExpertWeights w = make_expert_weights(static_cast<int>(rows_of.size()), 4, 4096, seed);
  const std::vector<int64_t> offsets = offsets_of(rows_of);
  const int64_t rows = offsets.back();
  const std::vector<float> xg = test::random_floats(seed + 1, rows * w.hidden, -1.0f, 1.0f);
  std::vector<float> one_wave(rows * w.hidden, 7.0f), waves = xg;
  std::vector<float> scratch(static_cast<size_t>(2 * rows * w.ffn));
  grouped_swiglu_omp(w, xg.data(), offsets.data(), one_wave.data(), scratch.data());
  grouped_swiglu_omp(w, waves.data(), offsets.data(), waves.data());
  EXPECT_TRUE(test::same_bytes(waves, one_wave)) << "seed=" << seed;
}

TEST(GroupedGemm, BadShapesAreRejected) {
  ExpertWeights w = make_expert_weights(2, 8, 8, 1);
  const std::vector<int64_t> offsets = {0, 2, 1};
  std::vector<float> xg(16 * 8), out(16 * 8);
  EXPECT_THROW(grouped_swiglu_omp(w, xg.data(), offsets.data(), out.data()), PreconditionError);
  w.w2.pop_back();
  const std::vector<int64_t> good = {0, 1, 2};
  EXPECT_THROW(grouped_swiglu_omp(w, xg.data(), good.data(), out.data()), PreconditionError);
}

}  // namespace
}  // namespace moesim
