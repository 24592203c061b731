// route_ref (the serial reference router built from the `_ref.hpp` twins), the capacity formulas and
// the preconditions shared with route_omp. Host only, deterministic; only the scan of the logits for
// non-finite values runs on the OpenMP threads.
// Tests: tests/router/route_test.cpp, tests/router/capacity_test.cpp and the per-strategy suites.
#include "router/route.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/common/error.hpp"
#include "router/aux_free_bias_ref.hpp"
#include "router/balanced_gating_ref.hpp"
#include "router/capacity.hpp"
#include "router/capacity_ref.hpp"
#include "router/expert_choice_ref.hpp"
#include "router/gating_common.hpp"
#include "router/group_limited_ref.hpp"
#include "router/hash_gating_ref.hpp"
#include "router/random_gating_ref.hpp"
#include "router/sinkhorn_ref.hpp"
#include "router/topk_gating_ref.hpp"

namespace moesim {

int64_t expert_capacity(const RouterConfig& cfg, int64_t num_tokens, int top_k, int num_experts) {
  MOESIM_REQUIRE(num_experts >= 1, "num_experts must be >= 1, got " << num_experts);
  return capacity_from_factor(cfg.capacity_factor, num_tokens, top_k, num_experts, cfg.min_capacity,
                              cfg.capacity_rounding);
}

int64_t expert_choice_capacity(const RouterConfig& cfg, int64_t num_tokens, int top_k, int num_experts) {
  MOESIM_REQUIRE(num_experts >= 1, "num_experts must be >= 1, got " << num_experts);
  const double cf = cfg.capacity_factor > 0.0 ? cfg.capacity_factor : 1.0;
  const int64_t c = capacity_from_factor(cf, num_tokens, top_k, num_experts, cfg.min_capacity, cfg.capacity_rounding);
  return std::min(c, num_tokens);
}

int64_t capacity_scope_tokens(const RouterConfig& cfg, const RouteRequest& req) {
  return cfg.capacity_scope == CapacityScope::sequence && req.sequence_length > 0 ? req.sequence_length : 0;
}

namespace {

bool reads_logits(Gating g) { return g != Gating::hash && g != Gating::random && g != Gating::balanced; }

// The index of the first NaN or infinite value, or -1. A float is finite unless its exponent bits are all
// ones: each chunk ORs that test without a branch (the compiler vectorises it), chunks run on the OpenMP
// threads, and the lowest bad chunk is scanned again for the exact index, so the answer does not depend on
// the thread count. A 65536 x 256 matrix (64 MiB) reads at memory speed instead of a serial compare loop.
int64_t first_non_finite(const float* v, int64_t count) {
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  int64_t first_bad_chunk = chunks;
#pragma omp parallel for schedule(static) reduction(min : first_bad_chunk) if (count >= (int64_t{1} << 18))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(count, begin + kChunk);
    uint32_t bad = 0;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, v + i, sizeof bits);
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (bad != 0 && c < first_bad_chunk) first_bad_chunk = c;
  }
  if (first_bad_chunk == chunks) return -1;
  for (int64_t i = first_bad_chunk * kChunk;; ++i) {
    if (!std::isfinite(v[i])) return i;
  }
}

}  // namespace

void check_route_request(const RouterConfig& cfg, const RouteRequest& req, const RouterState* state,
                         bool check_finite) {
  const int num_e = req.num_experts;
  MOESIM_REQUIRE(num_e >= 1, "num_experts must be >= 1, got " << num_e);
  MOESIM_REQUIRE(req.top_k >= 1 && req.top_k <= num_e,
                 "top_k must be in [1, num_experts = " << num_e << "], got " << req.top_k);
  MOESIM_REQUIRE(req.num_tokens >= 0 && req.num_tokens <= INT32_MAX,
                 "num_tokens must be in [0, 2^31), got " << req.num_tokens);
  MOESIM_REQUIRE(req.sequence_length >= 0, "sequence_length must be >= 0, got " << req.sequence_length);
  MOESIM_REQUIRE(std::isfinite(cfg.capacity_factor) && cfg.capacity_factor >= 0.0,
                 "router.capacity_factor must be >= 0, got " << cfg.capacity_factor);
  MOESIM_REQUIRE(cfg.min_capacity >= 0, "router.min_capacity must be >= 0, got " << cfg.min_capacity);
  MOESIM_REQUIRE(std::isfinite(cfg.routed_scaling_factor) && cfg.routed_scaling_factor > 0.0,
                 "router.routed_scaling_factor must be > 0, got " << cfg.routed_scaling_factor);
  if (cfg.gating == Gating::noisy_top_k) {
    MOESIM_REQUIRE(std::isfinite(cfg.noise_std) && cfg.noise_std >= 0.0,
                   "router.noise_std must be >= 0, got " << cfg.noise_std);
  }
  if (cfg.gating == Gating::sinkhorn) {
    MOESIM_REQUIRE(cfg.sinkhorn_iterations >= 1,
                   "router.sinkhorn_iterations must be >= 1, got " << cfg.sinkhorn_iterations);
    MOESIM_REQUIRE(cfg.sinkhorn_tolerance >= 0.0,
                   "router.sinkhorn_tolerance must be >= 0, got " << cfg.sinkhorn_tolerance);
  }
  if (cfg.gating == Gating::group_limited || cfg.gating == Gating::aux_free_bias) {
    MOESIM_REQUIRE(cfg.groups >= 1 && num_e % cfg.groups == 0,
                   "router.groups must divide num_experts = " << num_e << ", got " << cfg.groups);
    MOESIM_REQUIRE(cfg.topk_groups >= 1 && cfg.topk_groups <= cfg.groups,
                   "router.topk_groups must be in [1, groups = " << cfg.groups << "], got " << cfg.topk_groups);
    MOESIM_REQUIRE(static_cast<int64_t>(cfg.topk_groups) * (num_e / cfg.groups) >= req.top_k,
                   "router.topk_groups * experts per group (" << cfg.topk_groups << " * " << num_e / cfg.groups
                                                              << ") must be >= top_k = " << req.top_k);
  }
  if (cfg.gating == Gating::aux_free_bias) {
    MOESIM_REQUIRE(std::isfinite(cfg.bias_update_rate) && cfg.bias_update_rate >= 0.0,
                   "router.bias_update_rate must be >= 0, got " << cfg.bias_update_rate);
    if (state) {
      MOESIM_REQUIRE(state->expert_bias.empty() || state->expert_bias.size() == static_cast<size_t>(num_e),
                     "router state holds " << state->expert_bias.size() << " expert biases for " << num_e
                                           << " experts");
    }
  }
  if (req.num_tokens > 0 && reads_logits(cfg.gating)) {
    MOESIM_REQUIRE(req.logits != nullptr, "logits must not be null for gating " << to_string(cfg.gating));
    const int64_t i = check_finite ? first_non_finite(req.logits, req.num_tokens * num_e) : -1;
    MOESIM_REQUIRE(i < 0, "logit " << i / num_e << "," << i % num_e << " is not finite: " << req.logits[i]);
  }
}

