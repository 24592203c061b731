// Tests of the noise rule of measured times (src/pipeline/measured_noise.hpp) on hand-picked inputs, each
// rule alone and together, and of the spread a real executed run records: min <= median <= max for every
// phase and the balanced layer, in the structs and in the JSON. No timing limits: only orderings and the
// deterministic repeats rule are checked on real runs. Host only.
#include "src/pipeline/measured_noise.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/report.hpp"

namespace moesim {
namespace {

// Five repeats with a 5% spread on both layers, two threads on eight idle cores: every rule quiet.
NoiseInputs quiet_inputs() {
  NoiseInputs in;
  in.repeats = 5;
  in.actual = {1.00e-3, 1.02e-3, 1.05e-3};
  in.balanced = {2.00e-3, 2.02e-3, 2.10e-3};
  in.threads = 2;
  in.cores = 8;
  in.load_average = 0.3;
  return in;
}

TEST(MeasuredNoise, TightSpreadIsQuiet) {
  const MeasuredNoise n = judge_measured_noise(quiet_inputs());
  EXPECT_FALSE(n.noisy);
  EXPECT_EQ(n.reason, "");
}

TEST(MeasuredNoise, RelativeSpreadIsMaxMinusMinOverMedian) {
  EXPECT_DOUBLE_EQ(relative_spread({1.0, 2.0, 3.0}), 1.0);
  EXPECT_DOUBLE_EQ(relative_spread({4.0, 4.0, 4.0}), 0.0);
  EXPECT_EQ(relative_spread({0.0, 0.0, 1.0}), 0.0);  // no positive median: no spread to judge
}

TEST(MeasuredNoise, WideSpreadOfEitherLayerIsNoisyWithReason) {
  NoiseInputs in = quiet_inputs();
  in.actual = {1.0e-3, 1.2e-3, 1.7e-3};  // (1.7 - 1.0) / 1.2 = 58%
  MeasuredNoise n = judge_measured_noise(in);
  EXPECT_TRUE(n.noisy);
  EXPECT_EQ(n.reason, "actual layer spread 58% > 10%");

  in = quiet_inputs();
  in.balanced = {2.0e-3, 2.0e-3, 2.206e-3};  // 10.3%: one decimal, so that it does not read "10% > 10%"
  n = judge_measured_noise(in);
  EXPECT_TRUE(n.noisy);
  EXPECT_EQ(n.reason, "balanced layer spread 10.3% > 10%");

  in = quiet_inputs();
  in.balanced = {2.0e-3, 2.0e-3, 2.19e-3};  // 9.5%: under the threshold
  EXPECT_FALSE(judge_measured_noise(in).noisy);
}

TEST(MeasuredNoise, MoreThreadsThanCoresIsNoisy) {
  NoiseInputs in = quiet_inputs();
  in.threads = 4;
  in.cores = 2;
  in.load_average = 0;
  const MeasuredNoise n = judge_measured_noise(in);
  EXPECT_TRUE(n.noisy);
  EXPECT_EQ(n.reason, "4 threads > 2 cores");  // the load rule is not repeated on top
}

TEST(MeasuredNoise, LoadAverageBesideOurThreadsOverTheCoresIsNoisy) {
  NoiseInputs in = quiet_inputs();
  in.threads = 2;
  in.cores = 2;
  in.load_average = 0.6;  // 0.6 + 2 > 2 + 0.5
  MeasuredNoise n = judge_measured_noise(in);
  EXPECT_TRUE(n.noisy);
  EXPECT_EQ(n.reason, "load average 0.60 + 2 threads > 2 cores + 0.50");

  in.load_average = 0.4;  // within the slack
  EXPECT_FALSE(judge_measured_noise(in).noisy);
  in.cores = 8;
  in.load_average = 6.6;  // 6.6 + 2 > 8 + 0.5
  EXPECT_TRUE(judge_measured_noise(in).noisy);
  in.load_average = 6.4;
  EXPECT_FALSE(judge_measured_noise(in).noisy);
  in.threads = 1;
  in.cores = 1;
  in.load_average = 0.75;
  EXPECT_EQ(judge_measured_noise(in).reason, "load average 0.75 + 1 thread > 1 core + 0.50");
}

TEST(MeasuredNoise, LoadRulesNeedHostTimingAndKnownFigures) {
  NoiseInputs in = quiet_inputs();
  in.load_average = 50;
  in.threads = 0;  // device-timed (CUDA events)
  EXPECT_FALSE(judge_measured_noise(in).noisy);
  in.threads = 16;
  in.cores = 0;  // cores unknown
  EXPECT_FALSE(judge_measured_noise(in).noisy);
  in = quiet_inputs();
  in.threads = in.cores;
  in.load_average = -1;  // no load average on this system
  EXPECT_FALSE(judge_measured_noise(in).noisy);
}

TEST(MeasuredNoise, FewerThanThreeRepeatsIsNoisy) {
  NoiseInputs in = quiet_inputs();
  in.repeats = 1;
  in.actual = {1e-3, 1e-3, 1e-3};  // one repeat: min = median = max
  in.balanced = {2e-3, 2e-3, 2e-3};
  MeasuredNoise n = judge_measured_noise(in);
  EXPECT_TRUE(n.noisy);
  EXPECT_EQ(n.reason, "execute.repeats 1 < 3: a median of 1 has no spread");
  in.repeats = 2;
  EXPECT_TRUE(judge_measured_noise(in).noisy);
  in.repeats = 3;
  EXPECT_FALSE(judge_measured_noise(in).noisy);
}

TEST(MeasuredNoise, EveryRuleThatFiresIsNamed) {
  NoiseInputs in = quiet_inputs();
  in.repeats = 2;
  in.actual = {1.0e-3, 1.5e-3, 2.0e-3};
  in.balanced = {1.0e-3, 1.5e-3, 2.0e-3};
  in.threads = 3;
  in.cores = 2;
  EXPECT_EQ(judge_measured_noise(in).reason,
            "execute.repeats 2 < 3: a median of 2 has no spread; actual layer spread 67% > 10%; balanced layer "
            "spread 67% > 10%; 3 threads > 2 cores");
}

Experiment tiny_executed(int repeats) {
  return default_experiment({"workload.batch=64", "execute.hidden=16", "execute.ffn=32",
                             "execute.repeats=" + std::to_string(repeats)});
}

std::vector<RouterVariant> token_choice_and_balanced(const Experiment& e) {
  RouterConfig balanced = e.router;
  balanced.gating = Gating::balanced;
  return {own_variant(e).front(), {"balanced", balanced}};
}

TEST(MeasuredSpread, MinMedianMaxOrderedOnARealRun) {
  const Experiment e = tiny_executed(3);
  const RunResult r = run_experiment(e, token_choice_and_balanced(e), RunOptions{});
  ASSERT_EQ(r.variants.size(), 2u);
  const nlohmann::json j = run_to_json(r);
  for (size_t i = 0; i < r.variants.size(); ++i) {
    const VariantResult& v = r.variants[i];
    ASSERT_TRUE(v.executed) << v.variant.label;
    const MeasuredTimes& m = v.measured;
    EXPECT_EQ(m.repeats, 3);
    const double phases[][3] = {{m.router_min_s, m.router_s, m.router_max_s},
                                {m.dispatch_min_s, m.dispatch_s, m.dispatch_max_s},
                                {m.experts_min_s, m.experts_s, m.experts_max_s},
                                {m.combine_min_s, m.combine_s, m.combine_max_s},
                                {m.layer_min_s, m.layer_s, m.layer_max_s},
                                {v.measured_balanced_layer_min_s, v.measured_balanced_layer_s,
                                 v.measured_balanced_layer_max_s}};
    for (const auto& p : phases) {
      EXPECT_GE(p[0], 0.0) << v.variant.label;
      EXPECT_LE(p[0], p[1]) << v.variant.label;
      EXPECT_LE(p[1], p[2]) << v.variant.label;
    }
    EXPECT_GT(m.layer_min_s, 0.0) << v.variant.label;
    EXPECT_GT(v.measured_balanced_layer_min_s, 0.0) << v.variant.label;

    const nlohmann::json& js = j["strategies"][i]["measured"];
    for (const char* phase : {"router", "dispatch", "experts", "combine", "layer", "balanced_layer"}) {
      const std::string p = phase;
      ASSERT_TRUE(js.contains(p + "_min_s") && js.contains(p + "_s") && js.contains(p + "_max_s")) << p;
      EXPECT_LE(js[p + "_min_s"].get<double>(), js[p + "_s"].get<double>()) << p;
      EXPECT_LE(js[p + "_s"].get<double>(), js[p + "_max_s"].get<double>()) << p;
    }
    EXPECT_EQ(js["layer_min_s"].get<double>(), m.layer_min_s);
    EXPECT_EQ(js["repeats"], 3);
    EXPECT_EQ(js["noisy"].get<bool>(), v.measured_noise.noisy);
    EXPECT_EQ(js["noise_reason"].get<std::string>(), v.measured_noise.reason);
    EXPECT_EQ(v.measured_noise.noisy, !v.measured_noise.reason.empty());
  }
}

TEST(MeasuredSpread, OneRepeatIsNoisyByRule) {
  const Experiment e = tiny_executed(1);
  const RunResult r = run_experiment(e, own_variant(e), RunOptions{});
  const VariantResult& v = r.variants.front();
  EXPECT_EQ(v.measured.layer_min_s, v.measured.layer_s);  // one sample: min = median = max
  EXPECT_EQ(v.measured.layer_max_s, v.measured.layer_s);
  EXPECT_TRUE(v.measured_noise.noisy);
  EXPECT_EQ(v.measured_noise.reason.rfind("execute.repeats 1 < 3: a median of 1 has no spread", 0), 0u)
      << v.measured_noise.reason;
  const nlohmann::json js = run_to_json(r)["strategies"][0]["measured"];
  EXPECT_TRUE(js["noisy"].get<bool>());
  EXPECT_GT(js["balanced_layer_s"].get<double>(), 0.0);  // the JSON keeps the numbers beside the flag
  EXPECT_TRUE(run_to_json(r)["strategies"][0]["metrics"].contains("measured_batching_efficiency"));
}

}  // namespace
}  // namespace moesim
