// Grouped expert GEMMs on the host (float32, row-major), on OpenBLAS (OpenMP build) or on the fixed-order
// kernel (kernels/gemm_fixed_order.hpp). Partitioning is moesim's own: every GEMM is cut into tiles whose
// shapes depend on the problem alone (expert rows, hidden, ffn), never on the thread count, and each tile
// is one single-threaded GEMM call; the threads take tiles, largest first, from one list. OpenBLAS's
// threaded sgemm is never used: its bits change with the thread count (its Haswell kernels partition
// edge tiles by thread). So the bytes are the same at any thread count and OpenMP schedule for one BLAS
// kernel; across OpenBLAS kernels (OPENBLAS_CORETYPE) they may differ in the last bits, and the
// fixed-order kernel gives the same bits everywhere. SwiGLU is elementwise per tile; the shared sum is
// per element in expert order. Host only (g++).
// Covered by tests/experts/grouped_gemm_test.cpp and tests/experts/moe_layer_test.cpp; timed by tests/bench.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/gemm_fixed_order.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/host/reused_buffer.hpp"

namespace moesim {

std::vector<GemmTile> gemm_tiles(int64_t rows, int64_t cols) {
  std::vector<GemmTile> tiles;
  if (rows <= 0 || cols <= 0) return tiles;
  // Even splits: ceil(rows / kTileMaxRows) row blocks of equal size (the last one shorter), column blocks
  // the same with the width rounded up to kTileColAlign so that BLAS kernels see whole vector widths.
  const int64_t row_blocks = (rows + kTileMaxRows - 1) / kTileMaxRows;
  const int64_t row_step = (rows + row_blocks - 1) / row_blocks;
  const int64_t col_blocks = (cols + kTileMaxCols - 1) / kTileMaxCols;
  int64_t col_step = (cols + col_blocks - 1) / col_blocks;
  col_step = std::min(cols, (col_step + kTileColAlign - 1) / kTileColAlign * kTileColAlign);
  for (int64_t r = 0; r < rows; r += row_step)
    for (int64_t c = 0; c < cols; c += col_step)
      tiles.push_back({r, std::min(row_step, rows - r), c, std::min(col_step, cols - c)});
  return tiles;
}

namespace {

int available_threads() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

// C[m, n] = A[m, k] B[k, n] on one thread, leading dimensions given. OpenBLAS's OpenMP build runs
// single-threaded inside an active parallel region (it checks omp_in_parallel()) and when
// omp_get_max_threads() is 1, which are the only two ways run_tasks calls it.
void tile_gemm(HostGemm gemm, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
               int64_t m, int64_t k, int64_t n) {
  if (gemm == HostGemm::fixed_order) {
    sgemm_fixed_order(a, lda, b, ldb, c, ldc, m, k, n);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, c,
              static_cast<int>(ldc));
}

// One tile of one group's GEMM.
struct Task {
  int group;
  GemmTile tile;
  int64_t cost;  // rows x cols x k: the order tasks are dealt in
};

// Sorts tasks by descending cost (ties: group, then position), so the threads end together.
void order_tasks(std::vector<Task>& tasks) {
  std::sort(tasks.begin(), tasks.end(), [](const Task& x, const Task& y) {
    if (x.cost != y.cost) return x.cost > y.cost;
    if (x.group != y.group) return x.group < y.group;
    return x.tile.row0 != y.tile.row0 ? x.tile.row0 < y.tile.row0 : x.tile.col0 < y.tile.col0;
  });
}

// Runs run(task) for every task across the OpenMP threads. With more than one thread the loop always
// opens a full team, even for one task: a team of one is not an active region, and there OpenBLAS
// would thread the call (and change its bits). Which thread runs a task changes no output.
template <class Run>
void run_tasks(const std::vector<Task>& tasks, Run run) {
  const int64_t n = static_cast<int64_t>(tasks.size());
  if (n == 0) return;
  const int threads = available_threads();
  if (threads <= 1) {
    for (const Task& t : tasks) run(t);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) run(tasks[i]);
}

// exp(x) for x in [-87, 0]: 2^n exp(r) with n = round(x / ln 2) in [-126, 0] and |r| <= ln 2 / 2
// (Cody-Waite reduction), exp(r) by the degree-6 polynomial of Cephes' expf; relative error below 2e-7
// (glibc's expf: 0.5 ulp). Plain arithmetic and integer bit operations, so loops over it vectorise,
// where a call to expf cannot be (about 2x faster on the SwiGLU pass, measured in tests/bench).
inline float exp_nonpositive(float x) {
  const float t = x * 1.44269504088896341f + 12582912.0f;  // + 1.5 * 2^23 rounds x / ln 2 to an integer
  const float n = t - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits - 0x4B400000 + 127) << 23;  // t's low mantissa bits hold n; 2^n as a float
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// silu(v) = v * sigmoid(v), sigmoid from e = exp(-|v|) <= 1: 1 / (1 + e) for v >= 0, e / (1 + e) for
// v < 0, so the exponential never overflows. |v| is clamped at 87 (exp(-87) is the smallest normal
// range the reduction handles): for v < -87 the result is below 2e-36 in magnitude instead of the exact
// (smaller) value. Selections by integer masks, no branches (a float comparison would keep the loop
// from vectorising under -ftrapping-math). Relative error below 3e-7 elsewhere; NaN and -0 propagate.
inline float silu(float v) {
  int32_t v_bits;
  std::memcpy(&v_bits, &v, sizeof v_bits);
  constexpr int32_t kBits87 = 0x42AE0000;                  // 87.0f
  int32_t a_bits = v_bits & 0x7fffffff;                    // |v|
  a_bits -= (a_bits - kBits87) & ((kBits87 - a_bits) >> 31);  // min(|v|, 87)
  float a;
  std::memcpy(&a, &a_bits, sizeof a);
  const float e = exp_nonpositive(-a);
  const float s_pos = 1.0f / (1.0f + e);  // sigmoid(|v|)
  const float s_neg = e * s_pos;          // sigmoid(-|v|)
  int32_t pos_bits, neg_bits;
  std::memcpy(&pos_bits, &s_pos, sizeof pos_bits);
  std::memcpy(&neg_bits, &s_neg, sizeof neg_bits);
  const int32_t negative = v_bits >> 31;  // all ones for v < 0
  const int32_t s_bits = (neg_bits & negative) | (pos_bits & ~negative);
  float s;
  std::memcpy(&s, &s_bits, sizeof s);
  return v * s;
}

// One SwiGLU group: rows of x through one expert's weights, into out; g and u are its [rows, ffn]
// scratch halves. x, out: [rows, hidden] (out may alias x: every up projection of the call reads x before
// any down projection writes out).
struct SwigluGroup {
  const float* x;
  const float* w1;  // [hidden, ffn]
  const float* w3;  // [hidden, ffn]
  const float* w2;  // [ffn, hidden]
  float* g;
  float* u;
  float* out;
  int64_t rows;
};

// Phase 1, tiles of [rows, ffn]: g = x W1, u = x W3, g = silu(g) * u. Phase 2, tiles of [rows, hidden]:
// out = g W2. Each output element is computed by one tile of a shape fixed by (rows, hidden, ffn).
void swiglu_groups(const std::vector<SwigluGroup>& groups, int64_t hidden, int64_t ffn, HostGemm gemm) {
  std::vector<Task> up, down;
  for (int gi = 0; gi < static_cast<int>(groups.size()); ++gi) {
    const int64_t rows = groups[gi].rows;
    for (const GemmTile& t : gemm_tiles(rows, ffn)) up.push_back({gi, t, t.rows * t.cols * hidden});
    for (const GemmTile& t : gemm_tiles(rows, hidden)) down.push_back({gi, t, t.rows * t.cols * ffn});
  }
  order_tasks(up);
  order_tasks(down);
  run_tasks(up, [&](const Task& task) {
    const SwigluGroup& s = groups[task.group];
    const GemmTile& t = task.tile;
    const float* x = s.x + t.row0 * hidden;
    float* g = s.g + t.row0 * ffn + t.col0;
    float* u = s.u + t.row0 * ffn + t.col0;
    tile_gemm(gemm, x, hidden, s.w1 + t.col0, ffn, g, ffn, t.rows, hidden, t.cols);
    tile_gemm(gemm, x, hidden, s.w3 + t.col0, ffn, u, ffn, t.rows, hidden, t.cols);
    for (int64_t r = 0; r < t.rows; ++r) {
      float* gr = g + r * ffn;
      const float* ur = u + r * ffn;
      for (int64_t c = 0; c < t.cols; ++c) gr[c] = silu(gr[c]) * ur[c];
    }
  });
  run_tasks(down, [&](const Task& task) {
    const SwigluGroup& s = groups[task.group];
    const GemmTile& t = task.tile;
    tile_gemm(gemm, s.g + t.row0 * ffn, ffn, s.w2 + t.col0, hidden, s.out + t.row0 * hidden + t.col0, hidden, t.rows,
              ffn, t.cols);
  });
}

void require_offsets(const int64_t* offsets, int num_groups) {
  MOESIM_REQUIRE(num_groups >= 0, "number of groups must be >= 0, got " << num_groups);
  MOESIM_REQUIRE(offsets != nullptr, "offsets must not be null");
  MOESIM_REQUIRE(offsets[0] == 0, "offsets[0] must be 0, got " << offsets[0]);
  for (int g = 0; g < num_groups; ++g) {
    MOESIM_REQUIRE(offsets[g + 1] >= offsets[g], "offsets must be non-decreasing (group " << g << ")");
  }
}

struct GemmScratchTag;  // ReusedBuffer<GemmScratchTag>: the grouped SwiGLU's g and u halves

// Floats of g and u the grouped SwiGLU holds at once when it allocates its own scratch (64 MiB): without
// a bound, a (16384 tokens, top-8, ffn 512) layer would hold 2 x 131072 x 512 floats (512 MiB).
constexpr int64_t kSwigluScratchFloats = int64_t{1} << 24;

}  // namespace

void grouped_gemm_omp(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k,
                      int64_t n, float* c, HostGemm gemm) {
  require_offsets(offsets, num_groups);
  MOESIM_REQUIRE(k >= 1 && n >= 1, "grouped GEMM needs k, n >= 1, got k=" << k << " n=" << n);
  std::vector<Task> tasks;
  for (int g = 0; g < num_groups; ++g)
    for (const GemmTile& t : gemm_tiles(offsets[g + 1] - offsets[g], n)) tasks.push_back({g, t, t.rows * t.cols * k});
  order_tasks(tasks);
  run_tasks(tasks, [&](const Task& task) {
    const GemmTile& t = task.tile;
    const int64_t row = offsets[task.group] + t.row0;
    tile_gemm(gemm, a + row * k, k, b + static_cast<int64_t>(task.group) * k * n + t.col0, n, c + row * n + t.col0, n,
              t.rows, k, t.cols);
  });
}

// out may be xg itself (moe_forward_omp does that): swiglu_groups finishes every up projection of its
// experts before the first down projection writes.
void grouped_swiglu_omp(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out,
                        float* scratch, HostGemm gemm) {
  require_valid_weights(w);
  require_offsets(offsets, w.num_experts);
  const int64_t rows = offsets[w.num_experts];
  if (rows == 0) return;
  const int64_t hidden = w.hidden;
  const int64_t ffn = w.ffn;
  auto group_of = [&](int e, float* g, float* u) {
    const int64_t r0 = offsets[e];
    return SwigluGroup{xg + r0 * hidden, w.w1.data() + e * hidden * ffn, w.w3.data() + e * hidden * ffn,
                       w.w2.data() + e * ffn * hidden, g, u, out + r0 * hidden, offsets[e + 1] - r0};
  };
  std::vector<SwigluGroup> groups;
  if (scratch != nullptr) {
    // The caller's [rows, ffn] halves hold every expert at once: one wave.
    for (int e = 0; e < w.num_experts; ++e)
      if (offsets[e + 1] > offsets[e])
        groups.push_back(group_of(e, scratch + offsets[e] * ffn, scratch + (rows + offsets[e]) * ffn));
    swiglu_groups(groups, hidden, ffn, gemm);
    return;
  }
  // Own scratch: experts in waves of consecutive experts whose g and u halves fit kSwigluScratchFloats (a
  // wave holds at least one expert), one reused buffer sized for the largest wave. A wave's down
  // projections write only its own experts' rows, which no later wave reads, so out may alias xg.
  const int64_t wave_rows_max = std::max<int64_t>(1, kSwigluScratchFloats / (2 * ffn));
  std::vector<int> wave_end;  // one past the last expert of each wave
  int64_t wave_rows = 0, buffer_rows = 0;
  for (int e = 0; e < w.num_experts; ++e) {
    const int64_t m = offsets[e + 1] - offsets[e];
    if (wave_rows > 0 && wave_rows + m > wave_rows_max) {
      wave_end.push_back(e);
      wave_rows = 0;
    }
    wave_rows += m;
    buffer_rows = std::max(buffer_rows, wave_rows);
  }
  wave_end.push_back(w.num_experts);
  const ReusedBuffer<GemmScratchTag> reused(static_cast<size_t>(2 * buffer_rows * ffn));
  float* g = reused.get();
  float* u = g + buffer_rows * ffn;
  int first = 0;
  for (int end : wave_end) {
    groups.clear();
    for (int e = first; e < end; ++e) {
      const int64_t local = (offsets[e] - offsets[first]) * ffn;
      if (offsets[e + 1] > offsets[e]) groups.push_back(group_of(e, g + local, u + local));
    }
    swiglu_groups(groups, hidden, ffn, gemm);
    first = end;
  }
}

void shared_experts_omp(const ExpertWeights& shared, const float* x, int64_t num_tokens, float* out,
                        HostGemm gemm) {
  require_valid_weights(shared);
  MOESIM_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got " << num_tokens);
  const int64_t hidden = shared.hidden;
  const int64_t ffn = shared.ffn;
  const int num_shared = shared.num_experts;
  const int64_t n = num_tokens * hidden;
  if (n == 0) return;
  if (num_shared == 0) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
    return;
  }
  // Every shared expert sees all tokens; outputs land in separate buffers and are summed in expert order.
  std::vector<float> per_expert(static_cast<size_t>(num_shared) * n);
  std::vector<float> scratch(static_cast<size_t>(num_shared) * 2 * num_tokens * ffn);
  std::vector<SwigluGroup> groups;
  for (int s = 0; s < num_shared; ++s) {
    float* g = scratch.data() + static_cast<int64_t>(s) * 2 * num_tokens * ffn;
    groups.push_back({x, shared.w1.data() + s * hidden * ffn, shared.w3.data() + s * hidden * ffn,
                      shared.w2.data() + s * ffn * hidden, g, g + num_tokens * ffn, per_expert.data() + s * n,
                      num_tokens});
  }
  swiglu_groups(groups, hidden, ffn, gemm);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float acc = per_expert[i];
    for (int s = 1; s < num_shared; ++s) acc += per_expert[static_cast<int64_t>(s) * n + i];
    out[i] = acc;
  }
}

}  // namespace moesim
