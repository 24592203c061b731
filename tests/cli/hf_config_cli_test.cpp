// End-to-end tests of model.hf_config and model.moe_layers through the moesim binary: `moesim config` prints
// the resolved model (and loads back to the same text), bad config.json files exit 2 with one line naming the
// file and the JSON key, and run/sweep reports say how many MoE layers their whole-model times cover.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

std::string hf_path(const std::string& model) {
  return std::string(MOESIM_TEST_DATA) + "/hf/" + model + "/config.json";
}

TEST(HfConfigCli, ConfigPrintsTheResolvedModelAndLoadsBackTheSame) {
  const auto r = run_cli("config --set model.hf_config=" + hf_path("deepseek-v3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"hf_config: " MOESIM_TEST_DATA "/hf/deepseek-v3/config.json", "experts: 256",
                           "moe_layers: 58", "layers: 61", "shared_experts: 1", "dtype: fp8", "gating: aux_free_bias",
                           "score: sigmoid", "routed_scaling_factor: 2.5"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/effective.yaml", r.out);
  const auto back = run_cli("config " + dir + "/effective.yaml");
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, r.out);
}

TEST(HfConfigCli, BadConfigJsonExitsTwoNamingFileAndKey) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/config.json", R"({"model_type": "mixtral", "hidden_size": 64})");
  auto r = run_cli("config --set model.hf_config=" + dir + "/config.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(dir + "/config.json: num_hidden_layers: expected an integer for model.layers, got none"),
            std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  testing::write_text(dir + "/config.json", R"({"model_type": "gemma3"})");
  r = run_cli("run --set model.hf_config=" + dir + "/config.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(dir + "/config.json: model_type: expected one of mixtral, qwen2_moe"), std::string::npos) << r.err;

  r = run_cli("config --set model.hf_config=" + dir + "/missing.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.hf_config: " + dir + "/missing.json: cannot open"), std::string::npos) << r.err;

  r = run_cli("config --set model.layers=8 --set model.moe_layers=9");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.moe_layers: expected an integer in [1, 8] (model.layers), got 9"), std::string::npos) << r.err;
}

TEST(HfConfigCli, SweepSaysHowManyMoeLayersItCovers) {
  const auto r = run_cli("sweep --set model.hf_config=" + hf_path("deepseek-v3") +
                         " --set execute.enabled=false --vary workload.batch=64,128");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cover the 58 MoE layers of model.layers = 61"), std::string::npos) << r.out;
  const auto j = run_cli("sweep --format json --set model.hf_config=" + hf_path("deepseek-v3") +
                         " --set execute.enabled=false --vary workload.batch=64");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["rows"][0]["moe_layers"], 58);
  EXPECT_EQ(doc["rows"][0]["layers"], 61);
}

TEST(HfConfigCli, RunJsonRecordsTheMoeLayers) {
  const auto r = run_cli("run --format json --set model.hf_config=" + hf_path("deepseek-v3") +
                         " --set execute.enabled=false --set workload.batch=64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["model"]["layers"], 61);
  EXPECT_EQ(doc["model"]["moe_layers"], 58);
  EXPECT_EQ(doc["experiment"]["config"]["model"]["moe_layers"], 58);
}

}  // namespace
}  // namespace moesim
