// Token-choice rows on the host (see topk_rows.hpp). The SIMD bodies are compiled for their instruction
// sets with target attributes and run only where __builtin_cpu_supports says the CPU has them.
#include "kernels/host/topk_rows.hpp"

// GCC 12's avx512fintrin.h builds _mm512_max_ps from an undefined vector and then warns about it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "src/common/error.hpp"

namespace moesim {
namespace {

using router_detail::gate_weights;
using router_detail::insert_topk;
using router_detail::select_topk_row;

// The AVX-512 body compacts a row's candidates on the stack: wider rows take the AVX2 body.
constexpr int kMaxRowExperts = 4096;

// The top_k-th largest of lane[0..lanes) (lanes >= top_k), by insertion into a descending list.
inline float kth_largest(const float* lane, int lanes, int top_k) {
  float best[16];
  int count = 0;
  for (int l = 0; l < lanes; ++l) {
    const float v = lane[l];
    if (count == top_k && !(v > best[top_k - 1])) continue;
    int pos = count < top_k ? count : top_k - 1;
    while (pos > 0 && v > best[pos - 1]) {
      best[pos] = best[pos - 1];
      --pos;
    }
    best[pos] = v;
    if (count < top_k) ++count;
  }
  return best[top_k - 1];
}

// The portable body: the finite check, then select_topk_row.
inline bool row_portable(const float* row, int num_experts, int top_k, int32_t* ex, double* key, int* bad) {
  for (int e = 0; e < num_experts; ++e) {
    if (!std::isfinite(row[e])) {
      *bad = e;
      return false;
    }
  }
  select_topk_row(row, num_experts, top_k, ex, key);
  return true;
}

__attribute__((target("avx2"))) bool row_avx2(const float* row, int num_experts, int top_k, int32_t* ex,
                                             double* key, int* bad) {
  constexpr int kLanes = 8;
  const int full = num_experts / kLanes * kLanes;
  if (top_k > kLanes || full < kLanes) return row_portable(row, num_experts, top_k, ex, key, bad);
  __m256 lane_max = _mm256_loadu_ps(row);
  __m256 not_finite = _mm256_setzero_ps();
  for (int e = 0; e < full; e += kLanes) {
    const __m256 v = _mm256_loadu_ps(row + e);
    lane_max = _mm256_max_ps(lane_max, v);
    not_finite = _mm256_or_ps(not_finite, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
  }
  bool finite = _mm256_movemask_ps(not_finite) == 0;
  for (int e = full; e < num_experts; ++e) finite = finite && std::isfinite(row[e]);
  if (!finite) return row_portable(row, num_experts, top_k, ex, key, bad);
  alignas(32) float lanes[kLanes];
  _mm256_store_ps(lanes, lane_max);
  const float t = kth_largest(lanes, kLanes, top_k);
  const __m256 bound = _mm256_set1_ps(t);
  int count = 0;
  for (int e = 0; e < full; e += kLanes) {
    unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + e), bound, _CMP_GE_OQ)));
    while (mask != 0) {
      const int i = e + __builtin_ctz(mask);
      insert_topk(row[i], i, top_k, count, ex, key);
      mask &= mask - 1;
    }
  }
  for (int e = full; e < num_experts; ++e)
    if (!(row[e] < t)) insert_topk(row[e], e, top_k, count, ex, key);
  return true;
}

// The rank of each of the first n values of v (n <= 16) in descending order, ties to the lower position:
// rank[i] = #{j: v[j] > v[i]} + #{j < i: v[j] == v[i]}, distinct, branch-free.
__attribute__((target("avx512f"))) inline void ranks16(__m512 v, int n, int* rank) {
  const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1u);
  alignas(64) float vals[16];
  _mm512_store_ps(vals, v);
  for (int i = 0; i < n; ++i) {
    const __m512 b = _mm512_set1_ps(vals[i]);
    const __mmask16 greater = _mm512_mask_cmp_ps_mask(valid, v, b, _CMP_GT_OQ);
    const __mmask16 equal_before = _mm512_mask_cmp_ps_mask(static_cast<__mmask16>((1u << i) - 1u), v, b, _CMP_EQ_OQ);
    rank[i] = __builtin_popcount(greater) + __builtin_popcount(equal_before);
  }
}