Routing route_ref(const RouterConfig& cfg, const RouteRequest& req, RouterState* state) {
  check_route_request(cfg, req, state);
  const int64_t n = req.num_tokens;
  const int num_e = req.num_experts;
  const int k = req.top_k;
  const int64_t scope = capacity_scope_tokens(cfg, req);
  Routing r;
  r.num_tokens = n;
  r.num_experts = num_e;
  r.top_k = k;

  if (cfg.gating == Gating::expert_choice) {
    const int64_t c = expert_choice_capacity(cfg, scope > 0 ? scope : n, k, num_e);
    r.capacity = std::min(c, n);
    if (n == 0) return r;
    expert_choice_gating_ref(req.logits, n, num_e, cfg.score, cfg.routed_scaling_factor, c, scope, r.token, r.expert,
                             r.weight);
    r.kept.assign(r.expert.size(), 1);
    if (state) ++state->batches_seen;
    return r;
  }

  r.capacity = expert_capacity(cfg, scope > 0 ? scope : n, k, num_e);
  if (n == 0) return r;
  const GateWeightRule rule = gate_weight_rule(cfg);
  const GroupLimitedParams gp = group_limited_params(cfg);

  switch (cfg.gating) {
    case Gating::token_choice:
      token_choice_gating_ref(req.logits, n, num_e, k, rule, r.expert, r.weight);
      break;
    case Gating::noisy_top_k:
      noisy_topk_gating_ref(req.logits, n, num_e, k, cfg.noise_std, req.seed, cfg.routed_scaling_factor, r.expert,
                            r.weight);
      break;
    case Gating::sinkhorn:
      sinkhorn_gating_ref(req.logits, n, num_e, k, cfg.sinkhorn_iterations, cfg.sinkhorn_tolerance, rule, r.expert,
                          r.weight);
      break;
    case Gating::hash:
      hash_gating_ref(req.token_ids, n, num_e, k, cfg.routed_scaling_factor, r.expert, r.weight);
      break;
    case Gating::random:
      random_gating_ref(n, num_e, k, req.seed, cfg.routed_scaling_factor, r.expert, r.weight);
      break;
    case Gating::balanced:
      balanced_gating_ref(n, num_e, k, cfg.routed_scaling_factor, r.expert, r.weight);
      break;
    case Gating::group_limited:
      group_limited_gating_ref(req.logits, nullptr, n, num_e, k, gp, r.expert, r.weight);
      break;
    case Gating::aux_free_bias:
      if (state) {
        if (state->expert_bias.empty()) state->expert_bias.assign(num_e, 0.0f);
        aux_free_bias_gating_ref(req.logits, state->expert_bias.data(), n, num_e, k, gp, r.expert, r.weight);
        // The update (after the capacity below: bias_update_counts kept reads what it keeps).
      } else {
        aux_free_bias_gating_ref(req.logits, nullptr, n, num_e, k, gp, r.expert, r.weight);
      }
      break;
    case Gating::expert_choice:
      break;  // handled above
  }
  r.token.resize(r.expert.size());
  for (size_t i = 0; i < r.token.size(); ++i) r.token[i] = static_cast<int32_t>(i / k);
  apply_capacity_ref(r.expert, r.weight, n, k, num_e, r.capacity, scope, cfg.drop_policy, cfg.priority, req.seed,
                     r.kept);
  if (cfg.gating == Gating::aux_free_bias && state) {
    const bool kept_only = cfg.bias_update_counts == BiasUpdateCounts::kept;
    aux_free_bias_update_ref(r.expert, kept_only ? &r.kept : nullptr, num_e, cfg.bias_update_rate,
                             cfg.bias_update_arithmetic, state->expert_bias.data());
  }
  if (cfg.renormalize_after_drop && r.capacity > 0) renormalize_kept_weights_ref(r.kept, n, k, r.weight);
  if (state) ++state->batches_seen;
  return r;
}

}  // namespace moesim
