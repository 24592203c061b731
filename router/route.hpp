// Router entry points: one batch of router logits -> Routing, under every RouterConfig knob (gating
// strategy, scores, weights, capacity, drop policy, priority, scope). route_omp runs the Thrust
// templates on the OpenMP backend (kernels/host/routing_omp.cpp), route_ref the serial references
// (route.cpp); both give identical integers (token, expert, kept, capacity) and weights equal up to
// rounding, at any thread count. Host memory in and out. Tests: tests/router/route_test.cpp and the
// per-strategy suites in tests/router/.
#pragma once

#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"
#include "router/routing.hpp"

namespace moesim {

// What a router carries from one batch to the next (per layer). Only aux_free_bias reads and writes
// expert_bias: sized num_experts and zero-initialised on first use. batches_seen counts the non-empty
// batches routed with this state, whatever the strategy.
struct RouterState {
  std::vector<float> expert_bias;
  int64_t batches_seen = 0;
};

struct RouteRequest {
  const float* logits = nullptr;        // [num_tokens, num_experts] row-major, host memory; may be null
                                        // for hash, random and balanced gating, which do not read it
  int64_t num_tokens = 0;
  int num_experts = 0;
  int top_k = 0;
  const int64_t* token_ids = nullptr;   // [num_tokens] vocabulary ids for hash gating (null: token index)
  int64_t sequence_length = 0;          // capacity_scope sequence: tokens per sequence (0: whole batch)
  uint64_t seed = 0;                    // noise, random gating, random drop policy
};

// Thrust on the OpenMP backend. state may be null (aux_free_bias then uses a zero bias and keeps nothing).
Routing route_omp(const RouterConfig& cfg, const RouteRequest& req, RouterState* state);
// Serial reference: plain loops, std::stable_sort.
Routing route_ref(const RouterConfig& cfg, const RouteRequest& req, RouterState* state);

// Token-choice capacity per expert for `num_tokens` tokens (a batch, or one sequence under
// capacity_scope sequence): max(ceil(cf * num_tokens * top_k / E), min_capacity); 0 = dropless (cf 0).
int64_t expert_capacity(const RouterConfig& cfg, int64_t num_tokens, int top_k, int num_experts);

// Expert-choice capacity: the same formula with cf 0 read as cf 1 (so C = ceil(N*k/E) and every token
// gets k experts on average; Zhou et al.'s c is k * cf), clamped to num_tokens.
int64_t expert_choice_capacity(const RouterConfig& cfg, int64_t num_tokens, int top_k, int num_experts);

// Tokens per capacity segment: req.sequence_length under capacity_scope sequence when > 0, else 0
// (the whole batch is one segment).
int64_t capacity_scope_tokens(const RouterConfig& cfg, const RouteRequest& req);

// Preconditions of route_omp/route_ref; throws PreconditionError naming the one that fails:
// 1 <= top_k <= num_experts, num_tokens in [0, 2^31), finite logits when the strategy reads them,
// capacity_factor >= 0, min_capacity >= 0, sequence_length >= 0, routed_scaling_factor > 0,
// noise_std >= 0 (noisy_top_k), sinkhorn_iterations >= 1 and sinkhorn_tolerance >= 0 (sinkhorn),
// groups dividing num_experts, 1 <= topk_groups <= groups and topk_groups * E / groups >= top_k
// (group_limited, aux_free_bias), bias_update_rate >= 0 and state bias empty or sized num_experts
// (aux_free_bias).
// check_finite false leaves out the scan of every logit: for a backend whose gating pass checks them itself
// (and calls this again with it, to throw the same error, when a logit is not finite).
void check_route_request(const RouterConfig& cfg, const RouteRequest& req, const RouterState* state,
                         bool check_finite = true);

}  // namespace moesim
