// Host MoE layer: gather (kernels/gather.hpp) and combine (kernels/combine.hpp) on Thrust's OpenMP
// backend (its serial C++ backend for small inputs), the routed and shared SwiGLU experts on OpenBLAS,
// the seeded expert weights. x, y: [num_tokens, hidden] float32. Bytewise deterministic at any thread
// count. Host only (g++). Covered by tests/experts/moe_layer_test.cpp and tests/dispatch/gather_test.cpp;
// timed by tests/bench (gather, combine, layer).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>

#include "kernels/combine.hpp"
#include "src/common/clock.hpp"
#include "kernels/gather.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/host/reused_buffer.hpp"
#include "kernels/moe_layer.hpp"
#include "kernels/host/streaming_rows.hpp"

namespace moesim {

namespace {

// Counter-based generator (the SplitMix64 finaliser): value i of a stream depends on (key, i) only.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in (0, 1) from the top 53 bits.
double unit_open(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// Fills out[i] = scale * N(0, 1), element i from counters (2i, 2i+1) of stream (seed, tensor) (Box-Muller).
void fill_normal(std::vector<float>& out, uint64_t seed, uint64_t tensor, double scale) {
  const uint64_t key = mix64(seed ^ mix64(tensor + 0x51ed270b27a3f1e5ULL));
  const int64_t n = static_cast<int64_t>(out.size());
  constexpr double kTwoPi = 6.283185307179586476925286766559;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double u1 = unit_open(mix64(key + 2 * static_cast<uint64_t>(i)));
    const double u2 = unit_open(mix64(key + 2 * static_cast<uint64_t>(i) + 1));
    out[i] = static_cast<float>(scale * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
}

// Copies of fewer floats than this (gather, combine) run on one thread: about 2 ms of work, while an
// OpenMP fork/join can cost a scheduler tick (about 4 ms) when the machine's cores are busy.
constexpr int64_t kParallelCopyFloats = int64_t(1) << 21;

struct ExpertRowsTag;  // ReusedBuffer<ExpertRowsTag>: the expert-major rows of moe_forward_omp

using OmpPolicy = std::decay_t<decltype(thrust::omp::par)>;

// Outputs of at least this many floats are written with streaming stores: a plain store first reads the
// destination line (a third more memory traffic for a copy), and a buffer this large would not stay in
// cache for its reader anyway. The gathered rows stream from 16 MiB (half the 32 MiB last-level cache of
// the machine these were tuned on; the GEMMs read them in panels), the combined output from 32 MiB, as
// its reader (the next layer) may still find a smaller one in cache. Measured (tests/bench, A/B):
// gather at (4096, 1024, k 2), 32 MiB out, 1.3-2.0x faster streamed; combine at (16384, 1024, k 8),
// 64 MiB out, 1.7-2.1x faster; combine with 16 MiB out showed no gain.
constexpr int64_t kStreamGatherFloats = int64_t(1) << 22;
constexpr int64_t kStreamCombineFloats = int64_t(1) << 23;

// dst[0, n) = src[0, n); with streaming (non-temporal) stores when `stream` and dst is 16-byte aligned
// (x86 SSE2; a plain copy elsewhere). Callers end a streamed region with store_fence().
inline void store_floats(float* dst, const float* src, int64_t n, bool stream) {
#if defined(__SSE2__)
  if (stream && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) _mm_stream_ps(dst + c, _mm_loadu_ps(src + c));
    for (; c < n; ++c) dst[c] = src[c];
    return;
  }
#else
  (void)stream;
#endif
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// Orders this thread's streaming stores before whatever follows (the end of the parallel region).
inline void store_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace

// The OpenMP overloads of the gather and combine templates (kernels/gather.hpp, kernels/combine.hpp):
// exact policy type, so overload resolution prefers them to the generic Thrust templates. Same results
// to the bit; they differ only in how rows reach memory: large outputs are written with streaming
// stores, combine then accumulating 64 floats at a time in a local chunk (summed in the same order) so
// that each output line is stored once; smaller combines run the generic functor. One parallel region.
void gather_rows(const OmpPolicy&, const float* x, int64_t hidden, const int32_t* token,
                 const int32_t* row_assignment, int64_t rows, float* out) {
  const bool stream = rows * hidden >= kStreamGatherFloats;
  static const float kZeros[64] = {};
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      float* dst = out + row * hidden;
      const int32_t a = row_assignment[row];
      if (a >= 0) {
        store_floats(dst, x + static_cast<int64_t>(token[a]) * hidden, hidden, stream);
      } else {
        for (int64_t c = 0; c < hidden; c += 64) store_floats(dst + c, kZeros, std::min<int64_t>(64, hidden - c), stream);
      }
    }
    if (stream) store_fence();
  }
}

void combine_rows(const OmpPolicy& policy, const float* expert_out, const float* shared_out, const float* weight,
                  const uint8_t* kept, const int32_t* token_assign, const int64_t* token_offsets,
                  const int32_t* assignment_row, int64_t num_tokens, int64_t hidden, float* y) {
  if (num_tokens * hidden < kStreamCombineFloats) {
    // Output small enough to stay in cache: the generic template (explicit argument: not this overload).
    combine_rows<OmpPolicy>(policy, expert_out, shared_out, weight, kept, token_assign, token_offsets,
                            assignment_row, num_tokens, hidden, y);
    return;
  }
  constexpr int64_t kChunk = 64;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < num_tokens; ++t) {
      float* yt = y + t * hidden;
      for (int64_t c0 = 0; c0 < hidden; c0 += kChunk) {
        const int64_t len = std::min(kChunk, hidden - c0);
        // The order of detail::CombineTokenOp: 0, then each kept assignment in token order, then shared.
        float acc[kChunk];
        for (int64_t c = 0; c < len; ++c) acc[c] = 0.0f;
        for (int64_t j = token_offsets[t]; j < token_offsets[t + 1]; ++j) {
          const int32_t a = token_assign[j];
          if (!kept[a]) continue;
          const float w = weight[a];
          const float* src = expert_out + static_cast<int64_t>(assignment_row[a]) * hidden + c0;
          for (int64_t c = 0; c < len; ++c) acc[c] += w * src[c];
        }
        if (shared_out != nullptr) {
          const float* s = shared_out + t * hidden + c0;
          for (int64_t c = 0; c < len; ++c) acc[c] += s[c];
        }
        store_floats(yt + c0, acc, len, true);
      }
    }
    store_fence();
  }
}

