// The bad-input matrix: every subcommand fed wrong keys, types, sizes, files and paths. Each case asserts
// the documented exit code (2 bad input, 3 resource limit; docs/design.md "Exit codes and errors"), exactly one
// line on stderr naming the file or key and what was expected, nothing on stdout, no output file left
// behind, and no crash: no signal, no "terminate called", no sanitizer or "internal error" report.
// Suite FuzzRegression replays every fuzz seed and every saved fuzz finding (tests/fuzz/corpus/<target>/,
// tests/fuzz/regressions/<target>/) through the checks of tests/fuzz/fuzz_targets.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_targets.hpp"
#include "tests/support/run_cli.hpp"
#include "src/workload/logits_file.hpp"

namespace moesim {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::write_text;

// Keeps every run small: 64 tokens, and the executed layer tiny where a case executes at all.
const std::string kSmall = " --no-execute --set workload.batch=64";

std::string npy_with_header(const std::string& dict, const std::string& data) {
  std::string header = dict;
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

std::string floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Bytes no reader accepts: NULs, newlines, invalid UTF-8 and a stray YAML/JSON opener.
const std::string kGarbage = std::string("\x00\xff\xfe{[\n\x93\"\t\x01garbage\n\x7f\r\n", 18);

struct BadCase {
  std::string name;
  // Writes the files the case needs into `dir` and returns the moesim arguments.
  std::function<std::string(const std::string& dir)> args;
  int exit_code;
  std::vector<std::string> needles;  // each must appear in the stderr line; "{dir}" stands for the folder
};

std::string good_npy(const std::string& dir) {
  std::vector<float> v(64 * 8);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  write_text(dir + "/l.npy", encode_npy_f32(v, 64, 8));
  return dir + "/l.npy";
}

std::string file(const std::string& dir, const std::string& name, const std::string& content) {
  write_text(dir + "/" + name, content);
  return dir + "/" + name;
}

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      // ---- run: experiment files and --set ------------------------------------------------------
      {"RunUnknownKeyInFile",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "model:\n  expertz: 8\n") + kSmall; }, 2,
       {"x.yaml:2", "model.expertz", "unknown key"}},
      {"RunWrongType",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "model: {experts: eight}\n") + kSmall; }, 2,
       {"x.yaml:1", "model.experts", "expected an integer"}},
      {"RunZeroBatch", [](const std::string&) { return "run --no-execute --set workload.batch=0"; }, 2,
       {"--set workload.batch=0", "expected an integer in [1,"}},
      {"RunNegativeHidden", [](const std::string&) { return "run" + kSmall + " --set model.hidden=-4096"; }, 2,
       {"model.hidden", "expected an integer in [1,", "-4096"}},
      {"RunHugeExperts", [](const std::string&) { return "run" + kSmall + " --set model.experts=1000000"; }, 2,
       {"model.experts", "[1, 65536]"}},
      {"RunHugeBatchBeyondInt64", [](const std::string&) { return "run --no-execute --set workload.batch=1e30"; }, 2,
       {"workload.batch", "expected an integer"}},
      {"RunTopKAboveExperts",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "model: {experts: 8, top_k: 9}\n") + kSmall; }, 2,
       {"x.yaml:1", "model.top_k", "[1, 8]"}},
      {"RunNegativeCapacityFactor",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "router:\n  capacity_factor: -0.5\n") + kSmall; },
       2, {"x.yaml:2", "router.capacity_factor", ">= 0"}},
      {"RunNanOverride", [](const std::string&) { return "run" + kSmall + " --set router.capacity_factor=.nan"; }, 2,
       {"router.capacity_factor", "finite"}},
      {"RunInfInFile",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "workload: {skew: .inf}\n") + kSmall; }, 2,
       {"x.yaml:1", "workload.skew", "finite"}},
      {"RunEmptyFile", [](const std::string& d) { return "run " + file(d, "x.yaml", "") + kSmall; }, 2,
       {"x.yaml", "expected a YAML map"}},
      {"RunBinaryGarbage", [](const std::string& d) { return "run " + file(d, "x.yaml", kGarbage) + kSmall; }, 2,
       {"x.yaml"}},
      {"RunControlCharacterInKey",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "model: {\"a\\nb\": 1}\n") + kSmall; }, 2,
       {"x.yaml:1", "model.a\\x0ab", "unknown key"}},
      {"RunDeeplyNestedYaml",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "name: " + std::string(100000, '[')) + kSmall; }, 2,
       {"x.yaml", "invalid YAML"}},
      {"RunLoneComma",  // yaml-cpp 0.7's LoadAll looped forever on it, allocating
       [](const std::string& d) { return "run " + file(d, "x.yaml", "# a comment\n , x\n") + kSmall; }, 2,
       {"x.yaml:2", "invalid YAML", "unexpected ','"}},
      {"RunSetLoneComma", [](const std::string&) { return "run" + kSmall + " --set model.name=,"; }, 2,
       {"--set model.name=,", "invalid YAML"}},
      {"RunTwoDocuments",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "name: a\n---\nname: b\n") + kSmall; }, 2,
       {"x.yaml:3", "one YAML document"}},
      {"RunDuplicateKey",
       [](const std::string& d) { return "run " + file(d, "x.yaml", "model: {experts: 8}\nmodel: {top_k: 1}\n") + kSmall; },
       2, {"x.yaml:2", "duplicate key"}},
      {"RunSetMissingKey", [](const std::string&) { return "run" + kSmall + " --set router.capacity=2"; }, 2,
       {"--set router.capacity=2", "unknown key router.capacity", "did you mean router.capacity_factor, "}},
      {"RunSetWithoutValue", [](const std::string&) { return "run" + kSmall + " --set model.top_k"; }, 2,
       {"--set model.top_k", "KEY.PATH=VALUE"}},
      {"RunMissingFile", [](const std::string& d) { return "run " + d + "/nope.yaml" + kSmall; }, 2,
       {"{dir}/nope.yaml", "cannot open"}},
      {"RunFolderAsFile", [](const std::string& d) { return "run " + d + kSmall; }, 2, {"{dir}", "folder"}},
      {"RunUnwritableOut", [](const std::string&) { return "run" + kSmall + " --out /nonexistent-dir/r.json"; }, 2,
       {"/nonexistent-dir/r.json"}},
      {"RunOutIsFolder", [](const std::string& d) { return "run" + kSmall + " --out " + d; }, 2, {"{dir}"}},
      {"RunUnknownOption", [](const std::string&) { return "run --frobnicate"; }, 2, {"frobnicate"}},
      {"RunBadMemoryLimit", [](const std::string&) { return "run" + kSmall + " --memory-limit lots"; }, 2,
       {"--memory-limit", "lots"}},
      {"RunNegativeThreads", [](const std::string&) { return "run" + kSmall + " --threads -1"; }, 2,
       {"--threads", "-1"}},
      {"RunBadFormat", [](const std::string&) { return "run" + kSmall + " --format xml"; }, 2, {"--format", "xml"}},
      {"RunOverMemoryLimit",
       [](const std::string&) { return "run --set workload.batch=100000000 --memory-limit 1GiB"; }, 3,
       {"memory limit", "--memory-limit"}},
      // ---- compare ----------------------------------------------------------------------------
      {"CompareUnknownGating", [](const std::string&) { return "compare --gating token_choice,nosuch" + kSmall; }, 2,
       {"--gating", "nosuch"}},
      {"CompareVaryNegativeCapacity",
       [](const std::string&) { return "compare --vary router.capacity_factor=1,-1" + kSmall; }, 2,
       {"router.capacity_factor", ">= 0"}},
      // A placement row that EPLB cannot place names the user's --vary, once.
      {"CompareVaryPlacementKey",
       [](const std::string&) { return "compare --set placement.policy=global --vary placement.devices=8,3" + kSmall; },
       2, {"--vary placement.devices=3: placement.devices: expected a divisor of model.experts"}},
      // ---- route: logits files ------------------------------------------------------------------
      {"RouteTruncatedNpy",
       [](const std::string& d) {
         const std::string full = encode_npy_f32(std::vector<float>(32, 1.0f), 4, 8);
         return "route --logits " + file(d, "t.npy", full.substr(0, full.size() - 5));
       },
       2, {"t.npy", "truncated"}},
      {"RouteWrongDtype",
       [](const std::string& d) {
         return "route --logits " +
                file(d, "i.npy", npy_with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }",
                                                 std::string(16, '\0')));
       },
       2, {"i.npy", "float32 or float64", "<i4"}},
      {"RouteRankOne",
       [](const std::string& d) {
         return "route --logits " +
                file(d, "r.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
                                                 floats({1, 2, 3, 4})));
       },
       2, {"r.npy", "2-D", "(4,)"}},
      {"RouteRankThree",
       [](const std::string& d) {
         return "route --logits " +
                file(d, "r.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 2), }",
                                                 floats({1, 2, 3, 4})));
       },
       2, {"r.npy", "2-D"}},
      {"RouteZeroExperts",
       [](const std::string& d) {
         return "route --logits " +
                file(d, "z.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 0), }", ""));
       },
       2, {"z.npy", "experts"}},
      {"RouteNanLogits",
       [](const std::string& d) {
         return "route --logits " + file(d, "n.npy", encode_npy_f32({0, 1, std::nanf(""), 2}, 2, 2));
       },
       2, {"n.npy", "finite", "row 1, column 0"}},
      {"RouteInfLogitsCsv", [](const std::string& d) { return "route --logits " + file(d, "i.csv", "1,2\n3,inf\n"); },
       2, {"i.csv", "line 2", "finite"}},
      {"RouteRaggedCsv", [](const std::string& d) { return "route --logits " + file(d, "r.csv", "1,2,3\n4,5\n"); }, 2,
       {"r.csv", "line 2", "expected 3 values"}},
      {"RouteEmptyCsv", [](const std::string& d) { return "route --logits " + file(d, "e.csv", ""); }, 2,
       {"e.csv", "empty"}},
      {"RouteGarbageNpy", [](const std::string& d) { return "route --logits " + file(d, "g.npy", kGarbage); }, 2,
       {"g.npy", "magic"}},
      {"RouteGarbageCsv", [](const std::string& d) { return "route --logits " + file(d, "g.csv", kGarbage); }, 2,
       {"g.csv", "expected a number"}},
      {"RouteWrongExtension", [](const std::string& d) { return "route --logits " + file(d, "l.txt", "1,2\n"); }, 2,
       {"l.txt", ".npy or .csv"}},
      {"RouteNoLogits", [](const std::string&) { return "route --top-k 2"; }, 2, {"--logits"}},
      {"RouteTopKAboveColumns", [](const std::string& d) { return "route --logits " + good_npy(d) + " --top-k 9"; }, 2,
       {"--top-k", "1..8", "9"}},
      {"RouteTopKZero", [](const std::string& d) { return "route --logits " + good_npy(d) + " --top-k 0"; }, 2,
       {"--top-k: expected an integer >= 1", "got 0"}},
      {"RouteNegativeCapacityFactor",
       [](const std::string& d) { return "route --logits " + good_npy(d) + " --capacity-factor -1"; }, 2,
       {"router.capacity_factor", ">= 0"}},
      {"RouteUnreadableOut",
       [](const std::string& d) { return "route --logits " + good_npy(d) + " --out /nonexistent-dir/r.json"; }, 2,
       {"/nonexistent-dir/r.json"}},
      {"RouteOverMemoryLimit",
       [](const std::string& d) { return "route --logits " + good_npy(d) + " --memory-limit 1MiB"; }, 3,
       {"l.npy", "memory limit", "--memory-limit"}},
      // ---- config -------------------------------------------------------------------------------
      {"ConfigSetMissingKey", [](const std::string&) { return "config --set workload.batchsize=4"; }, 2,
       {"--set workload.batchsize=4", "unknown key"}},
      {"ConfigUnwritableOut", [](const std::string&) { return "config --out /nonexistent-dir/c.yaml"; }, 2,
       {"/nonexistent-dir/c.yaml"}},
      // ---- hardware -----------------------------------------------------------------------------
      {"HardwareUnknownProfile", [](const std::string&) { return "hardware no-such-gpu"; }, 2,
       {"NAME: expected a built-in profile (", "got 'no-such-gpu'"}},
      {"RunSetUnknownHardware", [](const std::string&) { return "run --set hardware=no-such-gpu" + kSmall; }, 2,
       {"--set hardware=no-such-gpu: hardware: expected a built-in profile (", "h100-sxm"}},
      {"ValidateUnknownHardware", [](const std::string&) { return "validate --hardware no-such-gpu"; }, 2,
       {"--hardware: expected a built-in profile (", "got 'no-such-gpu'"}},
      {"HardwareWrongTypeInProfile",
       [](const std::string& d) {
         return "hardware " + file(d, "hw.yaml", "name: x\npeak_tflops: {bf16: 100}\nmemory_bandwidth_gbs: fast\n"
                                                 "sm_count: 10\n");
       },
       2, {"hw.yaml", "memory_bandwidth_gbs"}},
      {"HardwareBadFormat", [](const std::string&) { return "hardware h100-sxm --format csv"; }, 2, {"--format"}},
      // ---- check --------------------------------------------------------------------------------
      {"CheckNoFiles", [](const std::string&) { return "check"; }, 2, {"at least one experiment file"}},
      {"CheckUnknownMetric",
       [](const std::string& d) { return "check " + file(d, "c.yaml", "expect: {imbalanze: {max: 2}}\n"); }, 2,
       {"c.yaml:1", "expect.imbalanze", "unknown key"}},
      {"CheckBaselineNotJson",
       [](const std::string& d) {
         return "check " + file(d, "c.yaml", "workload: {batch: 64}\n") + " --baseline " + file(d, "b.json", kGarbage);
       },
       2, {"b.json", "JSON"}},
      {"CheckBaselineWrongSchema",
       [](const std::string& d) {
         return "check " + file(d, "c.yaml", "workload: {batch: 64}\n") + " --baseline " +
                file(d, "b.json", "{\"schema_version\": 7, \"strategies\": []}");
       },
       2, {"b.json", "schema_version", "expected 3"}},
      {"CheckBaselineBadLabel",
       [](const std::string& d) {
         return "check " + file(d, "c.yaml", "name: c\nworkload: {batch: 64}\n") + " --baseline " +
                file(d, "b.json",
                     "{\"schema_version\": 3, \"provenance\": {\"command\": \"run\"}, "
                     "\"experiment\": {\"name\": \"c\", \"config\": {}}, \"strategies\": "
                     "[{\"strategy\": \"token_choice capacity_factor=-1\", \"metrics\": {}}]}");
       },
       2, {"b.json", "router.capacity_factor"}},
      {"CheckBaselineDeeplyNested",  // a message that dumped the value recursed once per level and overflowed
       [](const std::string& d) {
         return "check " + file(d, "c.yaml", "name: c\n") + " --baseline " +
                file(d, "b.json", "{\"schema_version\": " + std::string(200000, '[') + std::string(200000, ']') +
                                      ", \"strategies\": []}");
       },
       2, {"b.json", "schema_version", "an array"}},
      {"CheckNegativeRtol",
       [](const std::string& d) { return "check " + file(d, "c.yaml", "name: c\n") + " --rtol -1"; }, 2,
       {"--rtol"}},
      {"CheckUpdateWithoutBaseline",
       [](const std::string& d) { return "check " + file(d, "c.yaml", "name: c\n") + " --update-baseline"; }, 2,
       {"--update-baseline", "--baseline"}},
      // ---- workload files named by the experiment ---------------------------------------------------
      {"TraceExpertOutOfRange",
       [](const std::string& d) {
         file(d, "t.jsonl", "{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [8], \"weights\": [1]}\n");
         return "run --no-execute --set workload.source=trace --set workload.path=" + d + "/t.jsonl";
       },
       2, {"t.jsonl:1", "expert"}},
      {"TraceEmpty",
       [](const std::string& d) {
         file(d, "t.jsonl", "\n");
         return "run --no-execute --set workload.source=trace --set workload.path=" + d + "/t.jsonl";
       },
       2, {"t.jsonl"}},
      {"LoadProfileMissingKey",
       [](const std::string& d) {
         file(d, "p.json", "{\"k\": {\"0\": [1, 2, 3, 4, 5, 6, 7, 8]}}");
         return "run --no-execute --set workload.source=load_profile --set workload.path=" + d +
                "/p.json --set workload.profile_key=nope";
       },
       2, {"p.json", "nope"}},
      {"TraceTopKMismatch",
       [](const std::string& d) {
         file(d, "t.jsonl",
              "{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1, 2], \"weights\": [0.5, 0.5]}\n"
              "{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [1]}\n");
         return "run --no-execute --set workload.source=trace --set workload.path=" + d + "/t.jsonl";
       },
       2, {"t.jsonl:2", "model.top_k = 2", "got 1"}},
      {"TraceIsADirectory",
       [](const std::string& d) { return "run --no-execute --set workload.source=trace --set workload.path=" + d; }, 2,
       {"{dir}", "cannot read a directory"}},
      {"LoadProfileIsADirectory",
       [](const std::string& d) {
         return "run --no-execute --set workload.source=load_profile --set workload.path=" + d;
       },
       2, {"{dir}", "cannot read a directory"}},
      {"CompareGatingOnTraceWithoutLogits",
       [](const std::string& d) {
         file(d, "t.jsonl", "{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1, 2], \"weights\": [0.5, 0.5]}\n");
         return "compare --no-execute --gating all --set workload.source=trace --set workload.path=" + d + "/t.jsonl";
       },
       2, {"t.jsonl", "\"logits\""}},
      {"DumpRoutingOfALoadProfile",
       [](const std::string& d) {
         return "run " + std::string(MOESIM_SOURCE_DIR) + "/configs/olmoe-profile.yaml --no-execute --dump-routing " + d +
                "/dump.jsonl";
       },
       2, {"--dump-routing", "load_profile"}},
  };
  return cases;
}

