// Test support for tests/router: seeded logit generators (normal, skewed), per-expert loads and
// imbalance of a Routing, a Routing comparator (exact integers, weights within kWeightTolerance), and
// the shape/capacity sweep that runs route_omp against route_ref. Host only, header-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/config/experiment.hpp"
#include "router/route.hpp"
#include "router/routing.hpp"

namespace moesim {
namespace test {

// The two router entry points every router test runs side by side: the Thrust/OpenMP path and the serial
// reference.
using RouteFn = Routing (*)(const RouterConfig&, const RouteRequest&, RouterState*);
inline const RouteFn kBoth[] = {&route_omp, &route_ref};
inline const char* const kNames[] = {"route_omp", "route_ref"};

// route_omp and route_ref evaluate the same double formulas in the same order, so on one host their
// weights agree to the bit; the bound only leaves room for a libm whose exp differs in the last bit.
constexpr double kWeightTolerance = 1e-6;

inline bool weight_close(float got, float want) {
  return std::fabs(static_cast<double>(got) - want) <= kWeightTolerance * std::max(1.0, std::fabs(static_cast<double>(want)));
}

// [num_tokens, num_experts] logits ~ N(0, scale^2), from std::mt19937_64(seed).
inline std::vector<float> random_logits(int64_t num_tokens, int num_experts, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> out(static_cast<size_t>(num_tokens * num_experts));
  for (float& v : out) v = static_cast<float>(normal(gen));
  return out;
}

// Random logits plus `boost` on the first `hot` experts: a router that favours a few experts.
inline std::vector<float> skewed_logits(int64_t num_tokens, int num_experts, uint64_t seed, int hot, double boost) {
  std::vector<float> out = random_logits(num_tokens, num_experts, seed);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int e = 0; e < hot; ++e) out[t * num_experts + e] += static_cast<float>(boost);
  }
  return out;
}

inline RouteRequest make_request(const std::vector<float>& logits, int64_t num_tokens, int num_experts, int top_k,
                                 uint64_t seed = 0) {
  RouteRequest req;
  req.logits = logits.empty() ? nullptr : logits.data();
  req.num_tokens = num_tokens;
  req.num_experts = num_experts;
  req.top_k = top_k;
  req.seed = seed;
  return req;
}

// Per-expert counts of the kept assignments (kept_only) or of all of them (demand).
inline std::vector<int64_t> expert_loads(const Routing& r, bool kept_only = true) {
  std::vector<int64_t> load(r.num_experts, 0);
  for (int64_t i = 0; i < r.num_assignments(); ++i) {
    if (!kept_only || r.kept[i]) ++load[r.expert[i]];
  }
  return load;
}

// max(load) / mean(load) over all experts (docs/design.md `imbalance`); 0 for an empty load.
inline double imbalance(const std::vector<int64_t>& load) {
  int64_t total = 0, peak = 0;
  for (int64_t v : load) {
    total += v;
    peak = std::max(peak, v);
  }
  if (total == 0) return 0.0;
  return static_cast<double>(peak) * static_cast<double>(load.size()) / static_cast<double>(total);
}

// Exact equality of the integers, weights within kWeightTolerance; the message names the first mismatch.
inline ::testing::AssertionResult same_routing(const Routing& got, const Routing& want) {
  std::ostringstream os;
  if (got.num_tokens != want.num_tokens || got.num_experts != want.num_experts || got.top_k != want.top_k ||
      got.capacity != want.capacity) {
    os << "header differs: tokens " << got.num_tokens << "/" << want.num_tokens << " experts " << got.num_experts
       << "/" << want.num_experts << " top_k " << got.top_k << "/" << want.top_k << " capacity " << got.capacity
       << "/" << want.capacity;
    return ::testing::AssertionFailure() << os.str();
  }
  const size_t m = want.expert.size();
  if (got.expert.size() != m || got.token.size() != want.token.size() || got.weight.size() != want.weight.size() ||
      got.kept.size() != want.kept.size() || want.token.size() != m || want.weight.size() != m ||
      want.kept.size() != m) {
    os << "sizes differ: expert " << got.expert.size() << "/" << m << " token " << got.token.size() << "/"
       << want.token.size() << " weight " << got.weight.size() << "/" << want.weight.size() << " kept "
       << got.kept.size() << "/" << want.kept.size();
    return ::testing::AssertionFailure() << os.str();
  }
  for (size_t i = 0; i < m; ++i) {
    if (got.token[i] != want.token[i] || got.expert[i] != want.expert[i] || got.kept[i] != want.kept[i] ||
        !weight_close(got.weight[i], want.weight[i])) {
      os << "assignment " << i << ": got (token " << got.token[i] << ", expert " << got.expert[i] << ", weight "
         << got.weight[i] << ", kept " << int(got.kept[i]) << ") want (token " << want.token[i] << ", expert "
         << want.expert[i] << ", weight " << want.weight[i] << ", kept " << int(want.kept[i]) << ")";
      return ::testing::AssertionFailure() << os.str();
    }
  }
  return ::testing::AssertionSuccess();
}

