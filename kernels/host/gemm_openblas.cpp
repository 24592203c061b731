// Grouped expert GEMMs on OpenBLAS (OpenMP build): cblas_sgemm per expert, float32, row-major.
// Scheduling: experts are spread across the threads (one expert per thread at a time, single-threaded
// BLAS, largest first) whenever that keeps the threads evenly loaded; an expert too large to balance
// runs alone on the threaded BLAS. Deterministic at any thread count and schedule: OpenBLAS splits a
// GEMM over M and N, never over K, so each output element keeps one summation order; elementwise SwiGLU
// and the shared sum are per element. Host only (g++).
// Covered by tests/experts/grouped_gemm_test.cpp and tests/experts/moe_layer_test.cpp; timed by tests/bench.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/grouped_gemm.hpp"
#include "kernels/host/reused_buffer.hpp"

namespace moesim {

namespace {

// C[m, n] = A[m, k] * B[k, n], row-major, no transposes.
void sgemm_rows(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
}

int available_threads() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// Spread across threads while the longest thread stays within this factor of a perfect split.
constexpr double kBalanceSlack = 1.10;

// Cost of a group in the schedule: rows, but at least kSmallExpertRows (a GEMM of few rows still streams
// its whole weight matrix).
int64_t group_cost(int64_t rows) { return std::max(rows, kSmallExpertRows); }

// Finishing time of the longest thread when `costs` (descending) are taken greedily by the first free
// thread: what schedule(dynamic, 1) over the descending list does.
int64_t greedy_makespan(const std::vector<int64_t>& costs, int threads) {
  std::vector<int64_t> load(static_cast<size_t>(threads), 0);
  for (int64_t c : costs) *std::min_element(load.begin(), load.end()) += c;
  return *std::max_element(load.begin(), load.end());
}

// Which groups run across threads and which alone on the threaded BLAS.
// - Groups of fewer than kSmallExpertRows rows (run_expert_across_experts) always run across threads: too
//   small to split (OpenBLAS would fork a team for a few microseconds of work).
// - The others run across threads too, largest first, unless the split would leave one thread more than
//   kBalanceSlack over a perfect split; then the largest is moved to the threaded BLAS, and so on.
//   Across threads, a batch of experts costs one fork/join instead of four per expert (three GEMMs and the
//   SwiGLU), and a thread that the OS deschedules only delays its own expert.
struct Schedule {
  std::vector<int> across;    // descending cost, ties by lower group
  std::vector<int> threaded;  // descending rows
};

Schedule plan_schedule(const std::vector<int64_t>& rows, int threads) {
  Schedule s;
  for (int g = 0; g < static_cast<int>(rows.size()); ++g) {
    if (rows[g] > 0) s.across.push_back(g);
  }
  auto heavier = [&](int a, int b) {
    return group_cost(rows[a]) != group_cost(rows[b]) ? group_cost(rows[a]) > group_cost(rows[b]) : a < b;
  };
  std::sort(s.across.begin(), s.across.end(), heavier);
  if (threads <= 1) return s;
  while (!s.across.empty() && !run_expert_across_experts(rows[s.across.front()])) {
    std::vector<int64_t> costs;
    for (int g : s.across) costs.push_back(group_cost(rows[g]));
    const int64_t total = std::accumulate(costs.begin(), costs.end(), int64_t(0));
    if (static_cast<double>(greedy_makespan(costs, threads)) <= kBalanceSlack * static_cast<double>(total) / threads) {
      break;
    }
    s.threaded.push_back(s.across.front());
    s.across.erase(s.across.begin());
  }
  return s;
}

// Runs run(g, slot, inner_parallel) for every group with rows[g] > 0 under plan_schedule: the threaded
// groups one after another (inner_parallel = true, slot 0), then the others in one OpenMP loop over
// `threads` threads (slot = the thread's number, < threads; OpenBLAS's OpenMP build runs single-threaded inside a parallel region, it
// checks omp_in_parallel(), so no openblas_set_num_threads call is needed, which would also reset the
// OpenMP thread count).
template <class Run>
void run_schedule(const Schedule& s, int threads, Run run) {
  for (int g : s.threaded) run(g, 0, true);
  const int num_across = static_cast<int>(s.across.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (num_across > 1 && threads > 1)
  for (int i = 0; i < num_across; ++i) run(s.across[i], thread_id(), false);
}

struct GemmScratchTag;  // ReusedBuffer<GemmScratchTag>: the per-thread GEMM scratch slots

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

// One SwiGLU expert over m rows: g = x W1, u = x W3, h = silu(g) * u (into g), out = h W2.
// x: [m, hidden]; w1, w3: [hidden, ffn]; w2: [ffn, hidden]; g, u: [m, ffn] scratch; out: [m, hidden].
void swiglu_rows(const float* x, int64_t m, const float* w1, const float* w3, const float* w2, int64_t hidden,
                 int64_t ffn, float* g, float* u, float* out, bool inner_parallel) {
  sgemm_rows(x, w1, g, m, hidden, ffn);
  sgemm_rows(x, w3, u, m, hidden, ffn);
  const int64_t n = m * ffn;
#pragma omp parallel for schedule(static) if (inner_parallel && n >= 4096)
  for (int64_t i = 0; i < n; ++i) g[i] = silu(g[i]) * u[i];
  sgemm_rows(g, w2, out, m, ffn, hidden);
}

std::vector<int64_t> group_rows(const int64_t* offsets, int num_groups) {
  std::vector<int64_t> rows(num_groups);
  for (int g = 0; g < num_groups; ++g) rows[g] = offsets[g + 1] - offsets[g];
  return rows;
}

void require_offsets(const int64_t* offsets, int num_groups) {
  MOESIM_REQUIRE(num_groups >= 0, "number of groups must be >= 0, got " << num_groups);
  MOESIM_REQUIRE(offsets != nullptr, "offsets must not be null");
  MOESIM_REQUIRE(offsets[0] == 0, "offsets[0] must be 0, got " << offsets[0]);
  for (int g = 0; g < num_groups; ++g) {
    MOESIM_REQUIRE(offsets[g + 1] >= offsets[g], "offsets must be non-decreasing (group " << g << ")");
  }
}

}  // namespace

void grouped_gemm_omp(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k,
                      int64_t n, float* c) {
  require_offsets(offsets, num_groups);
  MOESIM_REQUIRE(k >= 1 && n >= 1, "grouped GEMM needs k, n >= 1, got k=" << k << " n=" << n);
  const int threads = available_threads();
  run_schedule(plan_schedule(group_rows(offsets, num_groups), threads), threads, [&](int g, int, bool) {
    sgemm_rows(a + offsets[g] * k, b + static_cast<int64_t>(g) * k * n, c + offsets[g] * n,
               offsets[g + 1] - offsets[g], k, n);
  });
}

// out may be xg itself (moe_forward_omp does that): expert e's rows are read by its two up projections
// and only then overwritten by its down projection, and no other expert touches them.
void grouped_swiglu_omp(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out,
                        float* scratch) {
  require_valid_weights(w);
  require_offsets(offsets, w.num_experts);
  const int64_t rows = offsets[w.num_experts];
  if (rows == 0) return;
  const int64_t hidden = w.hidden;
  const int64_t ffn = w.ffn;
  const std::vector<int64_t> rows_of = group_rows(offsets, w.num_experts);
  const int threads = available_threads();
  const Schedule schedule = plan_schedule(rows_of, threads);
  // Scratch rows of expert e: at row offsets[e] of the caller's [rows, ffn] halves, or, without one, in a
  // reused per-thread slot sized for the largest expert a thread runs.
  int64_t slot_rows = 0;
  for (int e : schedule.threaded) slot_rows = std::max(slot_rows, rows_of[e]);
  for (int e : schedule.across) slot_rows = std::max(slot_rows, rows_of[e]);
  const int slots = schedule.across.size() > 1 ? threads : 1;
  std::unique_ptr<ReusedBuffer<GemmScratchTag>> reused;
  if (scratch == nullptr) reused = std::make_unique<ReusedBuffer<GemmScratchTag>>(static_cast<size_t>(slots * 2 * slot_rows * ffn));
  run_schedule(schedule, threads, [&](int e, int slot, bool inner_parallel) {
    const int64_t r0 = offsets[e];
    const int64_t m = offsets[e + 1] - r0;
    float* g = reused ? reused->get() + slot * 2 * slot_rows * ffn : scratch + r0 * ffn;
    float* u = reused ? g + slot_rows * ffn : scratch + rows * ffn + r0 * ffn;
    swiglu_rows(xg + r0 * hidden, m, w.w1.data() + e * hidden * ffn, w.w3.data() + e * hidden * ffn,
                w.w2.data() + e * ffn * hidden, hidden, ffn, g, u, out + r0 * hidden, inner_parallel);
  });
}

void shared_experts_omp(const ExpertWeights& shared, const float* x, int64_t num_tokens, float* out) {
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
  std::vector<int64_t> rows(num_shared, num_tokens);
  const int threads = available_threads();
  run_schedule(plan_schedule(rows, threads), threads, [&](int s, int, bool inner_parallel) {
    float* g = scratch.data() + static_cast<int64_t>(s) * 2 * num_tokens * ffn;
    swiglu_rows(x, num_tokens, shared.w1.data() + s * hidden * ffn, shared.w3.data() + s * hidden * ffn,
                shared.w2.data() + s * ffn * hidden, hidden, ffn, g, g + num_tokens * ffn,
                per_expert.data() + s * n, inner_parallel);
  });
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float acc = per_expert[i];
    for (int s = 1; s < num_shared; ++s) acc += per_expert[static_cast<int64_t>(s) * n + i];
    out[i] = acc;
  }
}

}  // namespace moesim
