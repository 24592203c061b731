// Synthetic router logits, token ids and hidden states (see synthetic_logits.hpp).
#include "src/workload/synthetic_logits.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/common/error.hpp"
#include "src/common/counter_rng.hpp"

namespace moesim {
namespace {
// Streams keep the draws of different quantities independent for one seed (the router uses 1..3
// and 16+, see common/counter_rng.hpp).
constexpr uint64_t kStreamRank = 101;
constexpr uint64_t kStreamLogits = 102;
constexpr uint64_t kStreamTokenIds = 103;
constexpr uint64_t kStreamHidden = 104;
constexpr uint64_t kStreamPopularity = 105;
constexpr uint64_t kStreamDrift = 106;
constexpr uint64_t kStreamBatchVariation = 107;
constexpr uint64_t kStreamGroup = 108;

std::vector<float> popularity_draw(const WorkloadConfig& w, int num_experts, int groups, uint64_t seed) {
  std::vector<float> bias(num_experts);
  if (w.popularity == Popularity::zipf) {
    bias = expert_popularity_bias(num_experts, w.skew, seed);
  } else {
    for (int e = 0; e < num_experts; ++e)
      bias[e] = static_cast<float>(w.skew * counter_normal(seed, kStreamPopularity, static_cast<uint64_t>(e)));
  }
  if (w.group_skew > 0 && groups > 1 && num_experts % groups == 0) {
    const int per_group = num_experts / groups;
    for (int e = 0; e < num_experts; ++e)
      bias[e] += static_cast<float>(w.group_skew * counter_normal(seed, kStreamGroup, static_cast<uint64_t>(e / per_group)));
  }
  return bias;
}
}  // namespace

std::vector<float> expert_popularity_bias(int num_experts, double skew, uint64_t seed) {
  MOESIM_REQUIRE(num_experts >= 1, "num_experts must be >= 1, got " << num_experts);
  MOESIM_REQUIRE(skew >= 0 && std::isfinite(skew), "skew must be finite and >= 0, got " << skew);
  // Seeded Fisher-Yates shuffle of the ranks, so the popular experts are not always the low ids.
  std::vector<int> rank(num_experts);
  std::iota(rank.begin(), rank.end(), 0);
  for (int i = num_experts - 1; i > 0; --i) {
    const auto j = static_cast<int>(counter_hash(seed, kStreamRank, i) % static_cast<uint64_t>(i + 1));
    std::swap(rank[i], rank[j]);
  }
  std::vector<float> bias(num_experts);
  for (int e = 0; e < num_experts; ++e) bias[e] = static_cast<float>(-skew * std::log(rank[e] + 1.0));
  return bias;
}

std::vector<float> popularity_at(const WorkloadConfig& w, int num_experts, int groups, uint64_t seed, int64_t step) {
  MOESIM_REQUIRE(w.drift >= 0 && std::isfinite(w.drift), "drift must be finite and >= 0, got " << w.drift);
  MOESIM_REQUIRE(w.batch_variation >= 0 && w.batch_variation <= 1,
                 "batch_variation must be in [0, 1], got " << w.batch_variation);
  std::vector<float> u = popularity_draw(w, num_experts, groups, seed);
  if (w.drift > 0 && step != 0) {
    const std::vector<float> v = popularity_draw(w, num_experts, groups, counter_hash(seed, kStreamDrift, 0));
    const double a = w.drift * static_cast<double>(step);
    for (int e = 0; e < num_experts; ++e) u[e] = static_cast<float>(std::cos(a) * u[e] + std::sin(a) * v[e]);
  }
  if (w.batch_variation > 0) {
    const std::vector<float> b =
        popularity_draw(w, num_experts, groups, counter_hash(seed, kStreamBatchVariation, static_cast<uint64_t>(step)));
    const double keep = std::sqrt(1.0 - w.batch_variation), fresh = std::sqrt(w.batch_variation);
    for (int e = 0; e < num_experts; ++e) u[e] = static_cast<float>(keep * u[e] + fresh * b[e]);
  }
  return u;
}

std::vector<float> synthetic_logits(int64_t num_tokens, int num_experts, double skew, uint64_t seed) {
  MOESIM_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got " << num_tokens);
  const std::vector<float> bias = expert_popularity_bias(num_experts, skew, seed);
  std::vector<float> logits(static_cast<size_t>(num_tokens) * num_experts);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int e = 0; e < num_experts; ++e) {
      const uint64_t i = static_cast<uint64_t>(t) * num_experts + e;
      logits[i] = static_cast<float>(counter_normal(seed, kStreamLogits, i)) + bias[e];
    }
  }
  return logits;
}

std::vector<int64_t> synthetic_token_ids(int64_t num_tokens, int vocab, uint64_t seed) {
  MOESIM_REQUIRE(vocab >= 1, "vocab must be >= 1, got " << vocab);
  std::vector<int64_t> ids(static_cast<size_t>(std::max<int64_t>(num_tokens, 0)));
  for (int64_t t = 0; t < num_tokens; ++t)
    ids[t] = static_cast<int64_t>(counter_hash(seed, kStreamTokenIds, t) % static_cast<uint64_t>(vocab));
  return ids;
}

std::vector<float> synthetic_hidden(int64_t num_tokens, int64_t hidden, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(num_tokens * hidden));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < num_tokens * hidden; ++i)
    x[i] = static_cast<float>(counter_normal(seed, kStreamHidden, static_cast<uint64_t>(i)));
  return x;
}

}  // namespace moesim
