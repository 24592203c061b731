// The router on the host backend: route_with (router/route_driver.hpp) instantiated with Thrust's
// OpenMP policy for large batches and its serial C++ policy for small ones, with std::vector buffers.
// Host memory in and out; deterministic at any OpenMP thread count (both policies run the same
// templates). Built by g++. Test: tests/router/route_test.cpp and the per-strategy suites (against
// route_ref); timed by tests/bench (gating, router).
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>

#include "router/route.hpp"
#include "router/route_driver.hpp"
#include "kernels/host/expert_choice_rows.hpp"
#include "kernels/host/topk_rows.hpp"

namespace moesim {
namespace {

// Batches with fewer logits than this are routed on one thread: a token-choice pass is a few
// nanoseconds per logit (about 2 ms at this size), while each OpenMP fork/join of a Thrust call can cost
// a scheduler tick (about 4 ms) when the machine's cores are busy with other work.
constexpr int64_t kParallelRouteLogits = int64_t(1) << 20;

template <bool kParallel>
struct HostRouteTraits {
  template <class T>
  using vector = std::vector<T>;
  static auto policy() {
    if constexpr (kParallel) {
      return thrust::omp::par;
    } else {
      return thrust::cpp::par;
    }
  }
  template <class T>
  static vector<T> make(size_t n) {
    return vector<T>(n);
  }
  template <class T>
  static T* data(vector<T>& v) {
    return v.data();
  }
  template <class T>
  static vector<T> copy_in(const T* host, size_t n) {
    return vector<T>(host, host + n);
  }
  // Host memory is the backend's memory: no copy.
  template <class T>
  static const T* view(const T* host, size_t, vector<T>&) {
    return host;
  }
  template <class T>
  static std::vector<T> copy_out(vector<T>&& v) {
    return std::move(v);
  }
  // Expert choice by a selection per expert (kernels/host/expert_choice_rows.hpp).
  static void expert_choice(const float* logits, int64_t n, int num_experts, ScoreFunction score, double scaling,
                            int64_t capacity, int64_t group_tokens, int32_t* token, int32_t* expert, float* weight,
                            double* score_scratch) {
    expert_choice_rows(logits, n, num_experts, score, scaling, capacity, group_tokens, token, expert, weight,
                       score_scratch, kParallel);
  }
  // Token choice in one pass over each token's logits, SIMD selection (kernels/host/topk_rows.hpp).
  static int64_t token_choice(const float* logits, int64_t n, int num_experts, int top_k, const GateWeightRule& rule,
                              int32_t* expert, float* weight, double* key) {
    return token_choice_rows(logits, n, num_experts, top_k, rule, expert, weight, key, kParallel);
  }
};

}  // namespace

Routing route_omp(const RouterConfig& cfg, const RouteRequest& req, RouterState* state) {
  if (req.num_tokens * static_cast<int64_t>(req.num_experts) >= kParallelRouteLogits) {
    return route_with<HostRouteTraits<true>>(cfg, req, state);
  }
  return route_with<HostRouteTraits<false>>(cfg, req, state);
}

}  // namespace moesim
