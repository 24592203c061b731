// The line run and compare open with (src/report/verdict.hpp): what imbalance costs and what skew saves,
// worked by hand from an erosion's parts, and the line as a run prints it: the same figures as the JSON's
// erosion of the headline placement, first in the table. Host only.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/report.hpp"
#include "src/report/verdict.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

TEST(Verdict, CostsAreTheImbalancePartsOfTheLayer) {
  // The README's token_choice row: imb 165.3 + imb_tile 46.9 + comm_imb 10.1 = 222.3 us of ep_us 1025.5.
  Erosion x;
  x.actual_s = 1025.5e-6;
  x.imbalance_s = 165.3e-6;
  x.imbalance_tiles_s = 46.9e-6;
  x.communication_imbalance_s = 10.1e-6;
  const ImbalanceVerdict v = imbalance_verdict(x);
  EXPECT_NEAR(v.costs_s, 222.3e-6, 1e-12);
  EXPECT_EQ(v.saves_s, 0.0);
  EXPECT_EQ(v.layer_s, 1025.5e-6);
  // 222.3 / 1025.5 = 0.2168: "22 %".
  EXPECT_NEAR(v.costs_s / v.layer_s, 0.2168, 1e-4);
}

TEST(Verdict, IdleExpertsAreWhatSkewSaves) {
  // Skew left experts idle: idle_saving_s = -30 us (their weights and tiles not paid), the hot experts' tiles
  // +80 us. Net imbalance_total_s = 50 us; the verdict splits it: costs 80, saves 30.
  Erosion x;
  x.actual_s = 1000e-6;
  x.idle_saving_s = -30e-6;
  x.imbalance_tiles_s = 80e-6;
  const ImbalanceVerdict v = imbalance_verdict(x);
  EXPECT_NEAR(v.saves_s, 30e-6, 1e-15);
  EXPECT_NEAR(v.costs_s, 80e-6, 1e-15);
  EXPECT_NEAR(v.costs_s - v.saves_s, imbalance_total_s(x), 1e-15);
  // Where leaving experts idle costs instead (more experts active on the slowest device), it is a cost.
  x.idle_saving_s = 5e-6;
  const ImbalanceVerdict w = imbalance_verdict(x);
  EXPECT_EQ(w.saves_s, 0.0);
  EXPECT_NEAR(w.costs_s, 85e-6, 1e-15);
}

TEST(Verdict, APlanThatFitsTheSkewCostsNothing) {
  // Under EPLB planned from past skew the straggler part can fall below 0 (the plan fits these loads better than
  // balanced loads fit theirs): the line says nothing is lost, and why, never a negative cost.
  Erosion x;
  x.actual_s = 534e-6;
  x.imbalance_s = -3.6e-6;
  x.communication_imbalance_s = 0.2e-6;
  RunResult run;
  run.experiment.model.experts = 8;
  VariantResult v;
  v.variant.label = "group_limited";
  BalanceMetrics m;
  m.imbalance = 1.0;
  v.per_batch.push_back(m);
  ModeledPlacement p;
  p.placement = "expert_parallel";
  p.cost.erosion = x;
  v.modeled.push_back(p);
  const std::string line = verdict_line(run, v);
  EXPECT_EQ(line.rfind("group_limited: imbalance costs nothing (the plan, made for past skew, fits it 3.4 us better "
                       "than balanced loads fit theirs, of 534 us)",
                       0),
            0u)
      << line;
}

TEST(Verdict, ADecodeAnswerQuotesTheRegimesValidatedError) {
  // 32 tokens a batch over 32 H100s: the decode regime with wide EP, where the kernel model is least sure;
  // the line says how sure (DecodeRegimeError, validate --published "error by regime").
  const std::string decode = "run --no-execute --set placement.kind=expert_parallel --set placement.devices=32 "
                             "--set hardware=h100-sxm --set workload.batch=32 --set workload.batches=2 "
                             "--set model.experts=64";
  const auto d = testing::run_cli(decode);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  // The answer line, unwrapped (the table wraps it at 120 columns with a two-space indent).
  std::string first = d.out.substr(0, d.out.find("\nquickstart:"));
  for (size_t at; (at = first.find("\n  ")) != std::string::npos;) first.replace(at, 3, " ");
  char want[200];
  std::snprintf(want, sizeof want, "; decode regime: the kernel model's held-out error there is %.0f %% median (%+.1f %% mean) on %d published points",
                100 * DecodeRegimeError::decode_median_abs, 100 * DecodeRegimeError::decode_mean,
                DecodeRegimeError::decode_points);
  EXPECT_NE(first.find(want), std::string::npos) << first << "\nwant: " << want;
  // 4096 tokens, or 4 devices: outside it, no such words.
  for (const std::string& set : {std::string(" --set workload.batch=4096"), std::string(" --set placement.devices=4")}) {
    const auto o = testing::run_cli(decode + set);
    ASSERT_EQ(o.exit_code, 0) << o.err;
    EXPECT_EQ(o.out.find("decode regime"), std::string::npos) << set << "\n" << o.out;
  }
}

TEST(Verdict, TheRunOpensWithItsLineFromTheHeadlineErosion) {
  const auto r = testing::run_cli("run --no-execute --format json --set workload.batches=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& x = j["strategies"][0]["modeled"]["expert_parallel"]["erosion"];
  const double costs = x["imbalance_cost_s"].get<double>(), layer = x["actual_s"].get<double>();
  const auto t = testing::run_cli("run --no-execute --set workload.batches=2");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::string first = t.out.substr(0, t.out.find('\n'));
  char want[160];
  std::snprintf(want, sizeof want, "token_choice: imbalance costs %.0f %% of the layer (%.0f of %.0f us)",
                100 * costs / layer, costs * 1e6, layer * 1e6);
  EXPECT_EQ(first.rfind(want, 0), 0u) << first << "\nwant: " << want;
}

}  // namespace
}  // namespace moesim
