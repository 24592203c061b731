// EPLB over time (see eplb_timeline.hpp).
#include "src/serve/eplb_timeline.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>

#include "src/common/error.hpp"
#include "src/cost/rebalance.hpp"

namespace moesim {

int64_t moved_slots_max(const ExpertPlacement& from, const ExpertPlacement& to) {
  const int devices = std::max(from.num_devices, to.num_devices);
  std::vector<std::map<int32_t, int64_t>> held(static_cast<size_t>(devices));
  for (size_t s = 0; s < from.expert.size(); ++s) ++held[static_cast<size_t>(from.device[s])][from.expert[s]];
  std::vector<int64_t> moved(static_cast<size_t>(devices), 0);
  for (size_t s = 0; s < to.expert.size(); ++s) {
    int64_t& h = held[static_cast<size_t>(to.device[s])][to.expert[s]];
    if (h > 0) --h;
    else ++moved[static_cast<size_t>(to.device[s])];
  }
  return moved.empty() ? 0 : *std::max_element(moved.begin(), moved.end());
}

namespace {

struct TimelineState {
  ServingStepInput base;
  EplbTimeline timeline;
  EplbTally* tally = nullptr;
  int64_t step = 0;
  std::vector<int64_t> plan, window;  // window: the loads since the last plan, summed
  std::vector<double> ema;            // the exponential moving average of every step's loads (estimator ema)
};

// The estimator's loads as a plan's input: the window's sums, or the average scaled by 1000 and rounded (a plan
// reads loads relative to each other).
std::vector<int64_t> plan_input(const TimelineState& st) {
  if (st.timeline.estimator != LoadEstimator::ema) return st.window;
  std::vector<int64_t> out(st.ema.size());
  for (size_t e = 0; e < out.size(); ++e) out[e] = std::llround(st.ema[e] * 1e3);
  return out;
}

}  // namespace

StepCoster eplb_timeline_coster(const ServingStepInput& base, const EplbTimeline& timeline, EplbTally* tally,
                                bool balanced_attention) {
  if (timeline.loads.empty()) throw ConfigError("eplb: expected at least one draw of the routing over time, got none");
  if (timeline.steps_per_draw < 1 || timeline.rebalance_every < 0)
    throw ConfigError("eplb: expected steps a draw of at least 1 and a re-plan period of 0 or more steps");
  if (!(timeline.ema_weight > 0 && timeline.ema_weight <= 1))
    throw ConfigError("placement.ema_weight: expected a number in (0, 1]");
  const int E = base.model.experts;
  for (const std::vector<int64_t>& l : timeline.loads)
    if (static_cast<int>(l.size()) != E) throw ConfigError("eplb: expected loads of model.experts entries");
  auto st = std::make_shared<TimelineState>();
  st->base = base;
  st->timeline = timeline;
  st->tally = tally;
  st->plan = timeline.initial_plan.empty() ? timeline.loads.front() : timeline.initial_plan;
  st->window.assign(static_cast<size_t>(E), 0);
  return [st, balanced_attention](const StepBatch& b) {
    const EplbTimeline& t = st->timeline;
    const std::vector<int64_t>& loads =
        t.loads[static_cast<size_t>((st->step / t.steps_per_draw) % static_cast<int64_t>(t.loads.size()))];
    double wait = 0;
    if (t.rebalance_every > 0 && st->step > 0 && st->step % t.rebalance_every == 0) {
      const PlacementConfig& pc = st->base.moe.placement;
      const std::vector<int64_t> next = plan_input(*st);
      const int64_t moved = moved_slots_max(place_experts(st->plan, pc), place_experts(next, pc));
      if (moved > 0 && t.link_bytes_per_s > 0)
        wait = t.link_latency_s + static_cast<double>(moved) * t.expert_bytes * t.moe_layers / t.link_bytes_per_s;
      st->plan = next;
      std::fill(st->window.begin(), st->window.end(), 0);
      if (st->tally) {
        ++st->tally->replans;
        st->tally->moved_slots += moved;
        st->tally->transfer_s += wait;
      }
    }
    for (size_t e = 0; e < loads.size(); ++e) st->window[e] += loads[e];
    ema_update(st->ema, loads, t.ema_weight);
    ++st->step;
    ServingStepInput in = st->base;
    in.phase = b.prefill ? StepPhase::prefill : StepPhase::decode;
    if (balanced_attention) {
      in.shares = mean_shares(b, st->base.attention_dp);
    } else {
      in.sequences = b.sequences;
      in.sequence_rank = b.rank;
    }
    in.loads = {loads};
    in.plan_loads = {st->plan};
    return model_serving_step(in).step_s + wait;
  };
}

}  // namespace moesim
