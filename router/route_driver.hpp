// route_with<Traits>: the router stage written once against a backend's traits (buffer type, Thrust
// policy, host<->backend copies): checks the request, runs the gating template of cfg.gating, the
// capacity and drop policy, the aux_free_bias update (from the demand or the kept assignments),
// renormalisation after drops, and returns a host Routing.
// Instantiated by kernels/host/routing_omp.cpp (OpenMP); a CUDA traits struct instantiates it as is.
// Deterministic at any thread count. Test: tests/router/route_test.cpp (against route_ref).
#pragma once

#include <algorithm>
#include <type_traits>
#include <cstdint>
#include <utility>
#include <vector>

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "src/common/portability.hpp"
#include "src/config/experiment.hpp"
#include "router/aux_free_bias.hpp"
#include "router/balanced_gating.hpp"
#include "router/capacity.hpp"
#include "router/expert_choice.hpp"
#include "router/gating_common.hpp"
#include "router/group_limited.hpp"
#include "router/hash_gating.hpp"
#include "router/random_gating.hpp"
#include "router/route.hpp"
#include "router/routing.hpp"
#include "router/sinkhorn.hpp"
#include "router/topk_gating.hpp"

namespace moesim {
namespace router_detail {

struct TokenOfAssignment {
  int top_k;
  int32_t* token;
  MOESIM_HD void operator()(int64_t i) const { token[i] = static_cast<int32_t>(i / top_k); }
};

// The buffers of a finished routing, copied out of the backend's memory; counts the batch in `state`.
template <class Traits, class V32, class VF, class V8>
Routing finish_routing(Routing r, V32&& token, V32&& expert, VF&& weight, V8&& kept, RouterState* state) {
  r.token = Traits::copy_out(std::move(token));
  r.expert = Traits::copy_out(std::move(expert));
  r.weight = Traits::copy_out(std::move(weight));
  r.kept = Traits::copy_out(std::move(kept));
  if (state) ++state->batches_seen;
  return r;
}

}  // namespace router_detail

// Traits requirements (kernels/host/routing_omp.cpp has the OpenMP one):
//   template <class T> using vector = ...;        owning buffer in the backend's memory
//   static auto policy();                          Thrust execution policy
//   template <class T> static vector<T> make(size_t n);
//   template <class T> static T* data(vector<T>& v);
//   template <class T> static vector<T> copy_in(const T* host, size_t n);
//   template <class T> static const T* view(const T* host, size_t n, vector<T>& holder);  // copies only if needed
//   template <class T> static std::vector<T> copy_out(vector<T>&& v);
// req.logits and req.token_ids are host memory; the result is a host Routing.
namespace router_detail {

// Passes a backend runs its own way: Traits::token_choice (the host's SIMD rows, which check the logits in
// that pass, so the request check leaves them out) and Traits::expert_choice (the host's selection per
// expert); each gives the generic template's bytes.
template <class Traits, class = void>
struct HasTokenChoice : std::false_type {};
template <class Traits>
struct HasTokenChoice<Traits, std::void_t<decltype(&Traits::token_choice)>> : std::true_type {};
template <class Traits, class = void>
struct HasExpertChoice : std::false_type {};
template <class Traits>
struct HasExpertChoice<Traits, std::void_t<decltype(&Traits::expert_choice)>> : std::true_type {};

// Expert choice: each expert picks its capacity's worth of tokens; every assignment is kept.
template <class Traits>
Routing route_expert_choice(const RouterConfig& cfg, const RouteRequest& req, RouterState* state, int64_t scope,
                            Routing r) {
  auto policy = Traits::policy();
  const int64_t n = req.num_tokens;
  const int num_e = req.num_experts;
  const int k = req.top_k;
  const int64_t c = expert_choice_capacity(cfg, scope > 0 ? scope : n, k, num_e);
  r.capacity = std::min(c, n);
  if (n == 0) return r;
  const int64_t total = expert_choice_assignments(n, num_e, c, scope);
  typename Traits::template vector<float> logits_holder;
  const float* logits = Traits::view(req.logits, static_cast<size_t>(n * num_e), logits_holder);
  auto token = Traits::template make<int32_t>(total);
  auto expert = Traits::template make<int32_t>(total);
  auto weight = Traits::template make<float>(total);
  auto kept = Traits::template make<uint8_t>(total);
  auto score = Traits::template make<double>(n * num_e);
  if constexpr (HasExpertChoice<Traits>::value) {
    Traits::expert_choice(logits, n, num_e, cfg.score, cfg.routed_scaling_factor, c, scope, Traits::data(token),
                          Traits::data(expert), Traits::data(weight), Traits::data(score));
  } else {
    auto perm = Traits::template make<int64_t>(n * num_e);
    expert_choice_gating(policy, logits, n, num_e, cfg.score, cfg.routed_scaling_factor, c, scope,
                         Traits::data(token), Traits::data(expert), Traits::data(weight),
                         ExpertChoiceScratch{Traits::data(score), Traits::data(perm)});
  }
  thrust::fill(policy, Traits::data(kept), Traits::data(kept) + total, static_cast<uint8_t>(1));
  return router_detail::finish_routing<Traits>(std::move(r), std::move(token), std::move(expert), std::move(weight),
                                               std::move(kept), state);
}

}  // namespace router_detail

template <class Traits>
Routing route_with(const RouterConfig& cfg, const RouteRequest& req, RouterState* state) {
  constexpr bool kFusedTokenChoice = router_detail::HasTokenChoice<Traits>::value;
  check_route_request(cfg, req, state, !(kFusedTokenChoice && cfg.gating == Gating::token_choice));
  auto policy = Traits::policy();
  const int64_t n = req.num_tokens;
  const int num_e = req.num_experts;
  const int k = req.top_k;
  const int64_t scope = capacity_scope_tokens(cfg, req);

  Routing r;
  r.num_tokens = n;
  r.num_experts = num_e;
  r.top_k = k;

  if (cfg.gating == Gating::expert_choice)
    return router_detail::route_expert_choice<Traits>(cfg, req, state, scope, std::move(r));

  const int64_t capacity = expert_capacity(cfg, scope > 0 ? scope : n, k, num_e);
  r.capacity = capacity;
  if (n == 0) return r;
  const int64_t m = n * k;
  typename Traits::template vector<float> logits_holder;
  const float* logits =
      req.logits ? Traits::view(req.logits, static_cast<size_t>(n * num_e), logits_holder) : nullptr;
  typename Traits::template vector<int64_t> ids_holder;
  const int64_t* ids = req.token_ids ? Traits::view(req.token_ids, static_cast<size_t>(n), ids_holder) : nullptr;
  auto token = Traits::template make<int32_t>(m);
  auto expert = Traits::template make<int32_t>(m);
  auto weight = Traits::template make<float>(m);
  auto kept = Traits::template make<uint8_t>(m);
  int32_t* ex = Traits::data(expert);
  float* w = Traits::data(weight);
  const GateWeightRule rule = gate_weight_rule(cfg);
  typename Traits::template vector<float> bias_buffer;  // aux_free_bias with a state: the bias to update
  bool update_bias = false;

  switch (cfg.gating) {
    case Gating::token_choice:
    case Gating::noisy_top_k: {
      auto key = Traits::template make<double>(m);
      if (cfg.gating == Gating::token_choice) {
        if constexpr (kFusedTokenChoice) {
          // A logit that is not finite: the request check names the first, as it does for every backend.
          if (Traits::token_choice(logits, n, num_e, k, rule, ex, w, Traits::data(key)) >= 0)
            check_route_request(cfg, req, state);
        } else {
          token_choice_gating(policy, logits, n, num_e, k, rule, ex, w, Traits::data(key));
        }
      } else {
        noisy_topk_gating(policy, logits, n, num_e, k, cfg.noise_std, req.seed, cfg.routed_scaling_factor, ex, w,
                          Traits::data(key));
      }
      break;
    }
    case Gating::sinkhorn: {
      auto cost = Traits::template make<double>(n * num_e);
      auto d0 = Traits::template make<double>(n);
      auto d1 = Traits::template make<double>(num_e);
      auto d1_old = Traits::template make<double>(num_e);
      auto key = Traits::template make<double>(m);
      sinkhorn_gating(policy, logits, n, num_e, k, cfg.sinkhorn_iterations, cfg.sinkhorn_tolerance, rule, ex, w,
                      SinkhornScratch{Traits::data(cost), Traits::data(d0), Traits::data(d1), Traits::data(d1_old),
                                      Traits::data(key)});
      break;
    }
    case Gating::hash:
      hash_gating(policy, ids, n, num_e, k, cfg.routed_scaling_factor, ex, w);
      break;
    case Gating::random:
      random_gating(policy, n, num_e, k, req.seed, cfg.routed_scaling_factor, ex, w);
      break;
    case Gating::balanced:
      balanced_gating(policy, n, num_e, k, cfg.routed_scaling_factor, ex, w);
      break;
    case Gating::group_limited:
    case Gating::aux_free_bias: {
      const bool biased = cfg.gating == Gating::aux_free_bias && state != nullptr;
      update_bias = biased;
      if (biased && state->expert_bias.empty()) state->expert_bias.assign(num_e, 0.0f);
      auto bias = biased ? Traits::copy_in(state->expert_bias.data(), static_cast<size_t>(num_e))
                         : Traits::template make<float>(0);
      auto score = Traits::template make<double>(n * num_e);
      auto selection = Traits::template make<double>(n * num_e);
      auto group_score = Traits::template make<double>(n * cfg.groups);
      auto key = Traits::template make<double>(m);
      const GroupLimitedScratch scratch{Traits::data(score), Traits::data(selection), Traits::data(group_score),
                                        Traits::data(key)};
      group_limited_gating(policy, logits, biased ? Traits::data(bias) : nullptr, n, num_e, k,
                           group_limited_params(cfg), ex, w, scratch);
      if (biased) bias_buffer = std::move(bias);  // updated after the capacity, below
      break;
    }
    case Gating::expert_choice:
      break;  // handled above
  }

  {
    auto perm = Traits::template make<int64_t>(capacity > 0 ? m : 0);
    auto segment = Traits::template make<int64_t>(capacity > 0 ? m : 0);
    auto rank = Traits::template make<int64_t>(capacity > 0 ? m : 0);
    apply_capacity(policy, ex, w, n, k, num_e, capacity, scope, cfg.drop_policy, cfg.priority, req.seed,
                   Traits::data(kept), CapacityScratch{Traits::data(perm), Traits::data(segment), Traits::data(rank)});
  }
  if (update_bias) {
    // The demand (every assignment) or, under bias_update_counts kept, what the capacity kept.
    auto sorted = Traits::template make<int32_t>(m);
    auto upper = Traits::template make<int64_t>(num_e);
    const uint8_t* counted = cfg.bias_update_counts == BiasUpdateCounts::kept ? Traits::data(kept) : nullptr;
    aux_free_bias_update(policy, ex, counted, m, num_e, cfg.bias_update_rate, cfg.bias_update_arithmetic,
                         Traits::data(bias_buffer), BiasUpdateScratch{Traits::data(sorted), Traits::data(upper)});
    state->expert_bias = Traits::copy_out(std::move(bias_buffer));
  }
  if (cfg.renormalize_after_drop && capacity > 0) renormalize_kept_weights(policy, Traits::data(kept), n, k, w);
  thrust::for_each(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(m),
                   router_detail::TokenOfAssignment{k, Traits::data(token)});

  return router_detail::finish_routing<Traits>(std::move(r), std::move(token), std::move(expert), std::move(weight),
                                               std::move(kept), state);
}

}  // namespace moesim
