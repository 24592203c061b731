// Tests src/sweep/validate and `moesim validate`: every point carries a prediction from the model at the
// executed size and a measurement of the executed expert phase, the error is (predicted - measured) /
// measured, the summary is the median (and mean) of the absolute errors, and the error on this machine
// with the shipped cpu-local profile is computed (its size is reported, not asserted: timings are
// machine-dependent). Host only; small executed sizes so that the suite stays fast.
#include "src/sweep/validate.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "tests/support/run_cli.hpp"
#include "src/report/validate_report.hpp"

namespace moesim {
namespace {

// 8 experts, top-2, executed at 64 x 128 with one timed repeat.
Experiment small_experiment() {
  return default_experiment({"execute.hidden=64", "execute.ffn=128", "execute.repeats=1", "router.capacity_factor=0"});
}

// An inline host profile: 50 GFLOP/s fp32, 10 GB/s, both at 50 % efficiency, 2 cores, 1 us launches.
HardwareRef toy_host() {
  HardwareRef ref;
  ref.name.clear();
  ref.inline_yaml =
      "name: toy-host\npeak_tflops: {fp32: 0.05}\nmemory_bandwidth_gbs: 10\nsm_count: 2\ntile_m: 1\ntile_n: 16\n"
      "launch_overhead_us: 1\nefficiency_flops: 0.5\nefficiency_bw: 0.5\nl2_mib: 32\n";
  return ref;
}

TEST(Validate, PredictsTheExecutedShapeAndMeasuresEachPoint) {
  const Experiment e = small_experiment();
  size_t calls = 0;
  const ValidateResult r = run_validation(e, toy_host(), {"1", "16", "256"}, RunOptions{}, [&](size_t, size_t) { ++calls; });
  ASSERT_EQ(r.points.size(), 3u);
  EXPECT_EQ(calls, 3u);
  EXPECT_EQ(r.hardware, "toy-host");
  EXPECT_EQ(r.hidden, 64);
  EXPECT_EQ(r.ffn, 128);
  EXPECT_DOUBLE_EQ(r.weight_bytes, 8 * 3.0 * 64 * 128 * 4);
  std::vector<double> ape;
  for (const ValidatePoint& p : r.points) {
    SCOPED_TRACE(p.num_tokens);
    EXPECT_GT(p.measured_s, 0.0);
    EXPECT_GT(p.predicted_s, 0.0);
    EXPECT_EQ(p.rows, p.num_tokens * 2);  // dropless top-2: every assignment is one row
    EXPECT_GE(p.active_experts, 1);
    EXPECT_LE(p.active_experts, 8);
    EXPECT_DOUBLE_EQ(p.error, (p.predicted_s - p.measured_s) / p.measured_s);
    ape.push_back(std::fabs(p.error));
  }
  // One token, top-2: two experts' fp32 weights at half of 10 GB/s, plus one row each ((3 x 64 + 6 x 128)
  // fp32 activations), plus the layer's six launches (a CPU profile: no K-step floor).
  const ValidatePoint& one = r.points.front();
  EXPECT_EQ(one.active_experts, 2);
  const double w = 3.0 * 64 * 128 * 4, act = (3.0 * 64 + 6.0 * 128) * 4;
  EXPECT_NEAR(one.predicted_s, (2 * w + 2 * act) / 5e9 + 6e-6, 1e-15);
  EXPECT_FALSE(one.compute_bound);
  EXPECT_TRUE(r.points.back().compute_bound);  // 512 rows x 2 x 3 x 64 x 128 FLOPs at 25 GFLOP/s
  std::sort(ape.begin(), ape.end());
  EXPECT_DOUBLE_EQ(r.median_ape, ape[1]);
  EXPECT_DOUBLE_EQ(r.mean_ape, (ape[0] + ape[1] + ape[2]) / 3);
  // The weights (768 KiB) fit the toy's 32 MiB cache: the table says the memory points read the cache.
  const std::string table = format_validation(r, ReportFormat::table);
  EXPECT_NE(table.find("median absolute percentage error"), std::string::npos);
  EXPECT_NE(table.find("fit in the"), std::string::npos);
  const auto j = nlohmann::json::parse(format_validation(r, ReportFormat::json));
  EXPECT_EQ(j["points"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["median_ape"].get<double>(), r.median_ape);
  const std::string csv = format_validation(r, ReportFormat::csv);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
}

TEST(Validate, BadBatchIsAConfigErrorBeforeRunning) {
  const Experiment e = small_experiment();
  size_t calls = 0;
  EXPECT_THROW(run_validation(e, toy_host(), {"4", "0x"}, RunOptions{}, [&](size_t, size_t) { ++calls; }), ConfigError);
  EXPECT_EQ(calls, 0u);
  EXPECT_THROW(run_validation(e, toy_host(), {}, RunOptions{}), InputError);
}

// The error of the shipped cpu-local profile on this machine is computed and printed (its value
// depends on the machine and its load; docs/cost-model.md reports the measured figure).
TEST(ValidateCli, ShippedCpuLocalPrintsAMedianError) {
  const auto r = testing::run_cli(
      "validate --hardware cpu-local --batches 1..256*4 --set execute.hidden=128 --set execute.ffn=256 "
      "--set execute.repeats=1 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["hardware"]["name"], "cpu-local");
  EXPECT_EQ(j["experiment"]["config"]["hardware"], "cpu-local");  // the profile validated, not the file's
  ASSERT_EQ(j["points"].size(), 5u);  // 1, 4, 16, 64, 256
  for (const auto& p : j["points"]) {
    EXPECT_GT(p["measured_s"].get<double>(), 0.0);
    EXPECT_GT(p["predicted_s"].get<double>(), 0.0);
  }
  const double mdape = j["median_ape"].get<double>();
  EXPECT_TRUE(std::isfinite(mdape));
  EXPECT_GE(mdape, 0.0);
  std::cout << "validate on this machine (cpu-local, 128 x 256, batch 1..256): median APE " << mdape * 100 << "%\n";
  const auto t = testing::run_cli("validate --hardware cpu-local --batches 2,8 --set execute.hidden=32 "
                                  "--set execute.ffn=64 --set execute.repeats=1");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("median absolute percentage error"), std::string::npos) << t.out;
}

TEST(ValidateCli, SetHardwareActsAsHardware) {
  // --set hardware=NAME validates against that profile, as --hardware does (it was accepted and ignored).
  const std::string small = " --batches 2 --set execute.hidden=32 --set execute.ffn=64 --set execute.repeats=1 --format json";
  const auto set = testing::run_cli("validate --set hardware=t4" + small);
  ASSERT_EQ(set.exit_code, 0) << set.err;
  const auto flag = testing::run_cli("validate --hardware t4" + small);
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  const auto js = nlohmann::json::parse(set.out), jf = nlohmann::json::parse(flag.out);
  EXPECT_EQ(js["hardware"]["name"], "t4");
  EXPECT_EQ(js["hardware"]["digest"], jf["hardware"]["digest"]);
  EXPECT_EQ(js["points"][0]["predicted_s"], jf["points"][0]["predicted_s"]);
  const auto host = testing::run_cli("validate" + small);
  ASSERT_EQ(host.exit_code, 0) << host.err;
  EXPECT_NE(nlohmann::json::parse(host.out)["hardware"]["digest"], js["hardware"]["digest"]);
}

// The shipped cpu-local was measured on another machine (it records none): validate says so, calibrates
// this machine into the per-user cache, reuses that calibration next time, and leaves the tracked
// profile as it was.
TEST(ValidateCli, AnotherMachinesProfileIsRecalibratedIntoTheUserCache) {
  const std::string dir = testing::make_temp_dir();
  const char* was = std::getenv("XDG_CACHE_HOME");
  const std::string saved = was ? was : "";
  setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  const std::string tracked_path = std::string(MOESIM_SOURCE_DIR) + "/configs/hardware/cpu-local.yaml";
  const std::string tracked = testing::read_text(tracked_path);
  const std::string small = " --batches 2 --set execute.hidden=32 --set execute.ffn=64 --format json";
  const auto first = testing::run_cli("validate" + small);
  const auto second = testing::run_cli("validate" + small);
  if (was) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else unsetenv("XDG_CACHE_HOME");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("cpu-local was measured on an unrecorded machine, not on this machine"), std::string::npos)
      << first.err;
  EXPECT_NE(first.err.find("calibrating it afresh into " + dir + "/moesim/cpu-local-"), std::string::npos) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  if (first.err.find("is not cached") == std::string::npos) {
    EXPECT_NE(second.err.find("has its own calibration: " + dir + "/moesim/cpu-local-"), std::string::npos)
        << second.err;
    int cached = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/moesim")) cached += e.path().extension() == ".yaml";
    EXPECT_EQ(cached, 1);
  } else {
    std::cout << "this machine was loaded: the calibration was not cached (" << first.err << ")\n";
  }
  EXPECT_EQ(testing::read_text(tracked_path), tracked);
}

TEST(ValidateCli, BadArgumentsExitTwo) {
  for (const char* args : {"validate --batches 0..4*2", "validate --hardware no-such-profile --batches 1",
                           "validate --batches 1 --format yaml", "validate --batches 1 --hardware t4 --set hardware=t4"}) {
    const auto r = testing::run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
}

TEST(ValidateCli, MarkdownIsTheTableAsAPreformattedBlock) {
  const auto r = testing::run_cli("validate --batches 16 --set execute.hidden=32 --set execute.ffn=64 --format markdown");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("```text\nvalidate: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("median absolute percentage error"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(r.out.size() - 4), "```\n");
}

}  // namespace
}  // namespace moesim