void require_valid_weights(const ExpertWeights& w) {
  MOESIM_REQUIRE(w.num_experts >= 0 && w.hidden >= 1 && w.ffn >= 1,
                 "expert weights need num_experts >= 0, hidden, ffn >= 1; got " << w.num_experts << ", " << w.hidden
                                                                                 << ", " << w.ffn);
  const size_t per_tensor = static_cast<size_t>(w.num_experts) * w.hidden * w.ffn;
  MOESIM_REQUIRE(w.w1.size() == per_tensor && w.w3.size() == per_tensor && w.w2.size() == per_tensor,
                 "expert weights need " << per_tensor << " floats per tensor, got w1 " << w.w1.size() << ", w3 "
                                        << w.w3.size() << ", w2 " << w.w2.size());
}

ExpertWeights make_expert_weights(int num_experts, int64_t hidden, int64_t ffn, uint64_t seed) {
  MOESIM_REQUIRE(num_experts >= 0 && hidden >= 1 && ffn >= 1,
                 "make_expert_weights needs num_experts >= 0, hidden, ffn >= 1; got " << num_experts << ", "
                                                                                      << hidden << ", " << ffn);
  ExpertWeights w;
  w.num_experts = num_experts;
  w.hidden = hidden;
  w.ffn = ffn;
  const size_t per_tensor = static_cast<size_t>(num_experts) * hidden * ffn;
  w.w1.resize(per_tensor);
  w.w3.resize(per_tensor);
  w.w2.resize(per_tensor);
  fill_normal(w.w1, seed, 1, 1.0 / std::sqrt(static_cast<double>(hidden)));
  fill_normal(w.w3, seed, 3, 1.0 / std::sqrt(static_cast<double>(hidden)));
  fill_normal(w.w2, seed, 2, 1.0 / std::sqrt(static_cast<double>(ffn)));
  return w;
}

