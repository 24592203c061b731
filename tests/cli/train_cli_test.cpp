// Tests `moesim train` through the binary: every format, the comparison's rows, the step's parts adding up to its
// time and the erosion's parts to its difference from forced balance, the same bytes twice, --out, and bad input
// (one line naming the key, exit 2) and keys train does not read (named on stderr). Host only.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using nlohmann::json;
using testing::run_cli;

// The built-in experiment (a Mixtral-8x7B layer, 8 experts, top-2) trained on 8 GPUs, 2 micro-batches.
const std::string kSmall = " --set train.global_batch=16 --set train.routed_micro_batches=2";

TEST(TrainCli, TableNamesTheStepAndItsErosion) {
  const auto r = run_cli("train" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"moesim train: ", "tokens/s/GPU", "model TFLOP/s/GPU", "MFU", "experts", "ep_a2a",
                        "erosion against forced balance", "expert_compute", "rank overload"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(TrainCli, JsonPartsAddUp) {
  const auto r = run_cli("train --format json" + kSmall + " --set train.pp=2 --set train.gpus=16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["command"], "train");
  EXPECT_EQ(j["layout"]["micro_batches"], 2);  // 16 sequences over DP 8
  ASSERT_EQ(j["variants"].size(), 1u);
  const json& v = j["variants"][0];
  double exposed = 0;
  for (const auto& [name, part] : v["parts"].items()) exposed += part["exposed_s"].get<double>();
  EXPECT_NEAR(exposed, v["step_s"].get<double>(), 1e-9 * v["step_s"].get<double>());
  const json& x = v["erosion"];
  double parts = 0;
  for (const auto& [name, s] : x["parts"].items()) parts += s.get<double>();
  EXPECT_NEAR(parts, x["actual_s"].get<double>() - x["reference_s"].get<double>(), 1e-9);
  EXPECT_NEAR(x["actual_s"].get<double>(), v["step_s"].get<double>(), 1e-12);
  // tokens/s per GPU: 16 sequences x 4096 tokens over the step and 16 GPUs.
  EXPECT_NEAR(v["tokens_per_s_per_gpu"].get<double>(), 16 * 4096 / (v["step_s"].get<double>() * 16), 1e-6);
}

TEST(TrainCli, TheSameBytesTwice) {
  const auto a = run_cli("train --format json" + kSmall), b = run_cli("train --format json" + kSmall);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(testing::without_provenance(a.out), testing::without_provenance(b.out));
}

TEST(TrainCli, CompareRowsSideBySide) {
  const auto r = run_cli("train --compare --format json" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["variants"].size(), 5u);
  EXPECT_EQ(j["variants"][0]["label"], "forced balance");
  EXPECT_EQ(j["variants"][1]["label"], "router, dropless");
  EXPECT_EQ(j["variants"][2]["label"], "router, capacity 1");
  EXPECT_EQ(j["variants"][4]["label"], "router, capacity 2");
  // Forced balance is the reference itself: it erodes nothing.
  const json& f = j["variants"][0]["erosion"];
  EXPECT_EQ(f["actual_s"], f["reference_s"]);
  // The token-dropping rows drop (capacity 1 more than 2) and pad their experts to capacity.
  EXPECT_GT(j["variants"][2]["routing_stats"]["drop_rate"].get<double>(),
            j["variants"][4]["routing_stats"]["drop_rate"].get<double>());
  EXPECT_EQ(j["variants"][3]["layout"], "capacity");
  EXPECT_LT(j["variants"][2]["erosion"]["parts"]["drops_s"].get<double>(), 0);
  EXPECT_GT(j["variants"][4]["erosion"]["parts"]["padding_s"].get<double>(), 0);
  const auto t = run_cli("train --compare --capacity-factors 1.5" + kSmall);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("router, capacity 1.5"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("router, capacity 2"), std::string::npos) << t.out;
}

TEST(TrainCli, EveryFormat) {
  const auto csv = run_cli("train --compare --format csv" + kSmall);
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("variant,routing,capacity,step_s", 0), 0u) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 6);
  const auto md = run_cli("train --format markdown" + kSmall);
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("| part | stream | busy_s | exposed_s | share |"), std::string::npos) << md.out;
  const auto html = run_cli("train --compare --format html" + kSmall);
  ASSERT_EQ(html.exit_code, 0) << html.err;
  EXPECT_EQ(html.out.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.out.find("<svg"), std::string::npos);
  EXPECT_NE(html.out.find("erosion against forced balance"), std::string::npos);
  const std::string dir = testing::make_temp_dir();
  const auto out = run_cli("train --format json --out " + dir + "/t.json" + kSmall);
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_TRUE(out.out.empty());
  EXPECT_NE(testing::read_text(dir + "/t.json").find("\"command\": \"train\""), std::string::npos);
}

TEST(TrainCli, BadInputIsOneLineAndExit2) {
  struct Case {
    std::string args, says;
  };
  for (const Case& c : std::vector<Case>{
           {"--set train.ep=3", "train.ep: expected a divisor of model.experts (8), got 3"},
           {"--set train.routing=balanced", "train.routing: expected model, forced_balance"},
           {"--set train.precision=mxfp8", "train.precision: expected bf16, fp8 or fp8_blockwise on h100-sxm"},
           {"--set workload.source=decoder", "workload.source: expected synthetic, load_profile or load_distribution"},
           {"--capacity-factors 1", "--capacity-factors: expected with --compare only"},
           {"--compare --capacity-factors 1,x", "--capacity-factors: expected a comma list"},
           {"--format yaml", "--format"},
           {"--set train.tp=3", "train.gpus: expected a multiple of train.tp x train.pp x train.cp = 3, got 8"}}) {
    const auto r = run_cli("train" + kSmall + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args;
  }
}

TEST(TrainCli, KeysTrainDoesNotReadAreNamed) {
  const auto r = run_cli("train" + kSmall + " --set placement.devices=4 --set workload.batch=64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("moesim: placement.devices has no effect in moesim train"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("moesim: workload.batch has no effect in moesim train"), std::string::npos) << r.err;
  const auto strict = run_cli("train --strict" + kSmall + " --set placement.devices=4");
  EXPECT_EQ(strict.exit_code, 2) << strict.err;
  // --compare sets the capacity factor of its rows: one given is named.
  const auto cmp = run_cli("train --compare" + kSmall + " --set router.capacity_factor=1.5");
  EXPECT_NE(cmp.err.find("router.capacity_factor has no effect in moesim train --compare"), std::string::npos) << cmp.err;
  // A training key in a serving run is named too.
  const auto run = run_cli("run --no-execute --set train.tp=2");
  EXPECT_NE(run.err.find("train.tp has no effect outside moesim train"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace moesim
