// `moesim plan`: a plan worked by hand (EPLB global, 4 experts, 2 devices, 2 replicas) in each engine's format,
// read back by `placement.map: FILE` to the same per-device loads; the placement-file reader's errors; and the
// batch lines of the trace format (docs/workloads.md), which read as the token lines they stand for.
// Runs the built binary. Host only.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/placement_file.hpp"
#include "src/workload/trace_replay.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

// Loads [10, 2, 3, 1] of 4 experts over 2 devices with 2 redundant slots (S = 6, 3 a device), EPLB global
// (docs/cost-model.md "Expert placement"): the replicas go, one at a time, to the highest load per replica:
// expert 0 (10), then expert 0 again (5 > 3), so the slots weigh e0 10/3 (three of them), e1 2, e2 3, e3 1.
// Packed heaviest first, each onto the lighter device with room (ties: the lower): e0 -> d0, e0 -> d1, e0 -> d0
// (3.33 = 3.33), e2 -> d1 (3.33 < 6.67), e1 -> d1 (6.33 < 6.67, d1 now full), e3 -> d0. Device 0 holds
// [0, 0, 3] (planned 7.667), device 1 [0, 2, 1] (8.333): the map [0, 0, 3, 0, 2, 1]. Integer loads: expert 0's 10
// over its 3 slots in slot order 4, 3, 3, so the devices process 4 + 3 + 1 = 8 and 3 + 3 + 2 = 8.
const std::string kMap = "[0, 0, 3, 0, 2, 1]";

std::string write_loads(const std::string& dir) {
  const std::string path = dir + "/loads.json";
  testing::write_text(path, R"({"p": {"0": [10, 2, 3, 1]}})");
  return path;
}

