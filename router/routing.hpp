// Routing: the router's decision for one batch, as a flat list of assignments (token -> expert).
// Token-choice strategies list assignments token-major (assignment i = token * top_k + slot);
// expert choice lists them expert-major. Host-side plain data; every stage after the router reads it.
// Contract: every assignment is either kept or dropped exactly once; load[e] counts kept ones.
// Covered by tests/router/*.
#pragma once

#include <cstdint>
#include <vector>

namespace moesim {

struct Routing {
  int64_t num_tokens = 0;
  int num_experts = 0;
  int top_k = 0;           // experts requested per token (expert choice: the k in its capacity)
  int64_t capacity = 0;    // C per expert; 0 = dropless
  std::vector<int32_t> token;   // [num_assignments] token index of each assignment
  std::vector<int32_t> expert;  // [num_assignments] expert id in [0, num_experts)
  std::vector<float> weight;    // [num_assignments] combine weight
  std::vector<uint8_t> kept;    // [num_assignments] 1 = processed, 0 = dropped by capacity

  int64_t num_assignments() const { return static_cast<int64_t>(expert.size()); }
};

}  // namespace moesim
