// Test helpers for the dispatch and expert kernels: seeded Routing generators (token-major with drops,
// expert-major, capacity drops), random float and small-integer tensors, plan and tensor comparators,
// and an OpenMP thread-count guard. Header only; used by tests/dispatch/*_test.cpp, tests/experts/*_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/moe_layer.hpp"

namespace moesim::test {

// Token-choice routing, token-major (assignment = token * top_k + slot): each token picks top_k distinct
// experts; the first third of the experts is favoured by `skew` (so others can stay empty); weights in
// (0, 1); each assignment dropped with probability drop_prob. capacity stays 0.
inline Routing random_token_choice(uint64_t seed, int64_t num_tokens, int num_experts, int top_k, double drop_prob,
                                   double skew = 0.5) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Routing r;
  r.num_tokens = num_tokens;
  r.num_experts = num_experts;
  r.top_k = top_k;
  std::vector<double> score(num_experts);
  std::vector<int> ids(num_experts);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int e = 0; e < num_experts; ++e) score[e] = unit(rng) + (3 * e < num_experts ? skew : 0.0);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(), [&](int a, int b) { return score[a] > score[b]; });
    for (int s = 0; s < top_k; ++s) {
      r.token.push_back(static_cast<int32_t>(t));
      r.expert.push_back(ids[s]);
      r.weight.push_back(static_cast<float>(unit(rng)));
      r.kept.push_back(unit(rng) < drop_prob ? 0 : 1);
    }
  }
  return r;
}

// Every token on one expert (top_k = 1, weight 1, nothing dropped).
inline Routing single_expert_routing(int64_t num_tokens, int num_experts, int expert) {
  Routing r;
  r.num_tokens = num_tokens;
  r.num_experts = num_experts;
  r.top_k = 1;
  for (int64_t t = 0; t < num_tokens; ++t) {
    r.token.push_back(static_cast<int32_t>(t));
    r.expert.push_back(expert);
    r.weight.push_back(1.0f);
    r.kept.push_back(1);
  }
  return r;
}

// Expert-choice routing, expert-major: each expert takes min(capacity, num_tokens) distinct random tokens
// (in random order, so the token index must sort them), weights in (0, 1), nothing dropped.
inline Routing expert_choice_routing(uint64_t seed, int64_t num_tokens, int num_experts, int64_t capacity) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Routing r;
  r.num_tokens = num_tokens;
  r.num_experts = num_experts;
  r.top_k = static_cast<int>(capacity);
  r.capacity = capacity;
  std::vector<int32_t> tokens(num_tokens);
  for (int e = 0; e < num_experts; ++e) {
    std::iota(tokens.begin(), tokens.end(), 0);
    std::shuffle(tokens.begin(), tokens.end(), rng);
    for (int64_t j = 0; j < std::min(capacity, num_tokens); ++j) {
      r.token.push_back(tokens[j]);
      r.expert.push_back(e);
      r.weight.push_back(static_cast<float>(unit(rng)));
      r.kept.push_back(1);
    }
  }
  return r;
}

// Position-priority capacity: in assignment order, an assignment beyond the capacity-th kept one of its
// expert is dropped. Sets r.capacity.
inline void apply_capacity(Routing& r, int64_t capacity) {
  std::vector<int64_t> load(r.num_experts, 0);
  for (int64_t a = 0; a < r.num_assignments(); ++a) {
    if (!r.kept[a]) continue;
    if (load[r.expert[a]] >= capacity) {
      r.kept[a] = 0;
    } else {
      load[r.expert[a]] += 1;
    }
  }
  r.capacity = capacity;
}

inline std::vector<float> random_floats(uint64_t seed, int64_t n, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Integers in [lo, hi] stored as floats: products and sums stay exact in float32 for small sizes.
inline std::vector<float> random_small_ints(uint64_t seed, int64_t n, int lo, int hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(dist(rng));
  return v;
}

// Per-element |got - ref| <= abs_tol + rel_tol * |ref|; reports the first mismatch and the count.
inline ::testing::AssertionResult all_near(const std::vector<float>& got, const std::vector<float>& ref,
                                           double abs_tol, double rel_tol) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << ref.size();
  }
  int64_t bad = 0;
  int64_t first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(diff <= abs_tol + rel_tol * std::fabs(static_cast<double>(ref[i])))) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements out of tolerance; first at "
                                       << first << ": got " << got[first] << ", ref " << ref[first];
}

// Bytewise equality of two float tensors (determinism checks).
inline ::testing::AssertionResult same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "first byte difference at element " << i << ": " << a[i] << " vs "
                                           << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
::testing::AssertionResult same_vector(const char* what, const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << what << " sizes differ: " << a.size() << " vs " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      return ::testing::AssertionFailure() << what << "[" << i << "] differs: " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Exact equality of every integer field of two plans.
inline ::testing::AssertionResult plans_equal(const DispatchPlan& a, const DispatchPlan& b) {
  if (a.num_experts != b.num_experts || a.layout != b.layout || a.num_kept != b.num_kept || a.rows != b.rows) {
    return ::testing::AssertionFailure() << "header differs: experts " << a.num_experts << "/" << b.num_experts
                                         << ", kept " << a.num_kept << "/" << b.num_kept << ", rows " << a.rows << "/"
                                         << b.rows;
  }
  for (auto res : {same_vector("counts", a.counts, b.counts), same_vector("offsets", a.offsets, b.offsets),
                   same_vector("padded_offsets", a.padded_offsets, b.padded_offsets)}) {
    if (!res) return res;
  }
  for (auto res : {same_vector("order", a.order, b.order), same_vector("row_assignment", a.row_assignment,
                                                                        b.row_assignment)}) {
    if (!res) return res;
  }
  return ::testing::AssertionSuccess();
}

inline std::string describe(uint64_t seed, const Routing& r) {
  std::ostringstream os;
  os << "seed=" << seed << " num_tokens=" << r.num_tokens << " num_experts=" << r.num_experts
     << " top_k=" << r.top_k << " capacity=" << r.capacity << " assignments=" << r.num_assignments();
  return os.str();
}

inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::dropless: return "dropless";
    case Layout::block: return "block";
    case Layout::capacity: return "capacity";
  }
  return "?";
}

// Sets the OpenMP thread count (which OpenBLAS's OpenMP build follows too) for a scope.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) {
#ifdef _OPENMP
    saved_ = omp_get_max_threads();
    omp_set_num_threads(n);
#else
    (void)n;
#endif
  }
  ~ScopedOmpThreads() {
#ifdef _OPENMP
    omp_set_num_threads(saved_);
#endif
  }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_ = 1;
};

}  // namespace moesim::test
