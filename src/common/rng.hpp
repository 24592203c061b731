// Counter-based random numbers for host code: value = f(seed, stream, index), so a result never
// depends on the order or the thread that draws it. splitmix64 finaliser (Steele et al. 2014) and
// Box-Muller for normals. Host only. Covered by tests/workload/synthetic_logits_test.cpp.
#pragma once

#include <cmath>
#include <cstdint>

namespace moesim {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t counter_hash(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

// Uniform in (0, 1): 53 random bits, never exactly 0.
inline double counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (static_cast<double>(counter_hash(seed, stream, index) >> 11) + 0.5) * 0x1.0p-53;
}

// Standard normal by Box-Muller from two independent uniforms.
inline double counter_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const double u1 = counter_uniform(seed, stream, 2 * index);
  const double u2 = counter_uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace moesim
