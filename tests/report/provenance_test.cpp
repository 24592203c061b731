// Every JSON result describes itself: the effective experiment as `moesim config` prints it, the
// profile's name and digest, and a provenance block (version, commit, command, threads, UTC date)
// written by run, compare, check, sweep, validate and route alike; the recorded commit is git's HEAD.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "src/common/build_info.hpp"
#include "src/config/load_config.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;
using testing::write_text;

const char* kSmall = " --set workload.batch=96 --set execute.hidden=32 --set execute.ffn=64 --set execute.repeats=1";

// The source tree's commit as git reports it; "" when it cannot say (no checkout, no git).
std::string git_head() {
  FILE* p = popen("git -C " MOESIM_SOURCE_DIR " rev-parse HEAD 2>/dev/null", "r");
  if (!p) return "";
  char buf[128] = {0};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  pclose(p);
  std::string s = got ? buf : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

void expect_provenance(const nlohmann::json& j, const std::string& command, int threads) {
  ASSERT_TRUE(j.contains("provenance")) << command;
  const nlohmann::json& p = j["provenance"];
  EXPECT_EQ(p["command"], command);
  EXPECT_EQ(p["threads"], threads) << command;
  EXPECT_EQ(p["moesim_version"], MOESIM_VERSION) << command;
  EXPECT_TRUE(std::regex_match(p["date_utc"].get<std::string>(),
                               std::regex(R"(20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]Z)")))
      << p.dump();
  // The commit this build recorded (the test binary and moesim are built together), null outside a
  // git checkout; cmake/build_commit.cmake is held to git itself by BuildCommit.IsTheTreesHead.
  const std::string commit = build_commit();
  if (commit.empty()) {
    EXPECT_TRUE(p["commit"].is_null()) << p.dump();
  } else {
    EXPECT_EQ(p["commit"], commit);
    EXPECT_TRUE(std::regex_match(commit, std::regex("[0-9a-f]{40}(-dirty)?"))) << commit;
  }
  EXPECT_EQ(j["schema_version"], 3) << command;
}

// cmake/build_commit.cmake writes the tree's HEAD (what git rev-parse prints), "-dirty" appended when
// tracked files differ from it; the text is the C++ the build compiles.
TEST(BuildCommit, IsTheTreesHead) {
  const std::string head = git_head();
  if (head.empty()) GTEST_SKIP() << "moesim-tests: skipped: the source is not a git checkout git can read";
  const std::string out = testing::make_temp_dir() + "/build_commit.cpp";
  const std::string cmd = "cmake -DOUT=" + out + " -DROOT=" MOESIM_SOURCE_DIR " -P " MOESIM_SOURCE_DIR
                          "/cmake/build_commit.cmake";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::string text = testing::read_text(out);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("return \"([0-9a-f]{40})(-dirty)?\";"))) << text;
  EXPECT_EQ(m[1].str(), head);
}

TEST(Provenance, EveryCommandRecordsItsInvocation) {
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/l.csv", "1,0,2,0\n0,3,0,1\n2,2,1,0\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run", "run --no-execute" + std::string(kSmall)},
      {"compare", "compare --gating token_choice,balanced --no-execute" + std::string(kSmall)},
      {"sweep", "sweep --vary workload.batch=32,64" + std::string(kSmall)},
      {"validate", "validate --batches 16,32" + std::string(kSmall)},
      {"route", "route --logits " + dir + "/l.csv --top-k 2"},
  };
  for (const auto& [command, args] : cases) {
    const auto r = run_cli(args + " --format json --threads 2");
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    expect_provenance(nlohmann::json::parse(r.out), command, 2);
  }
  const std::string baseline = dir + "/b.json";
  const auto c = run_cli("check " MOESIM_SOURCE_DIR "/configs/regression/uniform.yaml --threads 1 --baseline " +
                         baseline + " --update-baseline");
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  expect_provenance(nlohmann::json::parse(testing::read_text(baseline)), "check", 1);
}

// experiment.config is the tree `moesim config` prints, for a file with overrides: loading the printed
// YAML gives the same tree.
TEST(Provenance, ResultCarriesTheEffectiveExperiment) {
  const std::string file = MOESIM_SOURCE_DIR "/configs/olmoe-1b-7b.yaml";
  const std::string sets = " --set workload.skew=2.5 --set router.capacity_factor=1.5";
  const auto printed = run_cli("config " + file + sets);
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  const auto run = run_cli("run " + file + sets + " --no-execute --format json --set workload.batch=64");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  nlohmann::json expected = experiment_to_json(load_experiment_text(printed.out, "printed.yaml", {"workload.batch=64"}));
  EXPECT_EQ(j["experiment"]["config"], expected);
  EXPECT_EQ(j["experiment"]["config"]["workload"]["skew"], 2.5);
  EXPECT_EQ(j["experiment"]["config"]["router"]["gating"], j["strategies"][0]["gating"]);
  EXPECT_EQ(j["hardware"]["name"], j["experiment"]["config"]["hardware"]);
  EXPECT_EQ(j["hardware"]["digest"].get<std::string>().rfind("fnv1a64:", 0), 0u);
}

}  // namespace
}  // namespace moesim