// Structural invariants: sizes, ranges, kept in {0,1}, finite weights; for token-choice strategies
// token[i] = i / top_k and a token's experts are distinct.
inline ::testing::AssertionResult valid_routing(const Routing& r, bool token_major) {
  const int64_t m = r.num_assignments();
  if (static_cast<int64_t>(r.token.size()) != m || static_cast<int64_t>(r.weight.size()) != m ||
      static_cast<int64_t>(r.kept.size()) != m) {
    return ::testing::AssertionFailure() << "array sizes differ";
  }
  if (token_major && m != r.num_tokens * r.top_k) {
    return ::testing::AssertionFailure() << m << " assignments for " << r.num_tokens << " tokens x " << r.top_k;
  }
  for (int64_t i = 0; i < m; ++i) {
    if (r.expert[i] < 0 || r.expert[i] >= r.num_experts) return ::testing::AssertionFailure() << "expert " << i;
    if (r.token[i] < 0 || r.token[i] >= r.num_tokens) return ::testing::AssertionFailure() << "token " << i;
    if (r.kept[i] > 1) return ::testing::AssertionFailure() << "kept " << i;
    if (!std::isfinite(r.weight[i])) return ::testing::AssertionFailure() << "weight " << i;
    if (token_major) {
      if (r.token[i] != i / r.top_k) return ::testing::AssertionFailure() << "token of " << i;
      for (int64_t j = (i / r.top_k) * r.top_k; j < i; ++j) {
        if (r.expert[j] == r.expert[i]) return ::testing::AssertionFailure() << "repeated expert at " << i;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

struct SweepShape {
  int64_t num_tokens;
  int num_experts;
  int top_k;
};

// N in {0, 1, 7, 333} x E in {1, 3, 8, 60} x k in {1, 2, E} (k <= E, no repeats).
inline std::vector<SweepShape> sweep_shapes() {
  std::vector<SweepShape> shapes;
  for (int64_t n : {0, 1, 7, 333}) {
    for (int e : {1, 3, 8, 60}) {
      std::vector<int> ks;
      for (int k : {1, 2, e}) {
        if (k <= e && std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
      }
      for (int k : ks) shapes.push_back({n, e, k});
    }
  }
  return shapes;
}

// A group layout valid for E and k: groups dividing E, enough surviving groups for k.
inline void set_groups(RouterConfig& cfg, int num_experts, int top_k) {
  cfg.groups = num_experts % 4 == 0 ? 4 : (num_experts % 3 == 0 ? 3 : 1);
  const int size = num_experts / cfg.groups;
  const int needed = (top_k + size - 1) / size;
  cfg.topk_groups = std::min(cfg.groups, std::max(needed, (cfg.groups + 1) / 2));
}

// The capacity settings every sweep runs: dropless, then each drop policy and priority, min_capacity,
// sequence scope and renormalisation after drops.
inline std::vector<RouterConfig> capacity_variants(const RouterConfig& base) {
  std::vector<RouterConfig> out;
  RouterConfig c = base;
  out.push_back(c);  // dropless
  c.capacity_factor = 1.0;
  c.drop_policy = DropPolicy::position;
  c.priority = Priority::k_major;
  out.push_back(c);
  c.capacity_factor = 0.5;
  c.priority = Priority::token_major;
  out.push_back(c);
  c.capacity_factor = 0.8;
  c.drop_policy = DropPolicy::score;
  c.priority = Priority::k_major;
  c.min_capacity = 2;
  out.push_back(c);
  c.drop_policy = DropPolicy::random;
  c.min_capacity = 0;
  c.capacity_factor = 0.6;
  out.push_back(c);
  c.drop_policy = DropPolicy::score;
  c.priority = Priority::token_major;
  c.capacity_scope = CapacityScope::sequence;
  c.renormalize_after_drop = true;
  out.push_back(c);
  return out;
}

inline std::string describe(const RouterConfig& cfg, const SweepShape& s, uint64_t seed) {
  std::ostringstream os;
  os << "gating " << to_string(cfg.gating) << " N " << s.num_tokens << " E " << s.num_experts << " k " << s.top_k
     << " seed " << seed << " score " << to_string(cfg.score) << " pre_softmax " << cfg.pre_softmax << " renormalize "
     << cfg.renormalize << " cf " << cfg.capacity_factor << " min_capacity " << cfg.min_capacity << " drop "
     << to_string(cfg.drop_policy) << " priority " << to_string(cfg.priority) << " scope "
     << to_string(cfg.capacity_scope) << " renorm_after_drop " << cfg.renormalize_after_drop << " groups "
     << cfg.groups << "/" << cfg.topk_groups << " fill " << to_string(cfg.group_mask_fill);
  return os.str();
}

// route_omp against route_ref on fresh seeded logits for every shape and capacity variant of `bases`
// (set_groups is applied per shape for group_limited and aux_free_bias); every other variant rounds
// the logits to multiples of 1/2 so that the tie rules are exercised. aux_free_bias runs three
// batches through one state per path so that the biases, and the routing they steer, must agree.
inline void sweep_omp_against_ref(const std::vector<RouterConfig>& bases, uint64_t seed) {
  for (const RouterConfig& base : bases) {
    for (const SweepShape& s : sweep_shapes()) {
      const std::vector<RouterConfig> variants = capacity_variants(base);
      for (size_t v = 0; v < variants.size(); ++v) {
        RouterConfig cfg = variants[v];
        const bool ties = v % 2 == 1;  // every other variant: logits rounded to halves, so ties abound
        if (cfg.gating == Gating::group_limited || cfg.gating == Gating::aux_free_bias) {
          set_groups(cfg, s.num_experts, s.top_k);
        }
        const uint64_t case_seed = seed + 1000003ull * static_cast<uint64_t>(s.num_tokens) +
                                   10007ull * static_cast<uint64_t>(s.num_experts) + static_cast<uint64_t>(s.top_k);
        RouterState state_omp, state_ref;
        const int batches = cfg.gating == Gating::aux_free_bias ? 3 : 1;
        for (int b = 0; b < batches; ++b) {
          std::vector<float> logits = b == 0 ? random_logits(s.num_tokens, s.num_experts, case_seed + b)
                                             : skewed_logits(s.num_tokens, s.num_experts, case_seed + b, 1, 2.0);
          if (ties) {
            for (float& x : logits) x = std::round(x * 2.0f) / 2.0f;
          }
          std::vector<int64_t> ids(static_cast<size_t>(s.num_tokens));
          for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int64_t>((t * 7919u + case_seed) % 32000u);
          RouteRequest req = make_request(logits, s.num_tokens, s.num_experts, s.top_k, case_seed + b);
          req.token_ids = ids.empty() ? nullptr : ids.data();
          req.sequence_length = 5;
          const Routing got = route_omp(cfg, req, &state_omp);
          const Routing want = route_ref(cfg, req, &state_ref);
          ASSERT_TRUE(same_routing(got, want)) << describe(cfg, s, case_seed) << " batch " << b << " ties " << ties;
          ASSERT_TRUE(valid_routing(got, cfg.gating != Gating::expert_choice)) << describe(cfg, s, case_seed);
          ASSERT_EQ(state_omp.expert_bias, state_ref.expert_bias) << describe(cfg, s, case_seed);
        }
      }
    }
  }
}

}  // namespace test
}  // namespace moesim
