// Serial reference for hash_gating.hpp: the same hash and forward probing, with plain loops and
// std::find. Out: expert, weight [num_tokens * top_k] token-major; deterministic by construction.
// Host only. Test: tests/router/hash_gating_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "src/common/counter_rng.hpp"

namespace moesim {

inline void hash_gating_ref(const int64_t* token_ids, int64_t num_tokens, int num_experts, int top_k, double scaling,
                            std::vector<int32_t>& expert, std::vector<float>& weight) {
  expert.clear();
  weight.clear();
  for (int64_t t = 0; t < num_tokens; ++t) {
    const uint64_t id = static_cast<uint64_t>(token_ids ? token_ids[t] : t);
    std::vector<int32_t> chosen;
    for (int j = 0; j < top_k; ++j) {
      const uint64_t h = counter_hash(kHashGatingKey, kStreamHashBase + static_cast<uint64_t>(j), id);
      int32_t e = static_cast<int32_t>(h % static_cast<uint64_t>(num_experts));
      while (std::find(chosen.begin(), chosen.end(), e) != chosen.end()) e = (e + 1) % num_experts;
      chosen.push_back(e);
      weight.push_back(static_cast<float>((1.0 / top_k) * scaling));
    }
    expert.insert(expert.end(), chosen.begin(), chosen.end());
  }
}

}  // namespace moesim
