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
                           "score: sigmoid", "routed_scaling_factor: 2.5", "attention: mla", "q_lora_rank: 1536",
                           "kv_lora_rank: 512", "qk_rope_head_dim: 64", "v_head_dim: 128", "mtp_layers: 1"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/effective.yaml", r.out);
  const auto back = run_cli("config " + dir + "/effective.yaml");
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, r.out);
}

TEST(HfConfigCli, TheBuiltInPlacementTakesTheModelsExpertCount) {
  // Qwen1.5-MoE's 60 experts split contiguously over the built-in experiment's 8 devices (7 or 8 each); under
  // EPLB's packing, which needs the devices to divide the slots, they do not: it takes 6 (the most up to 8 that
  // divide 60) and says so; a placement the user gives is checked as given, its error naming where.
  const auto plain = run_cli("run --no-execute --format json --set workload.batch=256 --set workload.batches=1 "
                             "--set model.hf_config=" + hf_path("qwen1.5-moe-a2.7b"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["experiment"]["config"]["placement"]["devices"], 8);
  const auto r = run_cli("run --no-execute --format json --set workload.batch=256 --set workload.batches=1 "
                         "--set placement.policy=global --set model.hf_config=" + hf_path("qwen1.5-moe-a2.7b"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("its 60 experts do not split over the built-in experiment's 8 devices: placement.devices 6 "
                       "(set placement.devices)"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["experiment"]["config"]["placement"]["devices"], 6);
  const auto given = run_cli("run --no-execute --set placement.policy=global --set placement.devices=8 "
                             "--set model.hf_config=" + hf_path("qwen1.5-moe-a2.7b"));
  EXPECT_EQ(given.exit_code, 2);
  EXPECT_NE(given.err.find("--set placement.devices=8: placement.devices: expected a divisor of model.experts + "
                           "placement.replicas (60)"), std::string::npos) << given.err;
  // A built-in key's error says where the built-in experiment has it, not "<built-in>:LINE".
  const auto built_in = run_cli("run --no-execute --set placement.policy=global --set model.experts=60");
  EXPECT_EQ(built_in.exit_code, 2);
  EXPECT_EQ(built_in.err.find("<built-in>:"), std::string::npos) << built_in.err;
  EXPECT_NE(built_in.err.find("configs/quickstart.yaml:"), std::string::npos) << built_in.err;
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