void gather_rows_omp(const float* x, int64_t hidden, const Routing& r, const DispatchPlan& plan, float* xg) {
  MOESIM_REQUIRE(hidden >= 1, "gather needs hidden >= 1, got " << hidden);
  require_plan_matches(r, plan);
  if (plan.rows * hidden * static_cast<int64_t>(sizeof(float)) >= kStreamingGatherBytes) {
    gather_rows_streaming(x, hidden, r.token.data(), plan.row_assignment.data(), plan.rows, xg);
  } else if (plan.rows * hidden >= kParallelCopyFloats) {
    gather_rows(thrust::omp::par, x, hidden, r.token.data(), plan.row_assignment.data(), plan.rows, xg);
  } else {
    gather_rows(thrust::cpp::par, x, hidden, r.token.data(), plan.row_assignment.data(), plan.rows, xg);
  }
}

void combine_omp(const Routing& r, const DispatchPlan& plan, const float* expert_out, const float* shared_out,
                 int64_t hidden, float* y) {
  MOESIM_REQUIRE(hidden >= 1, "combine needs hidden >= 1, got " << hidden);
  require_plan_matches(r, plan);
  // The index passes are a few integer operations per assignment: one thread. The weighted sums read
  // every kept row: OpenMP when that is large.
  const auto& index_policy = thrust::cpp::par;
  const int64_t n = r.num_assignments();
  std::vector<int32_t> keys(n);
  std::vector<int32_t> token_assign(n);
  std::vector<int64_t> token_offsets(r.num_tokens + 1);
  std::vector<int32_t> assignment_row(n);
  build_token_index(index_policy, r.token.data(), n, r.num_tokens, keys.data(), token_assign.data(),
                    token_offsets.data());
  invert_row_assignment(index_policy, plan.row_assignment.data(), plan.rows, n, assignment_row.data());
  if ((plan.num_kept + r.num_tokens) * hidden >= kParallelCopyFloats) {
    combine_rows(thrust::omp::par, expert_out, shared_out, r.weight.data(), r.kept.data(), token_assign.data(),
                 token_offsets.data(), assignment_row.data(), r.num_tokens, hidden, y);
  } else {
    combine_rows(thrust::cpp::par, expert_out, shared_out, r.weight.data(), r.kept.data(), token_assign.data(),
                 token_offsets.data(), assignment_row.data(), r.num_tokens, hidden, y);
  }
}

void moe_forward_omp(const ExpertWeights& w, const ExpertWeights* shared, const float* x, const Routing& r,
                     const DispatchPlan& plan, float* y, MoePhaseTimes* times, HostGemm gemm) {
  require_valid_weights(w);
  MOESIM_REQUIRE(w.num_experts == r.num_experts,
                 "expert weights have " << w.num_experts << " experts, routing " << r.num_experts);
  if (shared != nullptr) {
    require_valid_weights(*shared);
    MOESIM_REQUIRE(shared->hidden == w.hidden,
                   "shared experts have hidden " << shared->hidden << ", routed experts " << w.hidden);
  }
  require_plan_matches(r, plan);
  const int64_t hidden = w.hidden;
  const bool has_shared = shared != nullptr && shared->num_experts > 0;

  // Buffers are allocated before the clock starts: the phases time the work, not the allocator.
  // One [rows, hidden] buffer holds the gathered rows and then, in place, the expert outputs: each
  // expert's down projection overwrites its own rows after its two up projections have read them
  // (gemm_openblas.cpp). The GEMM scratch is allocated (and reused) inside grouped_swiglu_omp.
  const ReusedBuffer<ExpertRowsTag> rows_buffer(static_cast<size_t>(plan.rows * hidden));
  float* xg = rows_buffer.get();
  std::vector<float> shared_out(has_shared ? static_cast<size_t>(r.num_tokens * hidden) : 0);

  auto t0 = Clock::now();
  gather_rows_omp(x, hidden, r, plan, xg);
  const double dispatch_s = seconds_since(t0);

  t0 = Clock::now();
  grouped_swiglu_omp(w, xg, plan.padded_offsets.data(), xg, nullptr, gemm);
  if (has_shared) shared_experts_omp(*shared, x, r.num_tokens, shared_out.data(), gemm);
  const double experts_s = seconds_since(t0);

  t0 = Clock::now();
  combine_omp(r, plan, xg, has_shared ? shared_out.data() : nullptr, hidden, y);
  const double combine_s = seconds_since(t0);

  if (times != nullptr) {
    times->dispatch_s = dispatch_s;
    times->experts_s = experts_s;
    times->combine_s = combine_s;
  }
}

}  // namespace moesim
