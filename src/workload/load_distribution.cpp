// Peer tools' expert-load distributions (load_distribution.hpp). The power law follows aiconfigurator's
// collector as data/kernel-imbalance/README.md describes it (ai-dynamo/aiconfigurator, Apache-2.0); written
// from that description, no code copied. Host only. Covered by tests/workload/load_distribution_test.cpp.
#include "src/workload/load_distribution.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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

namespace {

// The rows of a by-rank fix-up: passes over the ranks in order, one row to each rank that can still take
// (give) one, until `rows` are placed. Whole passes go in bulk, as many as every open rank can take at
// once; the last, partial pass gives its row to the first open ranks. `room(r)` is what rank r can still
// take, `apply(r, n)` moves n rows there (a water level within the rank).
template <typename Room, typename Apply>
void by_rank_passes(int ep, int64_t rows, Room room, Apply apply) {
  while (rows > 0) {
    std::vector<int> open;
    int64_t least = std::numeric_limits<int64_t>::max();
    for (int r = 0; r < ep; ++r) {
      const int64_t n = room(r);
      if (n > 0) open.push_back(r), least = std::min(least, n);
    }
    if (open.empty()) return;
    const int64_t width = static_cast<int64_t>(open.size());
    const int64_t passes = std::min(least, rows / width);
    if (passes > 0) {
      for (int r : open) apply(r, passes);
      rows -= passes * width;
      continue;
    }
    for (int64_t i = 0; i < rows; ++i) apply(open[static_cast<std::size_t>(i)], 1);  // rows < width here
    return;
  }
}

}  // namespace

void add_by_rank(std::vector<int64_t>& load, int ep, int64_t cap, int64_t rows) {
  MOESIM_REQUIRE(ep >= 1 && load.size() % static_cast<std::size_t>(ep) == 0, "add_by_rank: ep must divide the experts");
  const std::size_t per = load.size() / static_cast<std::size_t>(ep);
  std::vector<int64_t> local(per);
  const auto room = [&](int r) {
    int64_t n = 0;
    for (std::size_t e = 0; e < per; ++e) n += std::max<int64_t>(0, cap - load[r * per + e]);
    return n;
  };
  const auto apply = [&](int r, int64_t n) {
    std::copy_n(load.begin() + static_cast<std::ptrdiff_t>(r * per), per, local.begin());
    fill_least_loaded(local, cap, n);
    std::copy(local.begin(), local.end(), load.begin() + static_cast<std::ptrdiff_t>(r * per));
  };
  by_rank_passes(ep, rows, room, apply);
}

void take_by_rank(std::vector<int64_t>& load, int ep, int64_t rows) {
  MOESIM_REQUIRE(ep >= 1 && load.size() % static_cast<std::size_t>(ep) == 0, "take_by_rank: ep must divide the experts");
  const std::size_t per = load.size() / static_cast<std::size_t>(ep);
  std::vector<int64_t> local(per);
  const auto room = [&](int r) {
    int64_t n = 0;
    for (std::size_t e = 0; e < per; ++e) n += load[r * per + e];
    return n;
  };
  const auto apply = [&](int r, int64_t n) {
    std::copy_n(load.begin() + static_cast<std::ptrdiff_t>(r * per), per, local.begin());
    take_most_loaded(local, n);
    std::copy(local.begin(), local.end(), load.begin() + static_cast<std::ptrdiff_t>(r * per));
  };
  by_rank_passes(ep, rows, room, apply);
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
  // 3. The cap: no expert above T rows; the overflow handed back rank by rank, each rank's row to its
  //    least-loaded expert below the cap.
  int64_t overflow = 0;
  for (int64_t& l : load) {
    if (l > tokens) overflow += l - tokens, l = tokens;
  }
  add_by_rank(load, ep, tokens, overflow);  // T k <= E T always leaves room for it
  // 4. The sum fixed to T k, rank by rank likewise (rows taken from each rank's most-loaded expert).
  const int64_t have = std::accumulate(load.begin(), load.end(), int64_t{0});
  if (have < total) add_by_rank(load, ep, tokens, total - have);
  if (have > total) take_by_rank(load, ep, have - total);
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
  for (int64_t t = 0; t < tokens; ++t) {
    // Fewer tokens than the stride: the tokens' offsets spread over it, floor(t stride / T), so a small
    // batch's experts lie apart (one of every E / (T k)) instead of the first T k in a row.
    const int64_t offset = tokens >= stride ? t : t * stride / tokens;
    for (int j = 0; j < top_k; ++j) ++load[static_cast<std::size_t>((offset + j * stride) % experts)];
  }
  return load;
}

}  // namespace moesim
