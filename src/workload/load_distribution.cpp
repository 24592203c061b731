// Peer tools' expert-load distributions (load_distribution.hpp). The power law follows aiconfigurator's
// collector as data/kernel-imbalance/README.md describes it (ai-dynamo/aiconfigurator, Apache-2.0); written
// from that description, no code copied. Host only. Covered by tests/workload/load_distribution_test.cpp.
#include "src/workload/load_distribution.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/common/counter_rng.hpp"
#include "src/common/error.hpp"

namespace moesim {
namespace {

constexpr uint64_t kStreamPowerLaw = 0x706f776c;  // "powl"

}  // namespace

// In O(E log cap): every expert below the water level L is raised to it, L the highest level whose fill
// fits, and the rest go one each to the lowest-numbered experts left at L.
void fill_least_loaded(std::vector<int64_t>& load, int64_t cap, int64_t rows) {
  if (rows <= 0 || load.empty()) return;
  const auto need = [&](int64_t level) {
    int64_t n = 0;
    for (int64_t l : load) n += std::max<int64_t>(0, std::min(level, cap) - l);
    return n;
  };
  int64_t lo = *std::min_element(load.begin(), load.end()), hi = cap;  // need(lo) = 0 <= rows
  if (lo >= cap) return;
  while (lo < hi) {  // the highest level in [lo, cap] with need <= rows
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (need(mid) <= rows) lo = mid;
    else hi = mid - 1;
  }
  int64_t left = rows - need(lo);
  for (int64_t& l : load) l = std::max(l, lo);
  for (int64_t& l : load) {
    if (left == 0 || lo >= cap) break;
    if (l == lo) ++l, --left;
  }
}

// In O(E log max): every expert above the level H is lowered to it, H the lowest level whose cut fits,
// and the rest come one each from the lowest-numbered experts left at H.
void take_most_loaded(std::vector<int64_t>& load, int64_t rows) {
  if (rows <= 0 || load.empty()) return;
  const auto excess = [&](int64_t level) {
    int64_t n = 0;
    for (int64_t l : load) n += std::max<int64_t>(0, l - level);
    return n;
  };
  int64_t lo = 0, hi = *std::max_element(load.begin(), load.end());  // excess(hi) = 0 <= rows
  while (lo < hi) {  // the lowest level in [0, max] with excess <= rows
    const int64_t mid = lo + (hi - lo) / 2;
    if (excess(mid) <= rows) hi = mid;
    else lo = mid + 1;
  }
  int64_t left = rows - excess(lo);
  for (int64_t& l : load) l = std::min(l, lo);
  for (int64_t& l : load) {
    if (left == 0 || lo == 0) break;
    if (l == lo) --l, --left;
  }
}

std::vector<int64_t> power_law_loads(int64_t tokens, int experts, int top_k, double alpha, int ep, uint64_t seed,
                                     uint64_t draw) {
  MOESIM_REQUIRE(tokens >= 1 && experts >= 1 && top_k >= 1 && top_k <= experts,
                 "power_law_loads needs tokens >= 1 and 1 <= top_k <= experts");
  MOESIM_REQUIRE(ep >= 1 && experts % ep == 0, "power_law_loads: ep " << ep << " must divide experts " << experts);
  MOESIM_REQUIRE(alpha > 0 && std::fabs(alpha - 1.0) > 1e-9, "power_law_loads: alpha must be positive and not 1");
  const int64_t total = tokens * top_k;
  const bool sparse = total <= experts;
  const double lo = sparse ? 0.01 : 1.0, hi = sparse ? 2.0 : std::max(1.0, 0.8 * static_cast<double>(tokens));
  // 1. Inverse CDF of p(x) ~ x^-alpha on [lo, hi]: x = (lo^(1-a) + u (hi^(1-a) - lo^(1-a)))^(1 / (1-a)).
  const double b = 1.0 - alpha, lo_b = std::pow(lo, b), hi_b = std::pow(hi, b);
  std::vector<double> weight(static_cast<std::size_t>(experts));
  double sum = 0;
  for (int e = 0; e < experts; ++e) {
    const double u = counter_uniform(seed, kStreamPowerLaw + draw, static_cast<uint64_t>(e));
    weight[e] = std::pow(lo_b + u * (hi_b - lo_b), 1.0 / b);
    sum += weight[e];
  }
  // 2. Scaled to T k and rounded.
  std::vector<int64_t> load(static_cast<std::size_t>(experts));
  for (int e = 0; e < experts; ++e) load[e] = std::llround(weight[e] / sum * static_cast<double>(total));
  // 3. The cap: no expert above T rows; the overflow to the least-loaded experts below it, a row at a time.
  int64_t overflow = 0;
  for (int64_t& l : load) {
    if (l > tokens) overflow += l - tokens, l = tokens;
  }
  fill_least_loaded(load, tokens, overflow);  // T k <= E T always leaves room for it
  // 4. The sum fixed to T k.
  const int64_t have = std::accumulate(load.begin(), load.end(), int64_t{0});
  if (have < total) fill_least_loaded(load, tokens, total - have);
  if (have > total) take_most_loaded(load, have - total);
  // 5. The heaviest EP group onto rank 0.
  if (ep > 1) {
    const int per = experts / ep;
    int heaviest = 0;
    int64_t best = -1;
    for (int g = 0; g < ep; ++g) {
      const int64_t w = std::accumulate(load.begin() + g * per, load.begin() + (g + 1) * per, int64_t{0});
      if (w > best) best = w, heaviest = g;
    }
    if (heaviest != 0) std::swap_ranges(load.begin(), load.begin() + per, load.begin() + heaviest * per);
  }
  return load;
}

std::vector<int64_t> balanced_round_robin_loads(int64_t tokens, int experts, int top_k) {
  MOESIM_REQUIRE(tokens >= 0 && experts >= 1 && top_k >= 1 && top_k <= experts,
                 "balanced_round_robin_loads needs 1 <= top_k <= experts");
  std::vector<int64_t> load(static_cast<std::size_t>(experts), 0);
  const int64_t stride = (experts + top_k - 1) / top_k;  // ceil(E / k)
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < top_k; ++j) ++load[static_cast<std::size_t>((t + j * stride) % experts)];
  return load;
}

}  // namespace moesim
