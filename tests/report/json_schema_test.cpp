// docs/json-schema.md is the JSON schema, tested: every command's output is checked against its
// tables in both directions. Each field present must be listed with its type; each field a table marks
// `always` (or marks with a condition the output meets) must be present.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

struct Field {
  std::string section, path, type, present;
  std::regex pattern;
};

// Every table row `| \`path\` | type | present | meaning |` of the page, with the `## ` section it is in.
std::vector<Field> documented_fields() {
  std::vector<Field> out;
  std::istringstream in(testing::read_text(MOESIM_SOURCE_DIR "/docs/json-schema.md"));
  std::string section;
  const std::regex row(R"(^\| `([^`]+)` \| ([a-z|\\]+) \| ([^|]+) \|.*$)");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) section = line.substr(3);
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    std::string type = std::regex_replace(m[2].str(), std::regex(R"(\\)"), "");
    std::string present = m[3].str();
    while (!present.empty() && present.back() == ' ') present.pop_back();
    // `<name>` is one key; every other character is itself.
    std::string re;
    const std::string path = m[1].str();
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] == '<') {
        i = path.find('>', i);
        re += "[^.\\[\\]]+";
      } else if (std::string(".[]").find(path[i]) != std::string::npos) {
        re += std::string("\\") + path[i];
      } else {
        re += path[i];
      }
    }
    out.push_back({section, path, type, present, std::regex(re)});
  }
  return out;
}

bool has_type(const nlohmann::json& v, const std::string& type) {
  std::istringstream alternatives(type);
  for (std::string t; std::getline(alternatives, t, '|');) {
    if ((t == "integer" && v.is_number_integer()) || (t == "number" && v.is_number()) ||
        (t == "string" && v.is_string()) || (t == "boolean" && v.is_boolean()) || (t == "array" && v.is_array()) ||
        ((t == "object" || t == "map") && v.is_object()) || (t == "null" && v.is_null()))
      return true;
  }
  return false;
}

// Every field path of `j` with its value: objects by key, arrays of objects as `[]` over every
// element; a field documented as `map` is one value.
void flatten(const nlohmann::json& j, const std::string& prefix, const std::vector<Field>& docs,
             std::vector<std::pair<std::string, nlohmann::json>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    out.emplace_back(path, it.value());
    bool is_map = false;
    for (const Field& f : docs) is_map |= f.type == "map" && std::regex_match(path, f.pattern);
    if (is_map) continue;
    if (it.value().is_object()) flatten(it.value(), path, docs, out);
    if (it.value().is_array())
      for (const auto& e : it.value())
        if (e.is_object()) flatten(e, path + "[]", docs, out);
  }
}

// Checks one output against the page: `sections` are the tables that apply, `conditions` the
// `present` values this output must meet besides `always`.
void expect_documented(const std::string& what, const nlohmann::json& j, const std::set<std::string>& sections,
                       const std::set<std::string>& conditions) {
  static const std::vector<Field> docs = documented_fields();
  ASSERT_GT(docs.size(), 100u);
  std::vector<std::pair<std::string, nlohmann::json>> fields;
  flatten(j, "", docs, fields);
  for (const auto& [path, value] : fields) {
    bool listed = false, typed = false;
    for (const Field& f : docs) {
      if (!std::regex_match(path, f.pattern)) continue;
      listed = true;
      typed |= has_type(value, f.type);
    }
    EXPECT_TRUE(listed) << what << ": " << path << " is not in docs/json-schema.md";
    EXPECT_TRUE(!listed || typed) << what << ": " << path << " = " << value.dump().substr(0, 80)
                                  << " does not have its documented type";
  }
  for (const Field& f : docs) {
    if (!sections.count(f.section) || !(f.present == "always" || conditions.count(f.present))) continue;
    bool found = false;
    for (const auto& [path, value] : fields) found |= std::regex_match(path, f.pattern);
    EXPECT_TRUE(found) << what << ": " << f.path << " (" << f.present << ") is missing";
  }
}

