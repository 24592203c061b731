// `moesim check` exits 0 / 1 / 2 exactly as specified: a met bound, a violated bound, baseline drift
// in the bad and in the good direction, and malformed input (expect block, baseline).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;
using testing::write_text;

// Skewed logits, small batch: token_choice imbalance is well above 1, balanced is exactly 1.
const char* kBase =
    "name: checked\n"
    "workload: {batch: 512, skew: 1.5, seed: 3}\n"
    "router: {gating: token_choice, capacity_factor: 0}\n"
    "execute: {enabled: false}\n";

TEST(Check, MetAndViolatedBounds) {
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/ok.yaml", std::string(kBase) +
                                   "expect:\n"
                                   "  - {metric: imbalance, max: 1.0000001, strategy: balanced}\n"
                                   "  - {metric: drop_rate, max: 0}\n"
                                   "  - {metric: imbalance, min: 1.2, strategy: token_choice}\n");
  const auto ok = run_cli("check " + dir + "/ok.yaml");
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;

  write_text(dir + "/bad.yaml", std::string(kBase) + "expect:\n  imbalance: {max: 1.05}\n");
  const auto bad = run_cli("check " + dir + "/bad.yaml");
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  // One line per failing metric: file, strategy, metric, value, bound.
  EXPECT_NE(bad.out.find("bad.yaml: token_choice: imbalance = "), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("expected max 1.05"), std::string::npos) << bad.out;
}

TEST(Check, BaselineDriftOnlyFailsInTheBadDirection) {
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/exp.yaml", kBase);
  const std::string baseline = dir + "/baseline.json";
  const auto update = run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --update-baseline");
  ASSERT_EQ(update.exit_code, 0) << update.out << update.err;
  const auto same = run_cli("check " + dir + "/exp.yaml --baseline " + baseline);
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;

  // Worse: more skew raises imbalance above the baseline.
  const auto worse = run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set workload.skew=3");
  EXPECT_EQ(worse.exit_code, 1) << worse.out << worse.err;
  EXPECT_NE(worse.out.find("imbalance"), std::string::npos) << worse.out;

  // Better: no skew lowers imbalance; lower is better, so no imbalance failure. Entropy rises too.
  const auto better = run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set workload.skew=0");
  EXPECT_EQ(better.out.find(": imbalance ="), std::string::npos) << better.out;

  // A generous tolerance absorbs the worse run's drift in imbalance.
  const auto tolerant =
      run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set workload.skew=1.6 --rtol 10");
  EXPECT_EQ(tolerant.exit_code, 0) << tolerant.out << tolerant.err;
}

TEST(Check, FailingBoundWritesNoBaselineUnlessForced) {
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/bad.yaml", std::string(kBase) + "expect:\n  imbalance: {max: 1.05}\n");
  const std::string baseline = dir + "/baseline.json";
  const auto refused = run_cli("check " + dir + "/bad.yaml --baseline " + baseline + " --update-baseline");
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_FALSE(std::filesystem::exists(baseline)) << refused.out;
  EXPECT_NE(refused.out.find("was not written"), std::string::npos) << refused.out;
  const auto forced = run_cli("check " + dir + "/bad.yaml --baseline " + baseline + " --update-baseline --force");
  EXPECT_EQ(forced.exit_code, 1) << forced.out << forced.err;
  EXPECT_TRUE(std::filesystem::exists(baseline)) << forced.out;
  EXPECT_EQ(run_cli("check " + dir + "/bad.yaml --force").exit_code, 2);
}

TEST(Check, NoisyMeasuredBoundStillGatesAndSaysWhy) {
  // execute.repeats 1 is noisy by rule; the bound is still evaluated, and its failure names the reason.
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/noisy.yaml",
             "name: noisy\n"
             "workload: {batch: 64, seed: 3}\n"
             "execute: {enabled: true, hidden: 16, ffn: 32, repeats: 1}\n"
             "expect:\n"
             "  - {metric: measured_batching_efficiency, max: 0}\n"
             "  - {metric: measured_layer_s, min: 0}\n");
  const auto r = run_cli("check " + dir + "/noisy.yaml");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("noisy.yaml: token_choice: measured_batching_efficiency = "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expected max 0 (measured times noisy: execute.repeats 1 < 3: a median of 1 has no spread"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(": 1 failure(s)"), std::string::npos) << r.out;  // the met bound stays met
}

TEST(Check, BadInputIsExitTwo) {
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/malformed.yaml", std::string(kBase) + "expect:\n  imbalance: {maximum: 2}\n");
  write_text(dir + "/unknown.yaml", std::string(kBase) + "expect:\n  no_such_metric: {max: 2}\n");
  write_text(dir + "/exp.yaml", kBase);
  write_text(dir + "/garbage.json", "{not json");
  write_text(dir + "/wrong.json", "{\"schema_version\": 1}");
  for (const std::string& args :
       {"check " + dir + "/malformed.yaml", "check " + dir + "/unknown.yaml", std::string("check"),
        "check " + dir + "/exp.yaml --baseline " + dir + "/garbage.json",
        "check " + dir + "/exp.yaml --baseline " + dir + "/wrong.json",
        "check " + dir + "/exp.yaml --baseline " + dir + "/missing.json"}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_FALSE(r.err.empty()) << args;
  }
}

}  // namespace
}  // namespace moesim
