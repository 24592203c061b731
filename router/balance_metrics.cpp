// Balance metrics of one routed batch: the formulas of docs/design.md "Definitions", one loop each.
// Serial host code; every sum runs in a fixed order (experts ascending, tokens ascending) in double,
// so results are bit-identical across runs and machines. Covered by tests/router/balance_metrics_test.cpp.
#include "router/balance_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "src/common/error.hpp"

namespace moesim {
namespace {

// max(v) / mean(v) over all entries; 1 when the sum is 0 (an empty batch is not unbalanced).
double max_over_mean(const std::vector<int64_t>& v, int64_t total) {
  if (total == 0) return 1.0;
  const int64_t mx = *std::max_element(v.begin(), v.end());
  return static_cast<double>(mx) * static_cast<double>(v.size()) / static_cast<double>(total);
}

// (max(v) - mean(v)) / mean(v): the numerator max E - sum in integers, so a balanced batch gives exactly 0;
// 0 when the sum is 0.
double max_violation(const std::vector<int64_t>& v, int64_t total) {
  if (total == 0) return 0.0;
  const int64_t mx = *std::max_element(v.begin(), v.end());
  return static_cast<double>(mx * static_cast<int64_t>(v.size()) - total) / static_cast<double>(total);
}

// Everything that depends on load/demand alone. Expects m.load, m.demand and m.capacity set.
void fill_load_metrics(BalanceMetrics& m, int64_t num_tokens, int top_k) {
  const int num_experts = static_cast<int>(m.load.size());
  int64_t total = 0, total_demand = 0;
  for (int e = 0; e < num_experts; ++e) {
    total += m.load[e];
    total_demand += m.demand[e];
  }
  m.imbalance = max_over_mean(m.load, total);
  m.max_vio = max_violation(m.load, total);
  m.demand_imbalance = max_over_mean(m.demand, total_demand);

  m.active_experts = 0;
  for (int e = 0; e < num_experts; ++e) m.active_experts += m.load[e] > 0 ? 1 : 0;
  m.dead_experts = num_experts - m.active_experts;

  // ceil(0.2 E) in integers, so that E = 5, 10, ... do not depend on how 0.2 rounds.
  const int tail = (num_experts + 4) / 5;
  if (total == 0) {
    m.cv = 0.0;
    m.entropy_norm = 1.0;
    m.top20_share = m.bottom20_share = static_cast<double>(tail) / num_experts;
  } else {
    const double mean = static_cast<double>(total) / num_experts;
    double sq = 0.0;
    for (int e = 0; e < num_experts; ++e) {
      const double d = static_cast<double>(m.load[e]) - mean;
      sq += d * d;
    }
    m.cv = std::sqrt(sq / num_experts) / mean;  // population std: divide by E, not E - 1

    if (num_experts == 1) {
      m.entropy_norm = 1.0;
    } else {
      double h = 0.0;  // Shannon entropy in nats, 0 ln 0 = 0
      for (int e = 0; e < num_experts; ++e) {
        if (m.load[e] == 0) continue;
        const double p = static_cast<double>(m.load[e]) / static_cast<double>(total);
        h -= p * std::log(p);
      }
      m.entropy_norm = std::min(1.0, std::max(0.0, h / std::log(static_cast<double>(num_experts))));
    }

    std::vector<int64_t> sorted = m.load;
    std::sort(sorted.begin(), sorted.end(), std::greater<int64_t>());
    int64_t top = 0, bottom = 0;
    for (int i = 0; i < tail; ++i) {
      top += sorted[i];
      bottom += sorted[num_experts - 1 - i];
    }
    m.top20_share = static_cast<double>(top) / static_cast<double>(total);
    m.bottom20_share = static_cast<double>(bottom) / static_cast<double>(total);
  }

  m.dropped = total_demand - total;
  const int64_t slots = num_tokens * top_k;
  m.drop_rate = slots > 0 ? static_cast<double>(m.dropped) / static_cast<double>(slots) : 0.0;
  m.utilization.assign(num_experts, 0.0);
  if (slots > 0) {
    for (int e = 0; e < num_experts; ++e)
      m.utilization[e] = static_cast<double>(m.load[e]) * num_experts / static_cast<double>(slots);
  }
}

int64_t padding_waste(const std::vector<int64_t>& load, int64_t capacity, Layout layout, int block_size) {
  int64_t waste = 0;
  switch (layout) {
    case Layout::dropless:
      return 0;
    case Layout::block:
      for (int64_t l : load) waste += (l + block_size - 1) / block_size * block_size - l;
      return waste;
    case Layout::capacity: {
      const int64_t c = capacity > 0 ? capacity : *std::max_element(load.begin(), load.end());
      for (int64_t l : load) waste += std::max(c, l) - l;
      return waste;
    }
  }
  return 0;
}

// The four router losses from the logits. P[e] = mean over tokens of softmax(logits)[e].
// Each token's own top-1 expert under the strategy that routed it, counted per expert (before any
// capacity drop). Token-major routings (every gating but expert choice: assignment t*k + j is the
// token's j-th choice) take slot 0, the gate's first choice. Otherwise (expert choice) a token's top-1
// is its assignment of largest gate weight, ties to the one listed first (the lower expert); a token
// no expert picked has none.
std::vector<int64_t> own_top1_counts(const Routing& r) {
  std::vector<int64_t> top1(r.num_experts, 0);
  const int64_t n = r.num_tokens, k = r.top_k;
  bool token_major = r.num_assignments() == n * k;
  for (int64_t i = 0; token_major && i < r.num_assignments(); ++i) token_major = r.token[i] == i / k;
  if (token_major) {
    for (int64_t t = 0; t < n; ++t) ++top1[r.expert[t * k]];
    return top1;
  }
  // A routing without weights (a replayed trace may carry none) takes the first listed assignment.
  const bool weighted = static_cast<int64_t>(r.weight.size()) == r.num_assignments();
  std::vector<int64_t> best(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < r.num_assignments(); ++i) {
    const int64_t b = best[r.token[i]];
    if (b < 0 || (weighted && r.weight[i] > r.weight[b])) best[r.token[i]] = i;
  }
  for (int64_t b : best)
    if (b >= 0) ++top1[r.expert[b]];
  return top1;
}

void fill_losses(BalanceMetrics& m, const LogitStats& stats, const std::vector<int64_t>& top1, int top_k) {
  const int num_experts = static_cast<int>(m.load.size());
  const std::vector<double>& prob_sum = stats.prob_sum;
  const double z_sum = stats.z_sum;
  const double n = static_cast<double>(stats.num_tokens);
  double mixtral = 0.0, switch_sum = 0.0, gshard = 0.0;
  for (int e = 0; e < num_experts; ++e) {
    const double p = prob_sum[e] / n;
    const double f = static_cast<double>(m.demand[e]) / n;
    mixtral += f * p;
    switch_sum += f / top_k * p;
    gshard += static_cast<double>(top1[e]) / n * p;
  }
  // HF transformers Mixtral load_balancing_loss_func: E * sum_{j,e} f_{j,e} P_e with f over the k
  // one-hot slots, i.e. E * sum_e (demand[e] / N) * P_e; equals k at perfect balance.
  m.aux_loss = num_experts * mixtral;
  // Switch Transformer, Fedus et al. 2021, eq. 4: alpha * N * sum_i f_i P_i with f_i the fraction of
  // assignments to expert i (Megatron-LM switch_load_balancing_loss_func divides by k); 1 at balance.
  m.aux_loss_switch = num_experts * switch_sum;
  // GShard, Lepikhin et al. 2020, Algorithm 1: l_aux from the top-1 counts c_e / S and the mean gates
  // m_e, scaled to E * sum_e as the fairseq/DeepSpeed/Tutel implementations do; 1 at balance. c_e counts
  // each token's top-1 under its own strategy (own_top1_counts), so the loss follows the router.
  m.aux_loss_gshard = num_experts * gshard;
  // ST-MoE router z-loss, Zoph et al. 2022, eq. 5: (1/B) sum_i (log sum_j exp x_ij)^2.
  m.z_loss = z_sum / n;
  m.has_logits = true;
}

}  // namespace

LogitStats logit_stats(const float* logits, int64_t num_tokens, int num_experts) {
  LogitStats st;
  st.num_tokens = num_tokens;
  st.prob_sum.assign(static_cast<size_t>(num_experts), 0.0);
  std::vector<double> row(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* z = logits + t * num_experts;
    double zmax = z[0];
    for (int e = 1; e < num_experts; ++e) zmax = z[e] > zmax ? z[e] : zmax;
    double s = 0.0;
    for (int e = 0; e < num_experts; ++e) {
      row[e] = std::exp(static_cast<double>(z[e]) - zmax);
      s += row[e];
    }
    for (int e = 0; e < num_experts; ++e) st.prob_sum[e] += row[e] / s;
    const double lse = zmax + std::log(s);
    st.z_sum += lse * lse;
  }
  return st;
}

BalanceMetrics compute_balance_metrics(const Routing& r, const float* logits, Layout layout,
                                       int block_size) {
  if (logits == nullptr || r.num_tokens <= 0 || r.num_experts < 1) {
    LogitStats none;
    return compute_balance_metrics(r, none, layout, block_size);
  }
  return compute_balance_metrics(r, logit_stats(logits, r.num_tokens, r.num_experts), layout, block_size);
}

BalanceMetrics compute_balance_metrics(const Routing& r, const LogitStats& stats, Layout layout, int block_size) {
  MOESIM_REQUIRE(r.num_experts >= 1, "num_experts must be >= 1, got " << r.num_experts);
  MOESIM_REQUIRE(r.top_k >= 1, "top_k must be >= 1, got " << r.top_k);
  MOESIM_REQUIRE(r.num_tokens >= 0, "num_tokens must be >= 0, got " << r.num_tokens);
  MOESIM_REQUIRE(r.capacity >= 0, "capacity must be >= 0, got " << r.capacity);
  const int64_t num_assignments = r.num_assignments();
  MOESIM_REQUIRE(static_cast<int64_t>(r.token.size()) == num_assignments &&
                     static_cast<int64_t>(r.kept.size()) == num_assignments,
                 "routing arrays differ in length: expert " << num_assignments << ", token "
                                                            << r.token.size() << ", kept " << r.kept.size());
  MOESIM_REQUIRE(layout != Layout::block || block_size >= 1,
                 "block layout needs block_size >= 1, got " << block_size);

  BalanceMetrics m;
  const int num_experts = r.num_experts;
  m.load.assign(num_experts, 0);
  m.demand.assign(num_experts, 0);
  m.capacity = r.capacity;
  std::vector<uint8_t> routed(static_cast<size_t>(r.num_tokens), 0);
  for (int64_t i = 0; i < num_assignments; ++i) {
    const int32_t e = r.expert[i];
    const int32_t t = r.token[i];
    MOESIM_REQUIRE(e >= 0 && e < num_experts, "assignment " << i << ": expert " << e << " not in [0, "
                                                            << num_experts << ")");
    MOESIM_REQUIRE(t >= 0 && t < r.num_tokens, "assignment " << i << ": token " << t << " not in [0, "
                                                             << r.num_tokens << ")");
    ++m.demand[e];
    if (r.kept[i]) {
      ++m.load[e];
      routed[t] = 1;
    }
  }
  fill_load_metrics(m, r.num_tokens, r.top_k);
  m.tokens_unrouted = 0;
  for (uint8_t f : routed) m.tokens_unrouted += f ? 0 : 1;
  m.padding_waste = padding_waste(m.load, r.capacity, layout, block_size);
  if (!stats.prob_sum.empty() && r.num_tokens > 0) {
    MOESIM_REQUIRE(stats.num_tokens == r.num_tokens && static_cast<int>(stats.prob_sum.size()) == num_experts,
                   "logit statistics of " << stats.num_tokens << " tokens x " << stats.prob_sum.size()
                                          << " experts for a routing of " << r.num_tokens << " x " << num_experts);
    fill_losses(m, stats, own_top1_counts(r), r.top_k);
  }
  return m;
}

BalanceMetrics metrics_from_loads(const std::vector<int64_t>& load, int64_t num_tokens, int top_k) {
  MOESIM_REQUIRE(!load.empty(), "load profile has no experts");
  MOESIM_REQUIRE(top_k >= 1, "top_k must be >= 1, got " << top_k);
  MOESIM_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got " << num_tokens);
  for (size_t e = 0; e < load.size(); ++e)
    MOESIM_REQUIRE(load[e] >= 0, "load[" << e << "] = " << load[e] << " is negative");
  BalanceMetrics m;
  m.load = load;
  m.demand = load;
  m.capacity = 0;
  fill_load_metrics(m, num_tokens, top_k);
  m.tokens_unrouted = 0;
  m.padding_waste = 0;
  return m;
}

Aggregate aggregate(const std::vector<double>& values) {
  Aggregate a;
  if (values.empty()) return a;
  const size_t n = values.size();
  double sum = 0.0;
  for (double v : values) sum += v;  // input order: deterministic
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  a.mean = sum / static_cast<double>(n);
  // Nearest rank: the ceil(p n / 100)-th smallest, computed in integers.
  a.p50 = sorted[(50 * n + 99) / 100 - 1];
  a.p95 = sorted[(95 * n + 99) / 100 - 1];
  a.max = sorted[n - 1];
  return a;
}

}  // namespace moesim
