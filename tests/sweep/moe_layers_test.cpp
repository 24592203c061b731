// Tests that whole-model MoE times count the MoE layers only (model.moe_layers): a sweep row's modeled
// times are one MoE layer's times x moe_layers, so DeepSeek-V3 from its config.json (61 layers, the first 3
// dense) costs 58/61 of the same model with every layer MoE, and the table footer says so; a step run's
// phase totals (configs/olmoe-profile.yaml, recorded loads) scale their MoE part the same way. Modeled
// numbers are deterministic: 1e-12-relative comparisons. Host only.
#include <gtest/gtest.h>

#include <string>

#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/sweep_report.hpp"
#include "src/sweep/run_sweep.hpp"
#include "src/sweep/sweep.hpp"

namespace moesim {
namespace {

const std::string kV3 = std::string(MOESIM_TEST_DATA) + "/hf/deepseek-v3/config.json";

TEST(MoeLayers, SweepTimesScaleWithTheMoeLayers) {
  const Experiment e = load_experiment_text(
      "name: v3\n", "exp.yaml", {"model.hf_config=" + kV3, "workload.batch=256", "execute.enabled=false"});
  ASSERT_EQ(e.model.moe_layers, 58);
  const SweepResult s = run_sweep(e, parse_varies({"model.moe_layers=58,61"}), SweepOptions{});
  ASSERT_EQ(s.rows.size(), 2u);
  const SweepRow& moe58 = s.rows[0];
  const SweepRow& moe61 = s.rows[1];
  EXPECT_EQ(moe58.layers, 61);
  EXPECT_EQ(moe58.moe_layers, 58);
  EXPECT_EQ(moe61.moe_layers, 61);
  ASSERT_GT(moe61.actual.quantized_s, 0);
  EXPECT_NEAR(moe58.actual.quantized_s / moe61.actual.quantized_s, 58.0 / 61.0, 1e-12);
  EXPECT_NEAR(moe58.actual.ideal_s / moe61.actual.ideal_s, 58.0 / 61.0, 1e-12);
  EXPECT_NEAR(moe58.balanced.quantized_s / moe61.balanced.quantized_s, 58.0 / 61.0, 1e-12);
  const std::string table = format_sweep(s, ReportFormat::table);
  EXPECT_NE(table.find("cover the 58 MoE layers of model.layers = 61"), std::string::npos) << table;
}

TEST(MoeLayers, PhaseMoeTimeScalesWithTheMoeLayers) {
  const std::string profile = std::string(MOESIM_SOURCE_DIR) + "/configs/olmoe-profile.yaml";
  RunOptions o;
  o.execute = false;
  auto phase_moe_s = [&](const std::string& moe_layers) {
    const Experiment e = load_experiment_file(profile, {"model.moe_layers=" + moe_layers, "execute.enabled=false"});
    const RunResult run = run_experiment(e, own_variant(e), o);
    EXPECT_FALSE(run.variants.front().phases.empty());
    return run.variants.front().phases.front().modeled_moe_s;
  };
  const double all = phase_moe_s("16");
  ASSERT_GT(all, 0);
  EXPECT_NEAR(phase_moe_s("4") / all, 4.0 / 16.0, 1e-12);
}

}  // namespace
}  // namespace moesim
