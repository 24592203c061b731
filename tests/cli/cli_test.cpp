// End-to-end tests of the moesim binary: each subcommand's output and exit codes (docs/design.md "Exit
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
  EXPECT_EQ(j["schema_version"], 3);
  const auto& s = j["strategies"][0];
  // The headline sums the loads and drops over the run's batches: N k each.
  const auto load = s["metrics"]["load"].get<std::vector<int64_t>>();
  const int64_t kept = std::accumulate(load.begin(), load.end(), int64_t{0});
  const int64_t batches = j["workload"]["batches"].get<int64_t>();
  EXPECT_EQ(kept + s["metrics"]["dropped"].get<int64_t>(), 256 * 2 * batches);  // sum(load) + dropped == N*k
  const auto last = s["last_record_metrics"]["load"].get<std::vector<int64_t>>();
  EXPECT_EQ(std::accumulate(last.begin(), last.end(), int64_t{0}) + s["last_record_metrics"]["dropped"].get<int64_t>(),
            256 * 2);
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

// compare and sweep model unless --measure; run executes unless --no-execute; all three take both flags, and
// refuse both at once; --verify checks the executed layer, so it runs it (and refuses --no-execute).
TEST(Cli, ExecutionFlagsAreTheSameInEveryCommand) {
  auto measured = [](const std::string& args) {
    const auto r = run_cli(args + " --format json" + kSmall);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    return j["strategies"][0].contains("measured");
  };
  EXPECT_FALSE(measured("compare"));
  EXPECT_FALSE(measured("compare --no-execute"));
  EXPECT_TRUE(measured("compare --measure"));
  EXPECT_TRUE(measured("compare --verify"));
  EXPECT_TRUE(measured("run"));
  EXPECT_TRUE(measured("run --measure"));
  EXPECT_FALSE(measured("run --no-execute"));
  for (const char* cmd : {"run", "compare"}) {
    const auto both = run_cli(std::string(cmd) + " --measure --no-execute" + kSmall);
    EXPECT_EQ(both.exit_code, 2) << cmd;
    EXPECT_NE(both.err.find("--measure, --no-execute: expected one of them"), std::string::npos) << both.err;
    const auto verify = run_cli(std::string(cmd) + " --verify --no-execute" + kSmall);
    EXPECT_EQ(verify.exit_code, 2) << cmd;
    EXPECT_NE(verify.err.find("--verify: expected a run of the executed layer"), std::string::npos) << verify.err;
  }
  const std::string sweep = "sweep --vary workload.batch=64,128 --format json" + kSmall;
  const auto s = run_cli(sweep + " --no-execute");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(testing::without_provenance(run_cli(sweep).out), testing::without_provenance(s.out));  // the default
  EXPECT_EQ(run_cli(sweep + " --measure --no-execute").exit_code, 2);
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

TEST(Cli, RoutePrintsEveryFormat) {
  // CSV one row of scalars (the arrays are JSON's), Markdown a table of them: neither is the plain text.
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/l.csv", "1,0,2,0\n0,3,0,1\n2,2,0,1\n");
  const auto csv = run_cli("route --logits " + dir + "/l.csv --top-k 2 --format csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("file,num_tokens,num_experts,top_k,gating,capacity_factor,", 0), 0u) << csv.out;
  EXPECT_NE(csv.out.find(",imbalance,"), std::string::npos) << csv.out;
  EXPECT_NE(csv.out.find(",max_vio,"), std::string::npos) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 2);
  EXPECT_EQ(csv.out.find(",-"), std::string::npos) << csv.out;
  const auto md = run_cli("route --logits " + dir + "/l.csv --top-k 2 --format markdown");
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("| metric | value |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| imbalance | "), std::string::npos) << md.out;
}

TEST(Cli, RouteRenormalizeFlagsBothAct) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/l.npy", encode_npy_f32(synthetic_logits(20, 4, 1.0, 5), 20, 4));
  auto renormalize = [&](const std::string& flags) {
    const auto r = run_cli("route --logits " + dir + "/l.npy --format json " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["experiment"]["config"]["router"]["renormalize"].get<bool>();
  };
  EXPECT_TRUE(renormalize("--renormalize"));
  EXPECT_FALSE(renormalize("--no-renormalize"));
  EXPECT_FALSE(renormalize("--renormalize --set router.renormalize=false"));  // --set comes last
  const auto both = run_cli("route --logits " + dir + "/l.npy --renormalize --no-renormalize");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--no-renormalize"), std::string::npos) << both.err;
}

TEST(Cli, RouteReportsTheBiasOfMegatronAndExact) {
  // The 6 x 3 case of docs/routing-semantics.md: k 1, cf 1.0 (C = 2), demand (4, 2, 0), kept (2, 2, 0).
  std::vector<float> logits(6 * 3, 0.0f);
  for (int t = 0; t < 6; ++t) logits[t * 3 + (t < 4 ? 0 : 1)] = 2.0f;
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/l.npy", encode_npy_f32(logits, 6, 3));
  auto bias = [&](const std::string& semantics) {
    const auto r = run_cli("route --logits " + dir + "/l.npy --gating aux_free_bias --top-k 1 --capacity-factor 1"
                           " --format json --set router.bias_update_rate=0.001 --set router.semantics=" + semantics);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["expert_bias_updates"].size(), 1u);
    EXPECT_EQ(j["expert_bias_updates"][0]["bias"], j["expert_bias"]);
    return j["expert_bias"].get<std::vector<float>>();
  };
  EXPECT_EQ(bias("megatron"), (std::vector<float>{-0.001f, -0.001f, 0.001f}));
  EXPECT_EQ(bias("exact"), (std::vector<float>{-0.001f, 0.0f, 0.001f}));
}

TEST(Cli, RunReportsTheBiasAfterEveryUpdate) {
  const auto r = run_cli("compare --gating aux_free_bias --no-execute --format json --set workload.batch=256"
                         " --set workload.batches=4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto row = nlohmann::json::parse(r.out)["strategies"][0];
  const auto& updates = row["expert_bias_updates"];
  ASSERT_EQ(updates.size(), 4u);
  for (size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(updates[b]["batch"], b);
    EXPECT_EQ(updates[b]["layer"], 0);
    EXPECT_EQ(updates[b]["bias"].size(), 8u);
  }
  EXPECT_NE(updates[0]["bias"], updates[3]["bias"]);
  EXPECT_EQ(updates[3]["bias"], row["expert_bias"]);
  // A decoder run: one update per layer and step, each naming its layer.
  const auto d = run_cli("run --format json --records --no-execute --set router.gating=aux_free_bias --set workload.source=decoder"
                         " --set workload.batch=2 --set workload.prompt_len=4 --set workload.decode_steps=2"
                         " --set execute.layers=2 --set execute.hidden=32 --set execute.ffn=64");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const auto drow = nlohmann::json::parse(d.out)["strategies"][0];
  ASSERT_EQ(drow["expert_bias_updates"].size(), drow["records"].size());
  for (size_t i = 0; i < drow["records"].size(); ++i) {
    EXPECT_EQ(drow["expert_bias_updates"][i]["layer"], drow["records"][i]["layer"]);
    EXPECT_EQ(drow["expert_bias_updates"][i]["step"], drow["records"][i]["step"]);
  }
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
      {"run --no-execute --out /nonexistent-dir/x.json --set workload.batch=256", "/nonexistent-dir/x.json"},
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
  EXPECT_EQ(nlohmann::json::parse(testing::read_text(out))["schema_version"], 3);
}

}  // namespace
}  // namespace moesim