nlohmann::json json_of(const std::string& args) {
  const auto r = run_cli(args + " --format json");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  return nlohmann::json::parse(r.out);
}

const std::string kEvery = "Every result";
const std::string kRun = "run, compare and check";
const std::string kSmall =
    " --set workload.batch=96 --set execute.hidden=32 --set execute.ffn=64 --set execute.repeats=1";

TEST(JsonSchema, EveryFieldIsDocumented) {
  expect_documented("run", json_of("run" + kSmall), {kEvery, kRun}, {"executed"});
  expect_documented("run of several batches",
                    json_of("run --no-execute --set router.gating=aux_free_bias --set workload.batches=3" + kSmall),
                    {kEvery, kRun}, {"several batches", "aux_free_bias"});
  expect_documented("compare, expert-parallel",
                    json_of("compare --gating all --no-execute --set placement.kind=expert_parallel "
                            "--set placement.devices=2" + kSmall),
                    {kEvery, kRun}, {"expert_parallel"});
  expect_documented("run, expert-parallel, rebalanced",
                    json_of("run --no-execute --set placement.kind=expert_parallel --set placement.devices=2 "
                            "--set placement.policy=global --set placement.rebalance_every=1 --set workload.batches=3" + kSmall),
                    {kEvery, kRun}, {"expert_parallel", "several batches", "single-process rebalancing"});
  expect_documented("decoder",
                    json_of("run " MOESIM_SOURCE_DIR "/configs/mixtral-8x7b-decode.yaml --set workload.decode_steps=2 "
                            "--set workload.batch=4 --set execute.repeats=1 --records"),
                    {kEvery, kRun},
                    {"step run", "decoder", "decoder, executed", "several batches", "step run, --records",
                     "decoder, --records", "decoder, executed, --records"});
  expect_documented("load profile", json_of("run " MOESIM_SOURCE_DIR "/configs/olmoe-profile.yaml --no-execute"),
                    {kEvery, kRun}, {"step run", "a file was read", "load_profile", "several batches"});

  const std::string dir = testing::make_temp_dir();
  const auto c = run_cli("check " MOESIM_SOURCE_DIR "/configs/regression/uniform.yaml " MOESIM_SOURCE_DIR
                         "/configs/regression/skewed.yaml --baseline " + dir + "/b.json --update-baseline");
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  const nlohmann::json runs = nlohmann::json::parse(testing::read_text(dir + "/b.json"));
  ASSERT_EQ(runs["runs"].size(), 2u);
  for (const auto& r : runs["runs"]) expect_documented("check baseline run", r, {kEvery, kRun}, {});

  // check's own report: one that passes, and one with a failure (exit 1).
  const auto passed = run_cli("check " MOESIM_SOURCE_DIR "/configs/regression/uniform.yaml --format json");
  ASSERT_EQ(passed.exit_code, 0) << passed.err;
  expect_documented("check report", nlohmann::json::parse(passed.out), {"check --format json"}, {});
  testing::write_text(dir + "/bad.yaml", "name: bad\nworkload: {batch: 64}\nexpect:\n  imbalance: {max: 1.0}\n");
  const auto failed = run_cli("check " + dir + "/bad.yaml --format json");
  ASSERT_EQ(failed.exit_code, 1) << failed.err;
  expect_documented("check report with a failure", nlohmann::json::parse(failed.out), {"check --format json"},
                    {"a failure"});
  expect_documented("sweep", json_of("sweep --measure --vary workload.batch=32,64" + kSmall), {kEvery, "sweep"},
                    {"--measure"});
  expect_documented("validate", json_of("validate --batches 16,32" + kSmall), {kEvery, "validate"}, {});
  const std::string train = " --set train.global_batch=16 --set train.routed_micro_batches=2";
  expect_documented("train", json_of("train" + train), {kEvery, "moesim train"}, {});
  expect_documented("train --compare", json_of("train --compare --set train.pp=2 --set train.gpus=16" + train),
                    {kEvery, "moesim train"}, {});
  const auto v = run_cli("validate --published " MOESIM_SOURCE_DIR "/data/training-step/megatron-lm-moe-readme-mixtral.csv"
                         " --format json");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  nlohmann::json training_only = nlohmann::json::parse(v.out);
  // Only the listed-and-typed half: a training-only validation has none of the kernel tables' `always` keys.
  expect_documented("validate --published, training tables", training_only, {}, {});
  const auto sv = run_cli("validate --published " MOESIM_SOURCE_DIR "/data/serving-step/step-measurements.csv --format json");
  ASSERT_EQ(sv.exit_code, 0) << sv.err;
  expect_documented("validate --published, serving-step tables", nlohmann::json::parse(sv.out), {}, {});
  const auto rv = run_cli("validate --published " MOESIM_SOURCE_DIR "/data/serving --format json");
  ASSERT_EQ(rv.exit_code, 0) << rv.err;
  expect_documented("validate --published, serving tables", nlohmann::json::parse(rv.out), {}, {});
  expect_documented("serve", json_of("serve " MOESIM_SOURCE_DIR "/configs/deepseek-v3.yaml --set placement.devices=8 "
                                     "--set hardware=h200 --requests 32 --isl 256 --osl 16 --max-batch 8 "
                                     "--max-num-tokens 512"),
                    {"moesim serve"}, {"counterfactuals"});
  expect_documented("step", json_of("step " MOESIM_SOURCE_DIR "/configs/deepseek-v3.yaml --set placement.devices=8 "
                                    "--requests-per-gpu 16 --kv-len 512"),
                    {"moesim step"}, {});
  testing::write_text(dir + "/loads.json", R"({"p": {"0": [10, 2, 3, 1], "3": [4, 4, 4, 4]}})");
  expect_documented("plan", json_of("plan " + dir + "/loads.json --devices 2 --replicas 2"), {"plan --format json"}, {});
  testing::write_text(dir + "/l.csv", "1,0,2,0\n0,3,0,1\n");
  expect_documented("route", json_of("route --logits " + dir + "/l.csv --top-k 2"), {kEvery, "route"}, {});
  expect_documented("route, aux_free_bias", json_of("route --logits " + dir + "/l.csv --top-k 2 --gating aux_free_bias"),
                    {kEvery, "route"}, {"aux_free_bias"});
}

