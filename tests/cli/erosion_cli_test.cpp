// The erosion block end to end (docs/cost-model.md "Erosion"): in every strategy's JSON of the default
// compare its parts add up and match the table's split; expert choice's unrouted tokens are owed work;
// a real recorded Mixtral load on 8 devices keeps its imbalance part across a tile boundary (4096 and
// 4100 tokens). Runs the built binary. Host only.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "src/report/text_format.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

nlohmann::json run_json(const std::string& args) {
  const auto r = run_cli(args + " --format json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(ErosionCli, EveryStrategysPartsAddUp) {
  const nlohmann::json j = run_json("compare --gating all --set execute.enabled=false");
  ASSERT_EQ(j["strategies"].size(), 9u);
  for (const auto& s : j["strategies"]) {
    for (const auto& [placement, p] : s["modeled"].items()) {
      SCOPED_TRACE(s["strategy"].get<std::string>() + " " + placement);
      const nlohmann::json& x = p["erosion"];
      double sum = x["reference_s"].get<double>();
      for (const auto& [part, v] : x["parts"].items()) sum += v.get<double>();
      EXPECT_NEAR(sum, x["actual_s"].get<double>(), 1e-12 * x["actual_s"].get<double>());
      EXPECT_EQ(x["actual_s"], p["time_s"]);
      EXPECT_GE(x["dropped_work_s"].get<double>(), 0.0);
      const double ref = x["reference_s"].get<double>(), imb = x["parts"]["imbalance_s"].get<double>();
      const double tiles = x["parts"]["imbalance_tiles_s"].get<double>(), actual = x["actual_s"].get<double>();
      const double comm = x["parts"]["communication_imbalance_s"].get<double>();
      const double idle = x["parts"]["idle_saving_s"].get<double>();
      EXPECT_NEAR(p["roofline_efficiency"].get<double>(), ref / p["erosion_exact"]["loads_s"].get<double>(), 1e-15);
      EXPECT_NEAR(p["batching_efficiency"].get<double>(), (actual - idle - imb - tiles - comm) / actual, 1e-15);
      EXPECT_NEAR(x["imbalance_cost_s"].get<double>(), imb + tiles + comm, 1e-18);
      EXPECT_NEAR(x["imbalance_total_s"].get<double>(), idle + imb + tiles + comm, 1e-18);
      EXPECT_NEAR(p["imbalance_cost"].get<double>(), (imb + tiles + comm) / actual, 1e-15);
      EXPECT_NEAR(p["idle_saving"].get<double>(), -idle / actual, 1e-15);
      // The exact batch's parts differ from the headline's by the tile phase alone.
      const nlohmann::json& ex = p["erosion_exact"];
      EXPECT_NEAR(ex["imbalance_total_s"].get<double>(),
                  x["imbalance_total_s"].get<double>() + x["parts"]["tile_phase_s"].get<double>(), 1e-12 * actual);
      if (s["strategy"] == "balanced") {
        for (const char* part : {"idle_saving_s", "imbalance_s", "imbalance_tiles_s", "communication_imbalance_s",
                                 "tile_phase_s"}) {
          EXPECT_EQ(x["parts"][part].get<double>(), 0.0) << part;
          EXPECT_EQ(ex["parts"][part].get<double>(), 0.0) << part;
        }
      }
    }
  }
}

TEST(ErosionCli, ExpertChoiceOwesItsUnroutedTokens) {
  // Capacity factor 1: every expert takes exactly N k / E tokens, and some tokens are chosen by none.
  const nlohmann::json j =
      run_json("compare --gating expert_choice --set execute.enabled=false --set router.capacity_factor=1.0");
  const nlohmann::json& s = j["strategies"][0];
  const double unrouted = s["metrics"]["tokens_unrouted"].get<double>();
  ASSERT_GT(unrouted, 0) << "expert choice at capacity factor 1 leaves tokens unrouted";
  EXPECT_EQ(s["metrics"]["dropped"].get<double>(), 0.0);
  const nlohmann::json& x = s["modeled"]["single"]["erosion"];
  const int k = j["experiment"]["config"]["model"]["top_k"].get<int>();
  const double n = x["assignments_served"].get<double>() + x["assignments_undelivered"].get<double>();
  // The modeled layer is the mean batch's, the count the run's sum over its batches.
  const double batches = j["workload"]["batches"].get<double>();
  EXPECT_DOUBLE_EQ(x["assignments_undelivered"].get<double>(), k * unrouted / batches);
  EXPECT_DOUBLE_EQ(n, j["workload"]["num_tokens"].get<double>() * k);
  EXPECT_GT(x["dropped_work_s"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(x["time_per_served_assignment_s"].get<double>(),
                   x["actual_s"].get<double>() / x["assignments_served"].get<double>());
}

TEST(ErosionCli, TableShowsTheSplit) {
  const auto r = run_cli("compare --gating token_choice,balanced --set execute.enabled=false "
                         "--set placement.kind=expert_parallel --set placement.devices=4 --wide");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* h : {"ep_us", "devices", "ref_us", "save_us", "imb_us", "imb_tile_us", "phase_us", "tile_us", "pad_us",
                        "comm_us", "drop_us", "imb_cost", "idle_save", "batch_eff"})
    EXPECT_NE(r.out.find(h), std::string::npos) << h;
  EXPECT_NE(r.out.find("ep_us = ref_us + save_us + imb_us + imb_tile_us + phase_us + tile_us + pad_us + comm_us + "
                       "comm_imb_us"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" on 4 x h100-sxm ("), std::string::npos) << r.out;
}

TEST(ErosionCli, RealLoadsOnEightDevicesKeepImbalanceAcrossATileBoundary) {
  const std::string base = "run " MOESIM_SOURCE_DIR "/configs/mixtral-profile.yaml --set placement.kind=expert_parallel "
                           "--set placement.devices=8 --set workload.batch=";
  const nlohmann::json a = run_json(base + "4096"), b = run_json(base + "4100");
  const nlohmann::json& pa = a["strategies"][0]["modeled"]["expert_parallel"];
  const nlohmann::json& pb = b["strategies"][0]["modeled"]["expert_parallel"];
  const double ia = pa["erosion"]["parts"]["imbalance_s"].get<double>(), ib = pb["erosion"]["parts"]["imbalance_s"].get<double>();
  ASSERT_GT(ia, 0);
  EXPECT_LT(std::fabs(ib / ia - 1), 0.03);
  EXPECT_LT(std::fabs(pb["roofline_efficiency"].get<double>() / pa["roofline_efficiency"].get<double>() - 1), 0.03);
  // On the headline the skew costs at both sizes; where the busiest device crosses a tile boundary the
  // balanced counterfactual does not, that step is imbalance too (imbalance_tiles_s).
  EXPECT_LT(pa["batching_efficiency"].get<double>(), 1.0);
  EXPECT_LT(pb["batching_efficiency"].get<double>(), 1.0);
}

}  // namespace
}  // namespace moesim
