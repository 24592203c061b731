// Hash gating (Hash Layers, Roller et al. 2021): the experts of a token are a fixed function of its
// vocabulary id, independent of the logits and of the request seed. Out: expert, weight
// [num_tokens * top_k] token-major; k distinct experts per token; weights 1/k * routed_scaling_factor.
// One thread per token: deterministic at any thread count. Backend-neutral (Thrust policy first);
// twin: hash_gating_ref.hpp; test: tests/router/hash_gating_test.cpp.
#pragma once

#include <cstdint>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"
#include "src/common/counter_rng.hpp"

namespace moesim {
namespace router_detail {

struct HashGatingFunctor {
  const int64_t* token_ids;  // null: the token index
  int num_experts;
  int top_k;
  double scaling;
  int32_t* expert;
  float* weight;
  MOESIM_HD void operator()(int64_t t) const {
    const uint64_t id = static_cast<uint64_t>(token_ids ? token_ids[t] : t);
    int32_t* ex = expert + t * top_k;
    const float w = static_cast<float>((1.0 / top_k) * scaling);
    for (int j = 0; j < top_k; ++j) {
      const uint64_t h = counter_hash(kHashGatingKey, kStreamHashBase + static_cast<uint64_t>(j), id);
      int32_t e = static_cast<int32_t>(h % static_cast<uint64_t>(num_experts));
      // Linear probing: step forward until the expert differs from every earlier slot (k <= E).
      bool taken = true;
      while (taken) {
        taken = false;
        for (int i = 0; i < j; ++i) {
          if (ex[i] == e) taken = true;
        }
        if (taken) e = (e + 1 == num_experts) ? 0 : e + 1;
      }
      ex[j] = e;
      weight[t * top_k + j] = w;
    }
  }
};

}  // namespace router_detail

// hash: slot j of a token with id v goes to expert hash(v, j) mod E, where hash is the counter hash
// under the fixed key kHashGatingKey and stream kStreamHashBase + j (so slot j does not depend on k);
// when that expert is already used by an earlier slot, probe forward (e + 1 mod E) to the next free one.
// token_ids: [num_tokens] vocabulary ids, or null to hash the token index.
template <class Policy>
void hash_gating(Policy&& policy, const int64_t* token_ids, int64_t num_tokens, int num_experts, int top_k,
                 double scaling, int32_t* expert, float* weight) {
  if (num_tokens == 0) return;
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(num_tokens),
                   router_detail::HashGatingFunctor{token_ids, num_experts, top_k, scaling, expert, weight});
}

}  // namespace moesim
