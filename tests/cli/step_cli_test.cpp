// Tests `moesim step`: its JSON keys, the erosion's parts adding up to the step's distance from its ideal, MTP's
// tokens a step in TPOT and tokens/s, balanced routing costing no skew, and bad options exiting 2 with one line.
// Host only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::CliResult;
using testing::run_cli;

const std::string kDeepSeek = std::string("step ") + MOESIM_SOURCE_DIR +
                              "/configs/deepseek-v3.yaml --set placement.devices=16 --requests-per-gpu 32 --kv-len 1024";

TEST(StepCli, JsonKeysAndTheErosionAddUp) {
  const CliResult r = run_cli(kDeepSeek + " --set placement.overlap=two_batch --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* k : {"step_ms", "tpot_ms", "output_tokens_per_s_per_gpu", "tokens_per_s_per_node",
                        "attention_balance_ratio", "balancedness", "moe_layer", "balanced_moe_layer", "erosion"})
    EXPECT_TRUE(j.contains(k)) << k;
  const nlohmann::json& x = j["erosion"];
  const double parts = x["attention_imbalance_ms"].get<double>() + x["skew_compute_ms"].get<double>() +
                       x["skew_communication_ms"].get<double>() + x["overlap_ms"].get<double>();
  EXPECT_NEAR(parts, x["actual_ms"].get<double>() - x["ideal_ms"].get<double>(), 1e-9);
  EXPECT_NEAR(x["actual_ms"].get<double>(), j["step_ms"].get<double>(), 1e-9);
  // 32 requests a GPU, one token each a step.
  EXPECT_NEAR(j["output_tokens_per_s_per_gpu"].get<double>(), 32 / (j["step_ms"].get<double>() / 1e3), 1e-6);
  const nlohmann::json& l = j["moe_layer"];
  EXPECT_NEAR(l["layer_ms"].get<double>(),
              l["attention_ms"].get<double>() + l["dense_ms"].get<double>() + l["experts_ms"].get<double>() +
                  l["other_ms"].get<double>() + l["compute_wait_ms"].get<double>(),
              1e-9);
}

TEST(StepCli, MtpCreditsAcceptedTokensAndBalancedRoutingHasNoSkew) {
  const CliResult r = run_cli(kDeepSeek + " --mtp-draft 1 --mtp-accept 0.6 --routing balanced --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["tokens_per_request_step"].get<double>(), 1.6);
  EXPECT_NEAR(j["tpot_ms"].get<double>(), j["step_ms"].get<double>() / 1.6, 1e-9);
  EXPECT_GT(j["mtp_ms"].get<double>(), 0);
  EXPECT_NEAR(j["erosion"]["skew_compute_ms"].get<double>(), 0, 1e-9);
  EXPECT_NEAR(j["erosion"]["skew_communication_ms"].get<double>(), 0, 1e-9);
}

TEST(StepCli, VaryRoutesOnceAndItsLargestPointIsTheSingleRun) {
  const CliResult v = run_cli(kDeepSeek + " --vary placement.devices=8,16 --vary placement.overlap=none,two_batch "
                                          "--format json");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  const nlohmann::json j = nlohmann::json::parse(v.out);
  ASSERT_EQ(j["points"].size(), 4u);
  // The largest point's loads are the routing itself: the same step as one run at that point.
  const CliResult one = run_cli(kDeepSeek + " --set placement.overlap=two_batch --format json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const nlohmann::json o = nlohmann::json::parse(one.out);
  EXPECT_EQ(j["points"][3]["settings"], nlohmann::json::array({"placement.devices=16", "placement.overlap=two_batch"}));
  EXPECT_DOUBLE_EQ(j["points"][3]["step_ms"].get<double>(), o["step_ms"].get<double>());
  // A key that changes the routing is refused: route once, cost many holds only for placement and hardware.
  const CliResult bad = run_cli(kDeepSeek + " --vary router.top_k=2,4");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--vary router.top_k"), std::string::npos) << bad.err;
  const CliResult plan = run_cli(kDeepSeek + " --vary placement.plan_from=past,oracle");
  EXPECT_EQ(plan.exit_code, 2);
  EXPECT_NE(plan.err.find("--vary placement.plan_from: expected a key that leaves"), std::string::npos) << plan.err;
}

TEST(StepCli, HtmlDrawsTheLayerActualBesideBalancedAndTheErosion) {
  const CliResult r = run_cli(kDeepSeek + " --format html");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(r.out.find("actual beside balanced"), std::string::npos);
  EXPECT_NE(r.out.find("<title>experts: "), std::string::npos);
  EXPECT_NE(r.out.find("erosion by cause"), std::string::npos);
  EXPECT_EQ(run_cli(kDeepSeek + " --format html --vary placement.devices=8,16").exit_code, 2);
}

TEST(StepCli, ALoadProfileGivesEachRecordedLayerAsADraw) {
  const CliResult r = run_cli(std::string("step ") + MOESIM_SOURCE_DIR +
                              "/configs/olmoe-profile.yaml --set placement.kind=expert_parallel --set placement.devices=8 "
                              "--requests-per-gpu 32 --kv-len 1024 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["routing_note"].get<std::string>().find("recorded loads"), std::string::npos);
  EXPECT_LT(j["balancedness"].get<double>(), 0.9);  // OLMoE's recorded skew over 8 GPUs
  EXPECT_GT(j["erosion"]["skew_compute_ms"].get<double>() + j["erosion"]["skew_communication_ms"].get<double>(), 0);
}

TEST(StepCli, ATraceGivesEachRecordedBatchAsADraw) {
  const std::string dir = testing::make_temp_dir();
  const CliResult dump = run_cli("run --no-execute --set workload.batches=3 --dump-routing " + dir + "/r.trace");
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  const std::string step = "step --set workload.source=trace --set workload.path=" + dir +
                           "/r.trace --set placement.kind=expert_parallel --set placement.devices=4 "
                           "--requests-per-gpu 16 --format json";
  const CliResult r = run_cli(step);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["routing_note"].get<std::string>().find("recorded routing"), std::string::npos);
  EXPECT_GT(j["step_ms"].get<double>(), 0);
  // The trace's routing, not the balanced loads: the same step with --routing balanced differs.
  const CliResult b = run_cli(step + " --routing balanced");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(nlohmann::json::parse(b.out)["balancedness"].get<double>(), j["balancedness"].get<double>());
}

TEST(StepCli, BadOptionsExitTwoWithOneLine) {
  for (const char* bad : {" --phase verify", " --routing zipf", " --tp 3", " --mtp-accept 2", " --phase prefill",
                          " --requests-per-gpu 1048576", " --lengths uniform:9:3", " --tp 0",
                          " --set placement.tensor_parallel=2", " --set placement.attention_tp=3"}) {
    const CliResult r = run_cli(kDeepSeek + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace moesim