class BadInput : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInput, FailsCleanlyWithOneLine) {
  const BadCase& c = bad_cases()[GetParam()];
  const std::string dir = testing::make_temp_dir();
  const std::string args = c.args(dir);
  const auto before = std::distance(fs::directory_iterator(dir), fs::directory_iterator());
  const auto r = run_cli(args);
  EXPECT_EQ(r.exit_code, c.exit_code) << args << "\n" << r.err;
  EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << args;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << args << "\n" << r.err;
  EXPECT_TRUE(r.out.empty()) << args << "\nstdout: " << r.out;
  for (std::string needle : c.needles) {
    const size_t at = needle.find("{dir}");
    if (at != std::string::npos) needle.replace(at, 5, dir);
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nmissing '" << needle << "' in: " << r.err;
  }
  for (const char* crash : {"terminate called", "Sanitizer", "runtime error", "internal error", "requirement failed"})
    EXPECT_EQ(r.err.find(crash), std::string::npos) << args << "\n" << r.err;
  // Nothing new in the case's folder: no output file, no temporary left by an atomic write.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), before) << args;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Matrix, BadInput, ::testing::Range<size_t>(0, bad_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return bad_cases()[info.param].name; });

TEST(BadInputMatrix, HasAtLeastThirtyCasesOverEverySubcommand) {
  EXPECT_GE(bad_cases().size(), 30u);
  for (const char* cmd : {"run ", "compare ", "route ", "config ", "hardware ", "check"}) {
    const bool covered = std::any_of(bad_cases().begin(), bad_cases().end(), [&](const BadCase& c) {
      const std::string dir = testing::make_temp_dir();
      const bool hit = c.args(dir).rfind(cmd, 0) == 0;
      fs::remove_all(dir);
      return hit;
    });
    EXPECT_TRUE(covered) << cmd;
  }
}

// An unknown hardware profile names where the name was given (the --set, the experiment file's line, the
// hardware command's argument, validate's option; never a made-up file) and what it may be.
TEST(BadInputMatrix, UnknownHardwareNamesWhereItWasGiven) {
  const std::string dir = testing::make_temp_dir();
  const std::string exp = file(dir, "exp.yaml", "name: x\nhardware: nosuch\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run --set hardware=nosuch" + kSmall, "moesim run: --set hardware=nosuch: hardware: "},
      {"run " + exp + kSmall, "moesim run: " + exp + ":2: hardware: "},
      {"compare " + exp + " --set hardware=nosuch" + kSmall, "moesim compare: --set hardware=nosuch: hardware: "},
      {"hardware nosuch", "moesim hardware: NAME: "},
      {"validate --hardware nosuch", "moesim validate: --hardware: "},
  };
  for (const auto& [args, origin] : cases) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind(origin + "expected a built-in profile (a10, ", 0), 0u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("h100-sxm"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(") or a readable profile YAML file, got 'nosuch'"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("command-line"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("<built-in>"), std::string::npos) << r.err;
  }
  fs::remove_all(dir);
}

// A failed run leaves an existing --out file as it was; a successful one replaces it whole.
TEST(BadInputMatrix, FailedRunKeepsExistingOutput) {
  const std::string dir = testing::make_temp_dir();
  const std::string out = dir + "/r.json";
  write_text(out, "previous\n");
  const auto bad = run_cli("compare --gating all --set model.top_k=99 --format json --out " + out + kSmall);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_EQ(testing::read_text(out), "previous\n");
  const auto res = run_cli("route --logits " + good_npy(dir) + " --memory-limit 1MiB --out " + out);
  EXPECT_EQ(res.exit_code, 3) << res.err;
  EXPECT_EQ(testing::read_text(out), "previous\n");
  fs::remove_all(dir);
}

// ---- fuzz seeds and findings, replayed -----------------------------------------------------------------
std::vector<std::string> files_under(const std::string& folder) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return out;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.is_regular_file()) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class FuzzRegression : public ::testing::TestWithParam<std::string> {};

TEST_P(FuzzRegression, SeedsAndFindingsReadCleanly) {
  const std::string root = std::string(MOESIM_SOURCE_DIR) + "/tests/fuzz/";
  std::vector<std::string> inputs = files_under(root + "corpus/" + GetParam());
  const std::vector<std::string> findings = files_under(root + "regressions/" + GetParam());
  inputs.insert(inputs.end(), findings.begin(), findings.end());
  EXPECT_FALSE(inputs.empty()) << "no seeds for " << GetParam();
  for (const std::string& path : inputs) {
    const std::string bytes = testing::read_text(path);
    fuzz::current_input() = path;  // named by a finding's abort message
    fuzz::run_target(GetParam(), reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  fuzz::current_input().clear();
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegression, ::testing::ValuesIn(fuzz::target_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name;  // load_profile -> LoadProfile
                           bool upper = true;
                           for (char c : info.param) {
                             if (c == '_') {
                               upper = true;
                               continue;
                             }
                             name.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
                             upper = false;
                           }
                           return name;
                         });

}  // namespace
}  // namespace moesim
