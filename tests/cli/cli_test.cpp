// End-to-end tests of the moesim binary: each subcommand's output and exit codes (DESIGN.md "Exit
// codes and errors"), one-line errors naming the file and key, and outputs replaced only on success.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "tests/support/run_cli.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace {

using testing::run_cli;

// A small, fast experiment for the CLI: 256 tokens through a 32 x 64 executed layer.
const std::string kSmall =
    " --set workload.batch=256 --set execute.hidden=32 --set execute.ffn=64 --set execute.repeats=1";

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(Cli, RunDefaultPrintsTable) {
  const auto r = run_cli("run" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("imbalance"), std::string::npos);
  EXPECT_NE(r.out.find("token_choice"), std::string::npos);
}

TEST(Cli, RunJsonHasSchemaAndMetrics) {
  const auto r = run_cli("run --format json" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema_version"], 2);
  const auto& s = j["strategies"][0];
  const auto load = s["metrics"]["load"].get<std::vector<int64_t>>();
  const int64_t kept = std::accumulate(load.begin(), load.end(), int64_t{0});
  EXPECT_EQ(kept + s["metrics"]["dropped"].get<int64_t>(), 256 * 2);  // sum(load) + dropped == N*k
  for (const char* key : {"router_s", "dispatch_s", "experts_s", "combine_s", "layer_s"})
    EXPECT_GT(s["measured"][key].get<double>(), 0.0) << key;
  EXPECT_GT(s["modeled"]["single"]["time_s"].get<double>(), 0.0);
}

TEST(Cli, RepeatsFlagSetsExecuteRepeats) {
  const auto r = run_cli("run --format json --repeats 2" + std::string(
      " --set workload.batch=64 --set execute.hidden=16 --set execute.ffn=32 --set execute.repeats=5"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["execute"]["repeats"], 2);  // the flag wins over --set
  EXPECT_EQ(j["execute"]["backend"], "cpu");  // the default --backend auto without a device
  const auto bad = run_cli("run --repeats -1" + kSmall);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--repeats: expected an integer >= 1"), std::string::npos) << bad.err;
  EXPECT_EQ(count_lines(bad.err), 1) << bad.err;
}

TEST(Cli, SameSeedSameJsonAtOneAndTwoThreads) {
  const std::string args = "run --format json --no-execute" + kSmall;
  const auto a = run_cli(args + " --threads 1");
  const auto b = run_cli(args + " --threads 2");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(testing::without_provenance(a.out), testing::without_provenance(b.out));
  // The provenance records what differs: the thread count.
  EXPECT_EQ(nlohmann::json::parse(a.out)["provenance"]["threads"], 1);
  EXPECT_EQ(nlohmann::json::parse(b.out)["provenance"]["threads"], 2);
}

TEST(Cli, VerifyAgreesWithReferences) {
  const auto r = run_cli("compare --gating all --verify --format json" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // a named object: the loop reads into it
  ASSERT_EQ(j["strategies"].size(), 9u);
  for (const auto& s : j["strategies"]) EXPECT_EQ(s["verify"], "ok") << s["strategy"];
}

TEST(Cli, CompareAllHasOneRowPerStrategy) {
  const auto r = run_cli("compare --gating all --format csv --no-execute" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.out), 1 + 9);  // header + nine strategies
  const auto v = run_cli("compare --gating token_choice --vary router.capacity_factor=1,2 --format csv --no-execute" + kSmall);
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(count_lines(v.out), 1 + 2);
  EXPECT_NE(v.out.find("capacity_factor=2"), std::string::npos);
  const auto md = run_cli("compare --gating balanced,random --format markdown --no-execute" + kSmall);
  EXPECT_NE(md.out.find("| ---: |"), std::string::npos);
}

TEST(Cli, ConfigRoundTrips) {
  const std::string dir = testing::make_temp_dir();
  const auto a = run_cli("config --set model.top_k=4 --out " + dir + "/a.yaml");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto b = run_cli("config " + dir + "/a.yaml");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(testing::read_text(dir + "/a.yaml"), b.out);
  EXPECT_NE(b.out.find("top_k: 4"), std::string::npos);
}

TEST(Cli, RouteAgreesWithIndependentTopK) {
  // Independent computation: top-2 of each row by logit (softmax is monotonic), count per expert.
  const int64_t N = 500;
  const int E = 6;
  const std::vector<float> logits = synthetic_logits(N, E, 1.0, 99);
  std::vector<int64_t> load(E, 0);
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[t * E + a] > logits[t * E + b]; });
    ++load[idx[0]];
    ++load[idx[1]];
  }
  const double mean = 2.0 * N / E;
  const double imbalance = *std::max_element(load.begin(), load.end()) / mean;

  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/l.npy", encode_npy_f32(logits, N, E));
  const auto r = run_cli("route --logits " + dir + "/l.npy --top-k 2 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["metrics"]["load"].get<std::vector<int64_t>>(), load);
  EXPECT_NEAR(j["metrics"]["imbalance"].get<double>(), imbalance, 1e-12);
  EXPECT_EQ(j["metrics"]["dropped"], 0);
}

TEST(Cli, BadInputIsExitTwoWithOneLine) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/bad.yaml", "model:\n  experts: 8\n  top_k: 9\n");
  testing::write_text(dir + "/nan.npy", encode_npy_f32({0, std::nanf("")}, 1, 2));
  struct Case {
    std::string args, expect_in_message;
  };
  const std::vector<Case> cases = {
      {"run " + dir + "/bad.yaml", "model.top_k"},
      {"run " + dir + "/missing.yaml", "missing.yaml"},
      {"run --set router.topk=3", "router.topk"},
      {"run --set model.experts=0", "model.experts"},
      {"run --format xml", "--format"},
      {"run --bogus-option", "bogus"},
      {"frobnicate", "unknown command"},
      {"route --logits " + dir + "/nan.npy", "nan.npy"},
      {"route", "--logits"},
      {"compare --gating nosuch", "nosuch"},
      {"run --no-execute --out /nonexistent-dir/x.json" + kSmall, "/nonexistent-dir/x.json"},
  };
  for (const Case& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect_in_message), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(Cli, MemoryLimitIsExitThreeBeforeAllocating) {
  const auto r = run_cli("run --memory-limit 1MiB --set workload.batch=100000000");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("memory limit"), std::string::npos) << r.err;
}

TEST(Cli, OutIsReplacedOnlyOnSuccess) {
  const std::string dir = testing::make_temp_dir();
  const std::string out = dir + "/result.json";
  testing::write_text(out, "previous");
  const auto bad = run_cli("run --set model.top_k=99 --out " + out);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(testing::read_text(out), "previous");
  const auto good = run_cli("run --no-execute --format json --out " + out + kSmall);
  ASSERT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(nlohmann::json::parse(testing::read_text(out))["schema_version"], 2);
}

}  // namespace
}  // namespace moesim