// The expert-parallel run under mpirun (with replicas, rebalancing and --verify), written to the file
// MOESIM_SCHEMA_FILE names: the CTest mpi.run_json_schema runs it (tests/mpi/check_schema.cmake).
TEST(JsonSchema, ExpertParallelRunFile) {
  const char* file = std::getenv("MOESIM_SCHEMA_FILE");
  if (!file) GTEST_SKIP() << "moesim-tests: skipped: needs MOESIM_SCHEMA_FILE (CTest mpi.run_json_schema sets it)";
  const nlohmann::json j = nlohmann::json::parse(testing::read_text(file));
  expect_documented("expert-parallel run", j, {kEvery, kRun},
                    {"expert-parallel run", "rebalancing", "--verify", "expert_parallel", "several batches"});
}

// A field that is not on the page fails: the check is not vacuous.
TEST(JsonSchema, AnUndocumentedFieldIsCaught) {
  nlohmann::json j = json_of("route --logits " + [] {
    const std::string dir = testing::make_temp_dir();
    testing::write_text(dir + "/l.csv", "1,0\n0,3\n");
    return dir + "/l.csv";
  }() + " --top-k 1");
  j["no_such_field"] = 1;
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    expect_documented("route", j, {kEvery, "route"}, {});
  }
  ASSERT_EQ(failures.size(), 1);
  EXPECT_NE(std::string(failures.GetTestPartResult(0).message()).find("no_such_field is not in"), std::string::npos);
}

}  // namespace
}  // namespace moesim
