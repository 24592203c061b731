// Counter-based random numbers for every stage (workload, router, decoder): each draw is a pure
// function of (seed, stream, index), so noise, random gating, random drops and generated weights do not
// depend on thread count, schedule or backend. Scalar MOESIM_HD functions shared by the Thrust templates
// and the `_ref` references (both must draw the same numbers); built by g++ and nvcc.
// Covered by tests/common/counter_rng_test.cpp.
#pragma once

#include <cstdint>

#include "src/common/portability.hpp"

namespace moesim {

// Stream ids: one per use, so that two uses under the same seed never share draws.
constexpr uint64_t kStreamNoise = 1;        // noisy_top_k: index = token * num_experts + expert
constexpr uint64_t kStreamRandomGate = 2;   // random gating: index = token * 2 * top_k + draw
constexpr uint64_t kStreamRandomDrop = 3;   // drop_policy random: index = assignment
constexpr uint64_t kStreamRequestLength = 4;  // a serving step's request lengths: index = request
constexpr uint64_t kStreamRequestArrival = 5;  // a request stream's Poisson arrival gaps: index = request
constexpr uint64_t kStreamRequestOutput = 6;   // a request stream's output lengths (seeds their draws): index 0
constexpr uint64_t kStreamMtpAccept = 7;       // a serving run's accepted draft tokens: index = request << 32 | tokens
constexpr uint64_t kStreamHashBase = 16;    // hash gating: stream = kStreamHashBase + slot, index = token id
// Hash gating is a fixed function of the token id (Hash Layers): it uses this key, never the request seed.
constexpr uint64_t kHashGatingKey = 0x6d6f6573696d4831ull;

// splitmix64 finaliser (Steele, Lea, Flood 2014): a bijection on 64-bit words with full avalanche.
MOESIM_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 64 random bits for (seed, stream, index). For a fixed (seed, stream) the map index -> bits is a
// bijection, so distinct indices never collide (random drop keys are therefore all distinct).
MOESIM_HD inline uint64_t counter_hash(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

// Uniform double in [0, 1) from the top 53 bits.
MOESIM_HD inline double counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<double>(counter_hash(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0);
}

// Uniform integer in [0, n) for 1 <= n <= 2^32 (multiply-shift on the top 32 bits; bias <= n / 2^32).
MOESIM_HD inline uint32_t counter_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n) {
  return static_cast<uint32_t>(((counter_hash(seed, stream, index) >> 32) * n) >> 32);
}

// Approximately standard normal: the Irwin-Hall sum of 12 uniforms minus 6 (mean 0, variance 1,
// support [-6, 6]). Each uniform is a 24-bit midpoint (m + 0.5) / 2^24, so the sum is an exact
// multiple of 2^-24 below 2^28: the value is computed exactly in double on every backend, unlike
// Box-Muller, whose log/cos differ in the last bit between host and device libraries.
MOESIM_HD inline double counter_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t sum = 0;
  for (uint64_t r = 0; r < 6; ++r) {
    const uint64_t h = counter_hash(seed, stream, index * 6 + r);
    sum += (h >> 40) + ((h >> 8) & 0xFFFFFFull);  // two 24-bit words
  }
  return (static_cast<double>(sum) + 6.0) * (1.0 / 16777216.0) - 6.0;
}

}  // namespace moesim