TEST(Plan, EveryFormatHoldsTheHandWorkedPlan) {
  const std::string dir = testing::make_temp_dir();
  const std::string loads = write_loads(dir);
  const std::string args = "plan " + loads + " --devices 2 --replicas 2";
  const auto vllm = run_cli(args + " --format vllm");
  ASSERT_EQ(vllm.exit_code, 0) << vllm.err;
  EXPECT_EQ(vllm.out, "[\n  " + kMap + "\n]\n");
  const auto sglang = run_cli(args + " --format sglang --layers 3");
  ASSERT_EQ(sglang.exit_code, 0) << sglang.err;
  // Layers 1 and 2 have no loads: SGLang's trivial map, slot s -> s mod 4.
  EXPECT_EQ(sglang.out, "{\"physical_to_logical_map\": [\n  " + kMap + ",\n  [0, 1, 2, 3, 0, 1],\n  [0, 1, 2, 3, 0, 1]\n]}\n");
  const auto trt = run_cli(args + " --format trtllm");
  ASSERT_EQ(trt.exit_code, 0) << trt.err;
  EXPECT_NE(trt.out.find("num_slots: 6\nlayer_updates_per_iter: 0\ninitial_global_assignments:\n  0: " + kMap + "\n"),
            std::string::npos)
      << trt.out;
  const auto json = run_cli(args + " --format json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["slots"], 6);
  const nlohmann::json& layer = j["layers"][0];
  EXPECT_EQ(layer["physical_to_logical"], nlohmann::json::parse(kMap));
  EXPECT_EQ(layer["device"], nlohmann::json::parse("[0, 0, 0, 1, 1, 1]"));
  EXPECT_EQ(layer["load"], nlohmann::json::parse("[4, 3, 1, 3, 3, 2]"));
  EXPECT_NEAR(layer["device_load"][0].get<double>(), 23.0 / 3, 1e-12);
  EXPECT_NEAR(layer["device_load"][1].get<double>(), 25.0 / 3, 1e-12);
}

TEST(Plan, EachFormatReadsBackToThePlansDeviceLoads) {
  const std::string dir = testing::make_temp_dir();
  const std::string loads = write_loads(dir);
  for (const std::string format : {"json", "vllm", "sglang", "trtllm"}) {
    const std::string file = dir + "/plan." + format;
    const auto plan = run_cli("plan " + loads + " --devices 2 --replicas 2 --format " + format + " --out " + file);
    ASSERT_EQ(plan.exit_code, 0) << format << ": " << plan.err;
    // 16 assignments: 8 tokens at top-2, the profile's loads exactly.
    const auto run = run_cli("run --no-execute --records --format json --set workload.source=load_profile"
                             " --set workload.path=" + loads + " --set workload.profile_key=p --set model.experts=4"
                             " --set model.top_k=2 --set workload.batch=8 --set placement.kind=expert_parallel"
                             " --set placement.devices=2 --set placement.policy=map --set placement.map=" + file);
    ASSERT_EQ(run.exit_code, 0) << format << ": " << run.err;
    EXPECT_EQ(run.err, "") << format;
    const nlohmann::json ep =
        nlohmann::json::parse(run.out)["strategies"][0]["records"][0]["modeled"]["moe"]["expert_parallel"];
    EXPECT_EQ(ep["plan"]["expert"], nlohmann::json::parse(kMap)) << format;
    EXPECT_NEAR(ep["plan"]["device_load"][0].get<double>(), 23.0 / 3, 1e-12) << format;
    EXPECT_NEAR(ep["plan"]["device_load"][1].get<double>(), 25.0 / 3, 1e-12) << format;
    EXPECT_EQ(ep["device_tokens"], nlohmann::json::parse("[8, 8]")) << format << ": " << ep.dump();
  }
}

TEST(Plan, BadInputsExitTwoNamingWhatWasExpected) {
  const std::string dir = testing::make_temp_dir();
  const std::string loads = write_loads(dir);
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {"plan " + loads + " --devices 0", "--devices"},
      {"plan " + loads + " --devices 4 --replicas 1", "placement"},
      {"plan " + loads + " --devices 2 --format onnx", "--format"},
      {"plan " + loads + " --devices 2 --policy round_robin", "--policy"},
      {"plan " + dir + "/none.json --devices 2", "cannot open"},
      {"plan --devices 2", "expected a file"},
      // The user's own flag, not the --set plan makes of it.
      {"plan " + loads + " --devices 3", "moesim plan: --devices 3: placement.devices: expected a divisor"},
  };
  for (const Case& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
    EXPECT_EQ(r.err.find("--set"), std::string::npos) << c.args << " typed no --set: " << r.err;
  }
  // A map file that misses an expert, or whose slots the devices do not divide.
  testing::write_text(dir + "/missing.json", "[[0, 0, 1, 1]]");
  const std::string run = "run --no-execute --set model.experts=4 --set router.groups=1 --set router.topk_groups=1"
                          " --set placement.kind=expert_parallel --set placement.policy=map --set placement.devices=";
  auto r = run_cli(run + "2 --set placement.map=" + dir + "/missing.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no slot for expert 2"), std::string::npos) << r.err;
  testing::write_text(dir + "/six.json", "[[0, 1, 2, 3, 0, 1]]");
  r = run_cli(run + "4 --set placement.map=" + dir + "/six.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("a divisor of the placement file's 6 slots"), std::string::npos) << r.err;
  r = run_cli(run + "2 --set placement.map=" + dir + "/six.json#3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("expected layer 3"), std::string::npos) << r.err;
}

TEST(PlacementFile, ReadsEveryFormatAndRefusesMalformedOnes) {
  PlacementFile f = parse_placement_file("num_slots: 3\ninitial_global_assignments:\n  5: [1, 0, 1]\n  3: [0, 1, 0]\n", "t");
  EXPECT_EQ(f.format, PlacementFileFormat::trtllm);
  EXPECT_EQ(f.layers, (std::vector<int>{3, 5}));
  EXPECT_EQ(placement_file_layer(f, 5, "t"), (std::vector<int32_t>{1, 0, 1}));
  f = parse_placement_file("[0, 1, 1]", "t");
  EXPECT_EQ(f.format, PlacementFileFormat::vllm);
  EXPECT_EQ(f.slot_expert.size(), 1u);
  f = parse_placement_file(R"({"physical_to_logical_map": [[0, 1], [1, 0]]})", "t");
  EXPECT_EQ(f.format, PlacementFileFormat::sglang);
  EXPECT_EQ(placement_file_layer(f, -1, "t"), (std::vector<int32_t>{0, 1}));
  for (const std::string bad : {"", "{}", "[[0, 1], [0]]", "[[0, -1]]", "[[]]", "{\"physical_to_logical_map\": 3}",
                                "num_slots: 4\ninitial_global_assignments: {0: [0, 1]}", "[[0, x]]", "[",
                                "initial_global_assignments: {a: [0]}", "{\"moesim_plan\": 1, \"layers\": [{}]}"}) {
    EXPECT_THROW(parse_placement_file(bad, "t"), ConfigError) << bad;
  }
}

TEST(TraceBatchLines, ReadAsTheTokenLinesTheyStandFor) {
  const std::string tokens =
      "{\"step\": 0, \"layer\": 1, \"token\": 0, \"experts\": [2, 0], \"weights\": [0.75, 0.25], \"logits\": [1, 0, 2]}\n"
      "{\"step\": 0, \"layer\": 1, \"token\": 1, \"experts\": [1, 2], \"weights\": [0.5, 0.5], \"kept\": [1, 0], "
      "\"logits\": [0, 3, 1], \"token_id\": 7}\n";
  const std::string batch =
      "{\"step\": 0, \"layer\": 1, \"experts\": [[2, 0], [1, 2]], \"weights\": [[0.75, 0.25], [0.5, 0.5]], "
      "\"kept\": [[1, 1], [1, 0]], \"logits\": [[1, 0, 2], [0, 3, 1]], \"token_ids\": [0, 7]}\n";
  const Trace a = parse_trace(tokens, "a", 3);
  const Trace b = parse_trace(batch, "b", 3);
  ASSERT_EQ(a.batches.size(), 1u);
  ASSERT_EQ(b.batches.size(), 1u);
  EXPECT_EQ(a.batches[0].expert, b.batches[0].expert);
  EXPECT_EQ(a.batches[0].weight, b.batches[0].weight);
  EXPECT_EQ(a.batches[0].kept, b.batches[0].kept);
  EXPECT_EQ(a.batches[0].logits, b.batches[0].logits);
  EXPECT_EQ(b.batches[0].token_ids, (std::vector<int64_t>{0, 7}));
  for (const std::string bad :
       {"{\"step\": 0, \"layer\": 0, \"experts\": [[0, 1]], \"weights\": [[1, 0], [1, 0]]}",
        "{\"step\": 0, \"layer\": 0, \"experts\": [[0, 1]], \"weights\": [[1]]}",
        "{\"step\": 0, \"layer\": 0, \"experts\": [[0, 1]], \"weights\": [[1, 0]], \"token_id\": 3}",
        "{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [0, 1], \"weights\": [1, 0], \"token_ids\": [3]}",
        "{\"step\": 0, \"layer\": 0, \"experts\": [[0, 1], 2], \"weights\": [[1, 0], [1]]}",
        "{\"step\": 0, \"layer\": 0, \"experts\": [[0, 0]], \"weights\": [[1, 0]]}",
        "{\"step\": 0, \"layer\": 0, \"experts\": [[0, 1]], \"weights\": [[1, 0]], \"token_ids\": [-1]}"}) {
    try {
      parse_trace(bad, "t", 3);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("t:1: ", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace moesim
