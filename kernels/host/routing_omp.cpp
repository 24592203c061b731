// The router on the host backend: route_with (router/route_driver.hpp) instantiated with Thrust's
// OpenMP policy and std::vector buffers, so every gating template runs on thrust::omp::par.
// Host memory in and out; deterministic at any OpenMP thread count. Built by g++.
// Test: tests/router/route_test.cpp and the per-strategy suites (against route_ref).
#include <cstddef>
#include <utility>
#include <vector>

#include <thrust/system/omp/execution_policy.h>

#include "router/route.hpp"
#include "router/route_driver.hpp"

namespace moesim {
namespace {

struct OmpRouteTraits {
  template <class T>
  using vector = std::vector<T>;
  static auto policy() { return thrust::omp::par; }
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
};

}  // namespace

Routing route_omp(const RouterConfig& cfg, const RouteRequest& req, RouterState* state) {
  return route_with<OmpRouteTraits>(cfg, req, state);
}

}  // namespace moesim
