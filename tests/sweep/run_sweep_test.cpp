// Tests src/sweep/run_sweep and `moesim sweep`: the founding T4 argument (configs/experiments/
// seed-t4-mlp.yaml) puts the knee between 128 and 512 tokens, flat below and linear above, with the
// 8 layers multiplied in; tied width keys; gating as an axis; CSV/JSON shapes; --measure; bad --vary
// and bad keys exit 2 before anything runs; no progress bar when stderr is not a terminal.
// Modeled numbers are deterministic: exact or 1e-12-relative comparisons. Host only.
#include "src/sweep/run_sweep.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/roofline.hpp"
#include "tests/support/run_cli.hpp"
#include "src/report/sweep_report.hpp"
#include "src/report/text_format.hpp"
#include "src/sweep/knee.hpp"

namespace moesim {
namespace {

const std::string kSeed = std::string(MOESIM_SOURCE_DIR) + "/configs/experiments/seed-t4-mlp.yaml";
const std::string kMixtral = std::string(MOESIM_SOURCE_DIR) + "/configs/experiments/mixtral-8x7b-batch.yaml";

// Rows of a one-axis sweep by the axis value.
std::map<std::string, SweepRow> by_value(const SweepResult& s) {
  std::map<std::string, SweepRow> m;
  for (const SweepRow& r : s.rows) m[r.values.front()] = r;
  return m;
}

SweepResult seed_batch_sweep(const std::vector<std::string>& overrides = {}) {
  const Experiment e = load_experiment_file(kSeed, overrides);
  return run_sweep(e, parse_varies({"workload.batch=1..1024*2"}), SweepOptions{});
}

TEST(SeedT4Sweep, KneeLandsBetween512And1024) {
  const SweepResult s = seed_batch_sweep();
  ASSERT_EQ(s.rows.size(), 11u);
  auto rows = by_value(s);
  for (const SweepRow& r : s.rows) {
    EXPECT_NEAR(r.critical_batch, 216.6666666666667, 1e-9);  // 65e12 * 2 / (2 * 300e9)
    EXPECT_EQ(r.layers, 8);
    EXPECT_EQ(r.hardware, "t4-founding");
    EXPECT_EQ(r.num_tokens, std::stoll(r.values.front()));
  }
  // Memory-bound through 512 tokens, compute-bound at 1024: each row's activations (x, the gate and up
  // outputs, the activation's, y: (3 + 6) x 1024 fp16, 18432 B, 61.4 ns at 300 GB/s) eat into its FLOPs
  // (96.8 ns at 65 TFLOP/s), so the knee is at 20.97 us of weights / 35.4 ns = 594 rows, past the
  // weights-only critical batch 216.7.
  for (const char* b : {"1", "64", "128", "256", "512"}) EXPECT_EQ(rows[b].compute_bound_experts, 0) << b;
  EXPECT_EQ(rows["1024"].compute_bound_experts, 1);
  // Flat below the knee: batch 64 and 128 cost batch 1 plus only the extra activations, in the ideal
  // column and in the quantized one alike. The quantized row tile grows with the batch (16, 64, 128 rows)
  // and split-K spreads the 16 up and 8 down tiles over the 40 SMs, so its compute stays under the weight
  // stream and it is the ideal time plus 6 launches per layer (t4-founding has no K-step floor).
  const HardwareProfile hw = load_hardware_profile(HardwareRef{"t4-founding", ""}, kSeed);
  const ExpertRoofline m(hw, 1024, 1024, Dtype::fp16);
  for (const char* b : {"64", "128"}) {
    const double act = 8 * (std::stoll(b) - 1) * m.act_bytes_per_row / m.bandwidth_bytes_per_s;
    EXPECT_NEAR(rows[b].actual.ideal_s - rows["1"].actual.ideal_s, act, 1e-12 * rows["1"].actual.ideal_s) << b;
    EXPECT_NEAR(rows[b].actual.quantized_s - rows["1"].actual.quantized_s, act, 1e-12 * rows["1"].actual.ideal_s)
        << b;
    EXPECT_NEAR(rows[b].actual.quantized_s - rows[b].actual.ideal_s, 8 * 6 * m.figures.launch_s,
                1e-12 * rows[b].actual.ideal_s)
        << b;
  }
  EXPECT_LT(rows["64"].actual.ideal_s, 1.2 * rows["1"].actual.ideal_s);
  // Past the knee the time grows: more than 3x at 1024 (ideal), as its FLOPs: 8 layers x 1024 x 2P / F.
  EXPECT_GT(rows["1024"].actual.ideal_s, 3 * rows["1"].actual.ideal_s);
  EXPECT_NEAR(rows["1024"].actual.ideal_s, 8 * 1024 * m.flops_per_row / m.peak_flops_per_s,
              1e-12 * rows["1024"].actual.ideal_s);
  // The quantized column adds the launches at batch 1 and pays whole 128-row tiles in whole waves past
  // the knee; it more than doubles by 1024.
  EXPECT_GT(rows["1024"].actual.quantized_s, 2.5 * rows["1"].actual.quantized_s);
  EXPECT_GT(rows["512"].actual.quantized_s, rows["256"].actual.quantized_s);
  // Time per token falls as 1/N while flat.
  EXPECT_NEAR(rows["64"].time_per_token_s, rows["64"].actual.quantized_s / 64, 1e-18);
  // The model's 8 layers: one layer's cost, times 8.
  EXPECT_NEAR(rows["1024"].actual.ideal_s, 8 * expert_time(m, 1024).ideal_s, 1e-12 * rows["1024"].actual.ideal_s);
  // A dense layer is its own balanced counterfactual.
  for (const SweepRow& r : s.rows) {
    EXPECT_EQ(r.batching_efficiency, 1.0);
    EXPECT_EQ(r.imbalance, 1.0);
    EXPECT_EQ(r.drop_rate, 0.0);
    EXPECT_FALSE(r.measured);
  }
}

TEST(SeedT4Sweep, DatasheetBandwidthMovesTheCriticalBatch) {
  // The founding T4 with the datasheet's 320 GB/s (the t4 profile's; t4 itself takes the pooled fit's
  // efficiencies, which would move both ends).
  Experiment faster = load_experiment_file(kSeed, {});
  faster.hardware.name.clear();
  faster.hardware.inline_yaml = "name: t4-founding-320\nbase: t4-founding\nmemory_bandwidth_gbs: 320\n";
  const SweepResult s = run_sweep(faster, parse_varies({"workload.batch=1..1024*2"}), SweepOptions{});
  EXPECT_NEAR(s.rows.front().critical_batch, 203.125, 1e-9);  // 65e12 * 2 / (2 * 320e9)
  const SweepResult f = seed_batch_sweep();
  // Faster memory: cheaper in the flat region, the same compute-bound time past the knee.
  EXPECT_LT(s.rows.front().actual.ideal_s, f.rows.front().actual.ideal_s);
  EXPECT_EQ(s.rows.back().actual.ideal_s, f.rows.back().actual.ideal_s);
}

TEST(SeedT4Sweep, TiedWidthKeysSetHiddenAndFfn) {
  const Experiment e = load_experiment_file(kSeed, {});
  const SweepResult s =
      run_sweep(e, parse_varies({"model.hidden,model.ffn=256..8192*2", "workload.batch=1"}), SweepOptions{});
  ASSERT_EQ(s.rows.size(), 6u);
  const HardwareProfile hw = load_hardware_profile(HardwareRef{"t4-founding", ""}, kSeed);
  for (const SweepRow& r : s.rows) {
    const int64_t w = std::stoll(r.values[0]);
    // At batch 1 an MLP block is its weights over the bandwidth, plus one row of activations.
    const ExpertRoofline m(hw, w, w, Dtype::fp16);
    EXPECT_NEAR(r.actual.ideal_s, 8 * (m.weight_bytes + m.act_bytes_per_row) / m.bandwidth_bytes_per_s,
                1e-12 * r.actual.ideal_s)
        << w;
    EXPECT_NEAR(r.critical_batch, 216.6666666666667, 1e-9);  // weights only: independent of width
  }
}

TEST(SeedT4Sweep, BadKeyOrValueThrowsBeforeRunning) {
  const Experiment e = load_experiment_file(kSeed, {});
  size_t calls = 0;
  SweepOptions opts;
  opts.progress = [&](size_t, size_t) { ++calls; };
  EXPECT_THROW(run_sweep(e, parse_varies({"workload.batch=1,2,-5"}), opts), ConfigError);
  EXPECT_THROW(run_sweep(e, parse_varies({"model.nope=1"}), opts), ConfigError);
  EXPECT_EQ(calls, 0u);
  run_sweep(e, parse_varies({"workload.batch=1,2"}), opts);
  EXPECT_EQ(calls, 2u);
}

TEST(MoeSweep, GatingAxisShowsImbalanceCost) {
  const Experiment e = load_experiment_file(kMixtral, {"workload.batch=4096"});
  const SweepResult s = run_sweep(e, parse_varies({"router.gating=balanced,token_choice,expert_choice"}), SweepOptions{});
  auto rows = by_value(s);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows["balanced"].placement, "expert_parallel");
  EXPECT_EQ(rows["balanced"].devices, 8);
  EXPECT_EQ(rows["balanced"].experts, 8);
  EXPECT_EQ(rows["balanced"].top_k, 2);
  EXPECT_DOUBLE_EQ(rows["balanced"].batching_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(rows["expert_choice"].batching_efficiency, 1.0);  // equal loads by construction
  EXPECT_DOUBLE_EQ(rows["balanced"].erosion.imbalance_tiles_s, 0.0);
  // Skewed token choice: the hot device sets the layer's time. At the config's skew (0.15, Mixtral's
  // recorded loads) the hottest expert takes 1.247x the mean. One expert per device, every device
  // compute-bound at 4096 tokens: the ideal time is the busiest device's rows, so on the roofline imbalance
  // costs exactly mean / max rows; on the headline the busiest device's extra 128-row tiles cost more.
  EXPECT_GT(rows["token_choice"].imbalance, 1.2);
  EXPECT_NEAR(rows["token_choice"].roofline_efficiency, 1.0 / rows["token_choice"].imbalance, 1e-12);
  EXPECT_LT(rows["token_choice"].batching_efficiency_exact, rows["token_choice"].roofline_efficiency);
  // The headline is the tile phase's mean (4096 tokens put the balanced share on a tile boundary, the worst
  // phase for skew): what imbalance costs there is less than this exact batch pays, and still a cost.
  EXPECT_GT(rows["token_choice"].batching_efficiency, rows["token_choice"].batching_efficiency_exact);
  EXPECT_LT(rows["token_choice"].batching_efficiency, 0.95);
  EXPECT_GT(rows["token_choice"].actual.quantized_s, rows["balanced"].actual.quantized_s);
  EXPECT_EQ(rows["token_choice"].balanced.quantized_s, rows["balanced"].actual.quantized_s);
}

TEST(MoeSweep, SkewMovesTheKneeEarlierAndCostsPastIt) {
  // Mixtral on 8 H100s, one expert per device, skew 1 (fixed here, whatever the config ships): the hot
  // device passes its knee first.
  const Experiment e = load_experiment_file(kMixtral, {"workload.skew=1.0"});
  const SweepResult s =
      run_sweep(e, parse_varies({"router.gating=balanced,token_choice", "workload.batch=64..16384*2"}), SweepOptions{});
  ASSERT_EQ(s.knees.size(), 2u);
  const SweepKnee& balanced = s.knees[0];
  const SweepKnee& skewed = s.knees[1];
  EXPECT_EQ(balanced.values, (std::vector<std::string>{"balanced", ""}));
  ASSERT_EQ(balanced.rows.size(), 9u);
  for (size_t i = 1; i < balanced.rows.size(); ++i)
    EXPECT_LT(s.rows[balanced.rows[i - 1]].num_tokens, s.rows[balanced.rows[i]].num_tokens);
  // The balanced gating is its own counterpart; the knee lies between B* x E / k / 2 and 4 x that.
  ASSERT_TRUE(balanced.tokens && balanced.balanced_tokens);
  EXPECT_EQ(*balanced.tokens, *balanced.balanced_tokens);
  const double bstar_tokens = s.rows.front().critical_batch * 8 / 2;
  EXPECT_GE(*balanced.tokens, bstar_tokens / 2);
  EXPECT_LE(*balanced.tokens, 4 * bstar_tokens);
  EXPECT_EQ(*balanced.imbalance_cost_past, 0.0);
  // Skewed token choice: the same counterpart's knee, its own earlier, and a real cost past it.
  ASSERT_TRUE(skewed.tokens && skewed.balanced_tokens);
  EXPECT_EQ(*skewed.balanced_tokens, *balanced.tokens);
  EXPECT_LT(*skewed.tokens, *skewed.balanced_tokens);
  EXPECT_GT(*skewed.imbalance_cost_past, 0.2);
  // The knee is the rule applied to the rows: recompute it from the table's own numbers.
  std::vector<int64_t> n;
  std::vector<double> t;
  for (size_t r : skewed.rows) {
    n.push_back(s.rows[r].num_tokens);
    t.push_back(s.rows[r].actual.quantized_s);
  }
  EXPECT_EQ(knee_tokens(n, t), skewed.tokens);
  // Every format carries it.
  const std::string csv = format_sweep(s, ReportFormat::csv);
  EXPECT_NE(csv.find(",knee_tokens,balanced_knee_tokens,erosion_idle_saving_s,erosion_tile_phase_s,imbalance_cost,"
                     "idle_saving,batching_efficiency_exact\n"),
            std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(format_sweep(s, ReportFormat::json));
  EXPECT_EQ(j["knees"][1]["knee_tokens"].get<int64_t>(), *skewed.tokens);
  const std::string table = format_sweep(s, ReportFormat::table);
  EXPECT_NE(table.find("router.gating=token_choice: this routing moves the knee from " +
                       std::to_string(*skewed.balanced_tokens) + " tokens (balanced) to " + std::to_string(*skewed.tokens) +
                       " tokens"),
            std::string::npos)
      << table;
}

TEST(SweepFormat, CsvAndJsonHaveOneRowPerPoint) {
  const Experiment e = load_experiment_file(kSeed, {});
  const SweepResult s = run_sweep(e, parse_varies({"workload.batch=1,2,4"}), SweepOptions{});
  const std::string csv = format_sweep(s, ReportFormat::csv);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_EQ(csv.rfind("workload.batch,gating,profile,placement,devices,num_tokens,", 0), 0u) << csv;
  EXPECT_EQ(csv.find("measured"), std::string::npos);  // no measured columns without --measure
  const auto j = nlohmann::json::parse(format_sweep(s, ReportFormat::json));
  EXPECT_EQ(j["rows"].size(), 3u);
  EXPECT_EQ(j["axes"][0]["key"], "workload.batch");
  EXPECT_EQ(j["rows"][2]["values"]["workload.batch"], "4");
  EXPECT_GT(j["rows"][0]["actual"]["quantized_s"].get<double>(), 0.0);
  const std::string table = format_sweep(s, ReportFormat::table);
  EXPECT_NE(table.find("quant_us"), std::string::npos);
  EXPECT_NE(table.find("model.layers = 8"), std::string::npos);
  // Markdown: the same columns (all of them) as a table, and the legend as bullets.
  const std::string md = format_sweep(s, ReportFormat::markdown);
  EXPECT_EQ(md.rfind("| workload.batch | tokens |", 0), 0u) << md;
  EXPECT_NE(md.find("| crit_batch |"), std::string::npos) << md;
  EXPECT_NE(md.find("\n- crit_batch = peak_flops"), std::string::npos) << md;
}

TEST(SweepCli, CsvToStdoutQuietStderr) {
  const auto r = testing::run_cli("sweep " + kSeed + " --vary workload.batch=1..1024*2 --format csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 12);  // header + 11 batches
  EXPECT_TRUE(r.err.empty()) << r.err;                           // stderr is not a terminal: no bar
}

TEST(SweepCli, MeasureFillsMeasuredColumns) {
  const auto r = testing::run_cli(
      "sweep --vary workload.batch=8,64 --measure --format json --set execute.hidden=32 --set execute.ffn=64 "
      "--set execute.repeats=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 2u);
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["measured"]["experts_s"].get<double>(), 0.0);
    EXPECT_GT(row["measured"]["layer_s"].get<double>(), 0.0);
  }
}

TEST(SweepReport, NoisyPointsShowNoMeasEffAndSayWhy) {
  // execute.repeats 1 is noisy by rule (src/pipeline/measured_noise.hpp), whatever the machine's load.
  const Experiment e = load_experiment_file(kSeed, {"execute.hidden=16", "execute.ffn=32", "execute.repeats=1"});
  SweepOptions opts;
  opts.measure = true;
  SweepResult s = run_sweep(e, parse_varies({"workload.batch=8,16"}), opts);
  ASSERT_EQ(s.rows.size(), 2u);
  for (const SweepRow& r : s.rows) EXPECT_TRUE(r.measured_noise.noisy);
  const std::string table = format_sweep(s, ReportFormat::table, true);  // --wide: every column
  EXPECT_NE(table.find("meas_eff -: 2 of 2 point(s) with noisy measured times"), std::string::npos) << table;
  EXPECT_NE(table.find("workload.batch=8: execute.repeats 1 < 3"), std::string::npos) << table;
  // The last cell of each data row is meas_eff: "-".
  std::istringstream lines(table);
  std::string line;
  std::getline(lines, line);
  ASSERT_EQ(line.substr(line.rfind(' ') + 1), "meas_eff") << table;
  for (int row = 0; row < 2 && std::getline(lines, line); ++row) EXPECT_EQ(line.substr(line.rfind(' ') + 1), "-") << line;

  // CSV and JSON keep the number beside the flag.
  const std::string csv = format_sweep(s, ReportFormat::csv);
  EXPECT_NE(csv.find(",measured_batching_efficiency,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",measured_noisy\n"), std::string::npos) << csv;
  const auto j = nlohmann::json::parse(format_sweep(s, ReportFormat::json));
  for (const auto& row : j["rows"]) {
    EXPECT_TRUE(row["measured"]["noisy"].get<bool>());
    EXPECT_GT(row["measured"]["batching_efficiency"].get<double>(), 0.0);
    EXPECT_LE(row["measured"]["layer_min_s"].get<double>(), row["measured"]["layer_s"].get<double>());
    EXPECT_LE(row["measured"]["layer_s"].get<double>(), row["measured"]["layer_max_s"].get<double>());
  }

  // A quiet point shows its ratio and no legend.
  for (SweepRow& r : s.rows) r.measured_noise = MeasuredNoise{};
  const std::string quiet = format_sweep(s, ReportFormat::table, true);
  EXPECT_EQ(quiet.find("meas_eff -:"), std::string::npos) << quiet;
  EXPECT_NE(quiet.find(text::fixed(s.rows[0].measured_balanced_layer_s / s.rows[0].measured_layer_s, 3)),
            std::string::npos)
      << quiet;
}

TEST(SweepCli, BadVaryExitsTwo) {
  for (const char* args : {"sweep --vary workload.batch=0..8*2", "sweep --vary workload.batch", "sweep",
                           "sweep --vary model.nope=1", "sweep --vary workload.batch=1 --vary workload.batch=2",
                           "sweep --vary workload.batch=1 --format yaml", "sweep --vary workload.batch=1 --format csv --wide"}) {
    const auto r = testing::run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": one line, got\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
}

}  // namespace
}  // namespace moesim
