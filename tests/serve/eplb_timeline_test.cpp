// Tests src/serve/eplb_timeline: the slots a GPU gains between two placements (worked by hand), and the timeline's
// re-plans: none with the plan made once, one every N steps otherwise, no transfer when the plan does not change,
// and each transfer's wait as moved slots x an expert's bytes x the MoE layers over the link. Host only.
#include "src/serve/eplb_timeline.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/sweep/published_serve.hpp"

namespace moesim {
namespace {

ExpertPlacement placed(int devices, const std::vector<int32_t>& expert, const std::vector<int32_t>& device) {
  ExpertPlacement p;
  p.num_devices = devices;
  p.expert = expert;
  p.device = device;
  return p;
}

TEST(EplbTimeline, MovedSlotsCountWhatEachGpuDidNotHold) {
  // Before: GPU 0 holds experts 0 and 1, GPU 1 experts 2 and 3. After: GPU 0 holds 0 and 2, GPU 1 holds 1 and 3:
  // each gains one expert.
  const ExpertPlacement a = placed(2, {0, 1, 2, 3}, {0, 0, 1, 1});
  const ExpertPlacement b = placed(2, {0, 2, 1, 3}, {0, 0, 1, 1});
  EXPECT_EQ(moved_slots_max(a, b), 1);
  EXPECT_EQ(moved_slots_max(a, a), 0);
  // A second replica of expert 0 on GPU 0 is a new slot there (it held one copy); GPU 1's 2 and 3 stay.
  const ExpertPlacement c = placed(2, {0, 0, 2, 3}, {0, 0, 1, 1});
  EXPECT_EQ(moved_slots_max(a, c), 1);
  // GPU 1 takes experts 0 and 1 that GPU 0 held: two slots.
  const ExpertPlacement d = placed(2, {2, 3, 0, 1}, {0, 0, 1, 1});
  EXPECT_EQ(moved_slots_max(a, d), 2);
}

ServingStepInput deepseek_eplb() {
  Experiment e = load_experiment_file(std::string(MOESIM_SOURCE_DIR) + "/configs/deepseek-v3.yaml", {});
  e.placement.devices = 16;
  e.placement.replicas = 32;
  const HardwareProfile hw = load_hardware_profile(e.hardware, e.source_file);
  ServeSetup s;
  s.limits.max_batch = 8;
  s.limits.max_num_tokens = 64;
  return serve_input_for(e, hw, s, {}).input.step;
}

// Two draws: the first skewed to the 32 low experts, the second twice as much to the 32 high ones (so that their sum
// replicates the high experts, not the low).
std::pair<std::vector<int64_t>, std::vector<int64_t>> low_and_high(int experts) {
  std::vector<int64_t> low(static_cast<size_t>(experts), 10), high(static_cast<size_t>(experts), 10);
  for (int e = 0; e < 32; ++e) {
    low[static_cast<size_t>(e)] = 400;
    high[static_cast<size_t>(experts - 1 - e)] = 800;
  }
  return {low, high};
}

TEST(EplbTimeline, ReplansEveryNStepsAndCostsTheMovedWeights) {
  const ServingStepInput base = deepseek_eplb();
  const auto [low, high] = low_and_high(base.model.experts);
  EplbTimeline t;
  t.loads = {low, high};
  t.steps_per_draw = 1;
  t.initial_plan = low;
  t.expert_bytes = 1e6;
  t.moe_layers = 10;
  t.link_bytes_per_s = 1e9;
  t.link_latency_s = 1e-3;
  StepBatch b;
  StepSequence s;
  s.context_tokens = s.attended_positions = 100;
  s.query_tokens = 1;
  for (int r = 0; r < base.attention_dp; ++r) {
    b.sequences.push_back(s);
    b.rank.push_back(r);
  }
  // The plan made once: no re-plan in 5 steps.
  EplbTally once;
  const StepCoster fixed = eplb_timeline_coster(base, t, &once);
  for (int i = 0; i < 5; ++i) EXPECT_GT(fixed(b), 0);
  EXPECT_EQ(once.replans, 0);
  EXPECT_DOUBLE_EQ(once.transfer_s, 0);
  // Every 2 steps: re-plans before steps 2 and 4, each from the low and high draws summed; the first moves the
  // high experts' replicas in, the second none (the same window's plan). Each wait is 1 ms + moved x 1 MB x 10 / 1 GB/s.
  t.rebalance_every = 2;
  EplbTally every;
  const StepCoster replanned = eplb_timeline_coster(base, t, &every);
  for (int i = 0; i < 5; ++i) EXPECT_GT(replanned(b), 0);
  EXPECT_EQ(every.replans, 2);
  EXPECT_GT(every.moved_slots, 0);
  const double waits = every.transfer_s;
  EXPECT_NEAR(waits, 1e-3 + every.moved_slots * 1e6 * 10 / 1e9, 1e-12);  // only the first re-plan moves weights
  // One draw that never changes, planned from itself: a re-plan moves nothing and waits nothing.
  EplbTimeline still = t;
  still.loads = {low};
  EplbTally none;
  const StepCoster same = eplb_timeline_coster(base, still, &none);
  for (int i = 0; i < 5; ++i) same(b);
  EXPECT_EQ(none.replans, 2);
  EXPECT_EQ(none.moved_slots, 0);
  EXPECT_DOUBLE_EQ(none.transfer_s, 0);
}

TEST(EplbTimeline, TheEmaEstimatorPlansFromTheAverage) {
  const ServingStepInput base = deepseek_eplb();
  const auto [low, high] = low_and_high(base.model.experts);
  EplbTimeline t;
  t.loads = {high, low};
  t.steps_per_draw = 1;
  t.rebalance_every = 2;
  t.initial_plan = high;
  t.expert_bytes = 1e6;
  t.link_bytes_per_s = 1e9;
  StepBatch b;
  StepSequence s;
  s.context_tokens = s.attended_positions = 100;
  s.query_tokens = 1;
  b.sequences.push_back(s);
  b.rank.push_back(0);
  auto moved = [&](LoadEstimator estimator, double weight, int steps) {
    EplbTimeline x = t;
    x.estimator = estimator;
    x.ema_weight = weight;
    EplbTally tally;
    const StepCoster c = eplb_timeline_coster(base, x, &tally);
    for (int i = 0; i < steps; ++i) c(b);
    EXPECT_EQ(tally.replans, (steps - 1) / 2);
    return tally.moved_slots;
  };
  // Steps of `high` then `low`, re-plans before steps 2 and 4. The window's sum, high + low, places the experts as
  // `high` does (the doubled high experts take the replicas, as ReplansEveryNSteps shows): nothing moves.
  EXPECT_EQ(moved(LoadEstimator::window, 0.5, 5), 0);
  // Weight 0.5: (high + low) / 2, the window's sum in proportion: the same plan.
  EXPECT_EQ(moved(LoadEstimator::ema, 0.5, 3), 0);
  // Weight 1: the last step's loads alone, `low`: the low experts' replicas move in.
  EXPECT_GT(moved(LoadEstimator::ema, 1.0, 3), 0);
  t.ema_weight = 0;
  EXPECT_THROW(eplb_timeline_coster(base, t, nullptr), ConfigError);
}

}  // namespace
}  // namespace moesim
