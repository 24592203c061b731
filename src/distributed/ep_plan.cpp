// Planning of the expert-parallel layer (see ep_layer.hpp): token shares, local routings, slot replica
// ranges, send plans, padded rows, slot weights and the serial reference of the exchange counts. Pure
// functions, no MPI, always built; integers exact. Host only. Covered by tests/mpi/ep_plan_test.cpp.
#include "src/distributed/ep_layer.hpp"

#include <algorithm>
#include <numeric>

#include "src/common/error.hpp"

namespace moesim {

EpTokenShare ep_token_share(int64_t num_tokens, int rank, int num_ranks) {
  MOESIM_REQUIRE(num_ranks >= 1 && rank >= 0 && rank < num_ranks,
                 "rank " << rank << " is not in [0, " << num_ranks << ")");
  MOESIM_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got " << num_tokens);
  const int64_t base = num_tokens / num_ranks, extra = num_tokens % num_ranks;
  EpTokenShare s;
  s.begin = rank * base + std::min<int64_t>(rank, extra);
  s.end = s.begin + base + (rank < extra ? 1 : 0);
  return s;
}

Routing ep_local_routing(const Routing& global, const EpTokenShare& share) {
  require_valid_routing(global);
  MOESIM_REQUIRE(share.begin >= 0 && share.begin <= share.end && share.end <= global.num_tokens,
                 "token share [" << share.begin << ", " << share.end << ") is not inside the batch of "
                                 << global.num_tokens);
  Routing r;
  r.num_tokens = share.size();
  r.num_experts = global.num_experts;
  r.top_k = global.top_k;
  r.capacity = global.capacity;
  for (int64_t a = 0; a < global.num_assignments(); ++a) {
    const int64_t t = global.token[a];
    if (t < share.begin || t >= share.end) continue;
    r.token.push_back(static_cast<int32_t>(t - share.begin));
    r.expert.push_back(global.expert[a]);
    r.weight.push_back(global.weight[a]);
    r.kept.push_back(global.kept[a]);
  }
  return r;
}

bool ep_routing_is_token_local(const RouterConfig& cfg) {
  if (cfg.capacity_factor > 0) return false;
  switch (cfg.gating) {
    case Gating::token_choice:
    case Gating::group_limited:
    case Gating::hash:
      return true;
    default:
      return false;
  }
}

std::vector<int32_t> ep_rank_slots(const ExpertPlacement& p, int rank) {
  std::vector<int32_t> slots;
  for (size_t i = 0; i < p.device.size(); ++i)
    if (p.device[i] == rank) slots.push_back(static_cast<int32_t>(i));
  return slots;
}

void ep_slot_ranges(const ExpertPlacement& p, const std::vector<int64_t>& global_load, std::vector<int64_t>& first,
                    std::vector<int64_t>& count) {
  const size_t num_experts = p.replicas.size();
  MOESIM_REQUIRE(global_load.size() == num_experts,
                 "global load has " << global_load.size() << " entries, expected " << num_experts);
  MOESIM_REQUIRE(p.expert.size() == p.device.size(), "placement has " << p.expert.size() << " slots but "
                                                                      << p.device.size() << " devices");
  std::vector<int64_t> next(num_experts, 0);
  std::vector<int32_t> seen(num_experts, 0);
  first.assign(p.expert.size(), 0);
  count.assign(p.expert.size(), 0);
  for (size_t i = 0; i < p.expert.size(); ++i) {
    const int e = p.expert[i];
    MOESIM_REQUIRE(e >= 0 && static_cast<size_t>(e) < num_experts, "placement slot " << i << " holds expert " << e);
    const int64_t r = p.replicas[e];
    const int j = seen[e]++;
    first[i] = next[e];
    count[i] = global_load[e] / r + (j < global_load[e] % r ? 1 : 0);
    next[e] += count[i];
  }
  for (size_t e = 0; e < num_experts; ++e) {
    MOESIM_REQUIRE(seen[e] == p.replicas[e], "expert " << e << " has " << p.replicas[e] << " replicas but "
                                                       << seen[e] << " slots");
  }
}

EpSendPlan ep_send_plan(const ExpertPlacement& p, const std::vector<int64_t>& local_counts,
                        const std::vector<int64_t>& prefix, const std::vector<int64_t>& slot_first,
                        const std::vector<int64_t>& slot_count) {
  const size_t num_experts = p.replicas.size(), num_slots = p.expert.size();
  MOESIM_REQUIRE(local_counts.size() == num_experts && prefix.size() == num_experts,
                 "local counts and prefix need " << num_experts << " entries");
  MOESIM_REQUIRE(slot_first.size() == num_slots && slot_count.size() == num_slots,
                 "slot ranges need " << num_slots << " entries");
  // The rank's expert-major buffer: expert e's kept assignments start at local_offsets[e].
  std::vector<int64_t> local_offsets(num_experts + 1, 0);
  for (size_t e = 0; e < num_experts; ++e) local_offsets[e + 1] = local_offsets[e] + local_counts[e];

  EpSendPlan plan;
  plan.slot_rows.assign(num_slots, 0);
  plan.slot_first_row.assign(num_slots, 0);
  plan.rank_rows.assign(p.num_devices, 0);
  for (size_t i = 0; i < num_slots; ++i) {
    const int e = p.expert[i];
    // This rank holds e's global kept indices [prefix, prefix + count); the slot processes [first, first + n).
    const int64_t lo = std::max(prefix[e], slot_first[i]);
    const int64_t hi = std::min(prefix[e] + local_counts[e], slot_first[i] + slot_count[i]);
    plan.slot_rows[i] = std::max<int64_t>(0, hi - lo);
    plan.slot_first_row[i] = local_offsets[e] + (plan.slot_rows[i] > 0 ? lo - prefix[e] : 0);
    MOESIM_REQUIRE(p.device[i] >= 0 && p.device[i] < p.num_devices,
                   "placement slot " << i << " is on device " << p.device[i] << " of " << p.num_devices);
    plan.rank_rows[p.device[i]] += plan.slot_rows[i];
  }
  plan.slot_order.resize(num_slots);
  std::iota(plan.slot_order.begin(), plan.slot_order.end(), 0);
  std::stable_sort(plan.slot_order.begin(), plan.slot_order.end(),
                   [&](int32_t a, int32_t b) { return p.device[a] < p.device[b]; });
  plan.send_row.reserve(static_cast<size_t>(local_offsets[num_experts]));
  for (int32_t i : plan.slot_order)
    for (int64_t k = 0; k < plan.slot_rows[i]; ++k) plan.send_row.push_back(plan.slot_first_row[i] + k);
  MOESIM_REQUIRE(static_cast<int64_t>(plan.send_row.size()) == local_offsets[num_experts],
                 "the placement sends " << plan.send_row.size() << " of the rank's " << local_offsets[num_experts]
                                        << " kept assignments: the slot ranges do not cover the global load");
  return plan;
}

int64_t ep_padded_rows(int64_t rows, Layout layout, int block_size, int64_t capacity, int replicas) {
  switch (layout) {
    case Layout::dropless:
      return rows;
    case Layout::block:
      return (rows + block_size - 1) / block_size * block_size;
    case Layout::capacity:
      return std::max((capacity + replicas - 1) / replicas, rows);
  }
  return rows;
}

std::vector<int64_t> ep_exchange_counts_ref(const Routing& global, const ExpertPlacement& p, int num_ranks) {
  const int num_experts = global.num_experts;
  const int num_slots = static_cast<int>(p.expert.size());
  std::vector<int64_t> load(num_experts, 0);
  for (int64_t a = 0; a < global.num_assignments(); ++a)
    if (global.kept[a]) ++load[global.expert[a]];
  // Slots of each expert in slot order, and each one's count: load / r, the first load % r one more.
  std::vector<std::vector<int>> slots_of(num_experts);
  for (int i = 0; i < num_slots; ++i) slots_of[p.expert[i]].push_back(i);
  // Each expert's kept assignments by source rank, then assignment order: walk them once per (expert, rank).
  std::vector<int64_t> rows(static_cast<size_t>(num_ranks) * num_slots, 0);
  for (int e = 0; e < num_experts; ++e) {
    const int64_t r = static_cast<int64_t>(slots_of[e].size());
    int64_t seen = 0;
    for (int source = 0; source < num_ranks; ++source) {
      const EpTokenShare share = ep_token_share(global.num_tokens, source, num_ranks);
      for (int64_t a = 0; a < global.num_assignments(); ++a) {
        if (!global.kept[a] || global.expert[a] != e) continue;
        if (global.token[a] < share.begin || global.token[a] >= share.end) continue;
        // Which replica holds the seen-th assignment: replica j covers [start_j, start_j + size_j).
        int64_t start = 0;
        int j = 0;
        for (; j < r; ++j) {
          const int64_t size = load[e] / r + (j < load[e] % r ? 1 : 0);
          if (seen < start + size) break;
          start += size;
        }
        ++rows[static_cast<size_t>(source) * num_slots + slots_of[e][j]];
        ++seen;
      }
    }
  }
  return rows;
}

ExpertWeights ep_slot_weights(const ExpertWeights& full, const ExpertPlacement& p, const std::vector<int32_t>& slots) {
  require_valid_weights(full);
  ExpertWeights w;
  w.num_experts = static_cast<int>(slots.size());
  w.hidden = full.hidden;
  w.ffn = full.ffn;
  const size_t per_expert = static_cast<size_t>(full.hidden * full.ffn);
  w.w1.resize(per_expert * slots.size());
  w.w3.resize(per_expert * slots.size());
  w.w2.resize(per_expert * slots.size());
  for (size_t m = 0; m < slots.size(); ++m) {
    const int e = p.expert.at(slots[m]);
    MOESIM_REQUIRE(e >= 0 && e < full.num_experts, "slot " << slots[m] << " holds expert " << e << " of "
                                                           << full.num_experts);
    std::copy_n(full.w1.data() + e * per_expert, per_expert, w.w1.data() + m * per_expert);
    std::copy_n(full.w3.data() + e * per_expert, per_expert, w.w3.data() + m * per_expert);
    std::copy_n(full.w2.data() + e * per_expert, per_expert, w.w2.data() + m * per_expert);
  }
  return w;
}

}  // namespace moesim