__attribute__((target("avx512f"))) bool row_avx512(const float* row, int num_experts, int top_k, int32_t* ex,
                                                  double* key, int* bad) {
  constexpr int kLanes = 16;
  const int full = num_experts / kLanes * kLanes;
  if (top_k > kLanes || full < kLanes || num_experts > kMaxRowExperts)
    return row_avx2(row, num_experts, top_k, ex, key, bad);
  __m512 lane_max = _mm512_loadu_ps(row);
  __mmask16 not_finite = 0;
  for (int e = 0; e < full; e += kLanes) {
    const __m512 v = _mm512_loadu_ps(row + e);
    lane_max = _mm512_max_ps(lane_max, v);
    not_finite |= _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_NEQ_UQ);
  }
  bool finite = not_finite == 0;
  for (int e = full; e < num_experts; ++e) finite = finite && std::isfinite(row[e]);
  if (!finite) return row_portable(row, num_experts, top_k, ex, key, bad);
  // T: the top_k-th largest lane maximum.
  int rank[kLanes];
  ranks16(lane_max, kLanes, rank);
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, lane_max);
  float t = lanes[0];
  for (int l = 0; l < kLanes; ++l) t = rank[l] == top_k - 1 ? lanes[l] : t;
  const __m512 bound = _mm512_set1_ps(t);
  // The candidates, compacted in expert order without a branch per chunk.
  alignas(64) float cand_val[kMaxRowExperts];
  alignas(64) int32_t cand_idx[kMaxRowExperts];
  int n = 0;
  const __m512i step = _mm512_set1_epi32(kLanes);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int e = 0; e < full; e += kLanes, idx = _mm512_add_epi32(idx, step)) {
    const __m512 v = _mm512_loadu_ps(row + e);
    const __mmask16 m = _mm512_cmp_ps_mask(v, bound, _CMP_GE_OQ);
    _mm512_mask_compressstoreu_ps(cand_val + n, m, v);
    _mm512_mask_compressstoreu_epi32(cand_idx + n, m, idx);
    n += __builtin_popcount(m);
  }
  for (int e = full; e < num_experts; ++e) {
    if (!(row[e] < t)) {
      cand_val[n] = row[e];
      cand_idx[n++] = e;
    }
  }
  if (n <= kLanes) {
    // At most 16 candidates (the usual case): each one's rank places it, ties to the lower expert.
    const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), cand_val);
    ranks16(v, n, rank);
    for (int i = 0; i < n; ++i) {
      if (rank[i] < top_k) {
        ex[rank[i]] = cand_idx[i];
        key[rank[i]] = cand_val[i];
      }
    }
    return true;
  }
  int count = 0;
  for (int i = 0; i < n; ++i) insert_topk(cand_val[i], cand_idx[i], top_k, count, ex, key);
  return true;
}

using RowFn = bool (*)(const float*, int, int, int32_t*, double*, int*);

RowFn row_fn(TopKBody body) {
  switch (body) {
    case TopKBody::avx512: return &row_avx512;
    case TopKBody::avx2: return &row_avx2;
    case TopKBody::portable: break;
  }
  return &row_portable;
}

bool cpu_has(TopKBody body) {
  switch (body) {
    case TopKBody::avx512: return __builtin_cpu_supports("avx512f");
    case TopKBody::avx2: return __builtin_cpu_supports("avx2");
    case TopKBody::portable: return true;
  }
  return false;
}

}  // namespace

const char* to_string(TopKBody b) {
  switch (b) {
    case TopKBody::portable: return "portable";
    case TopKBody::avx2: return "avx2";
    case TopKBody::avx512: return "avx512";
  }
  return "?";
}

std::vector<TopKBody> available_topk_bodies() {
  std::vector<TopKBody> out;
  for (TopKBody b : {TopKBody::portable, TopKBody::avx2, TopKBody::avx512})
    if (cpu_has(b)) out.push_back(b);
  return out;
}

TopKBody default_topk_body() {
  static const TopKBody body = [] {
    if (const char* forced = std::getenv("MOESIM_TOPK_KERNEL"); forced != nullptr && *forced != '\0') {
      for (TopKBody b : available_topk_bodies())
        if (std::strcmp(forced, to_string(b)) == 0) return b;
    }
    return available_topk_bodies().back();
  }();
  return body;
}

int64_t token_choice_rows(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                          const GateWeightRule& rule, int32_t* expert, float* weight, double* key_scratch,
                          bool parallel, TopKBody body) {
  MOESIM_REQUIRE(num_experts >= 1 && top_k >= 1 && top_k <= num_experts,
                 "token_choice_rows needs 1 <= top_k <= num_experts, got " << top_k << " of " << num_experts);
  MOESIM_REQUIRE(cpu_has(body), "token_choice_rows: this CPU has no " << to_string(body) << " body");
  const RowFn fn = row_fn(body);
  int64_t first_bad = std::numeric_limits<int64_t>::max();
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (parallel)
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (first_bad <= t * num_experts) continue;  // an earlier token of this thread already failed
    const float* row = logits + t * num_experts;
    int32_t* ex = expert + t * top_k;
    double* key = key_scratch + t * top_k;
    int bad = -1;
    if (!fn(row, num_experts, top_k, ex, key, &bad)) {
      first_bad = std::min(first_bad, t * num_experts + bad);
      continue;
    }
    gate_weights(row, num_experts, ex, top_k, rule, weight + t * top_k);
  }
  return first_bad == std::numeric_limits<int64_t>::max() ? -1 : first_bad;
}

}  // namespace moesim
