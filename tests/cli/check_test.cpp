// `moesim check` exits 0 / 1 / 2 exactly as specified: a met bound, a violated bound, baseline drift
// in the bad and in the good direction, and malformed input (expect block, baseline).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

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

  // Worse: more skew raises imbalance above the baseline. The baseline is of another experiment, so the
  // changed key has to be allowed.
  const std::string allow = " --allow-change workload.skew";
  const auto worse = run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set workload.skew=3" + allow);
  EXPECT_EQ(worse.exit_code, 1) << worse.out << worse.err;
  EXPECT_NE(worse.out.find("imbalance"), std::string::npos) << worse.out;

  // Better: no skew lowers imbalance; lower is better, so no imbalance failure. Entropy rises too.
  const auto better = run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set workload.skew=0" + allow);
  EXPECT_EQ(better.out.find(": imbalance ="), std::string::npos) << better.out;

  // A generous tolerance absorbs the worse run's drift in imbalance.
  const auto tolerant =
      run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set workload.skew=1.6 --rtol 10" + allow);
  EXPECT_EQ(tolerant.exit_code, 0) << tolerant.out << tolerant.err;
}

// A baseline is compared only with a run of the same effective experiment: a changed key, a profile
// whose values changed under the same name, or a workload file whose bytes changed exits 2 naming it.
TEST(Check, ForeignBaselineIsRefusedNamingTheKey) {
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/hw.yaml", "base: h100-sxm\nefficiency_bw: 0.8\n");
  write_text(dir + "/logits.csv", "3,1,0,0\n2,2,1,0\n0,1,4,1\n1,0,0,5\n2,2,2,2\n0,3,1,0\n");
  write_text(dir + "/exp.yaml", std::string(kBase) + "hardware: " + dir + "/hw.yaml\n");
  write_text(dir + "/file.yaml",
             "name: from_file\nmodel: {experts: 4, top_k: 1}\nworkload: {source: logits, path: logits.csv}\n"
             "router: {capacity_factor: 0}\nexecute: {enabled: false}\n");
  const std::string baseline = dir + "/baseline.json", file_baseline = dir + "/file_baseline.json";
  ASSERT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --update-baseline").exit_code, 0);
  ASSERT_EQ(run_cli("check " + dir + "/file.yaml --baseline " + file_baseline + " --update-baseline").exit_code, 0);
  ASSERT_EQ(run_cli("check " + dir + "/file.yaml --baseline " + file_baseline).exit_code, 0);

  const auto key = run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set router.capacity_factor=2");
  EXPECT_EQ(key.exit_code, 2) << key.out << key.err;
  EXPECT_NE(key.err.find("router.capacity_factor is 0 there and 2 here"), std::string::npos) << key.err;
  EXPECT_NE(key.err.find("--allow-change router.capacity_factor"), std::string::npos) << key.err;
  // A whole section may be allowed; a key that is not in the experiment may not.
  EXPECT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set router.capacity_factor=2 "
                    "--allow-change router").exit_code, 1);
  const auto typo = run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --allow-change router.capacity");
  EXPECT_EQ(typo.exit_code, 2) << typo.out << typo.err;
  EXPECT_NE(typo.err.find("--allow-change: expected a key"), std::string::npos) << typo.err;
  // Keys that cannot move a gated metric are not part of the identity.
  EXPECT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + baseline + " --set execute.repeats=5").exit_code, 0);

  write_text(dir + "/hw.yaml", "base: h100-sxm\nefficiency_bw: 0.7\n");
  const auto hw = run_cli("check " + dir + "/exp.yaml --baseline " + baseline);
  EXPECT_EQ(hw.exit_code, 2) << hw.out << hw.err;
  EXPECT_NE(hw.err.find("hardware (the profile's values)"), std::string::npos) << hw.err;
  write_text(dir + "/hw.yaml", "base: h100-sxm\nefficiency_bw: 0.8\ndescription: a note edited\n");
  EXPECT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + baseline).exit_code, 0);

  write_text(dir + "/logits.csv", "3,1,0,0\n2,2,1,0\n0,1,4,1\n1,0,0,5\n2,2,2,2\n0,3,1,9\n");
  const auto file = run_cli("check " + dir + "/file.yaml --baseline " + file_baseline);
  EXPECT_EQ(file.exit_code, 2) << file.out << file.err;
  EXPECT_NE(file.err.find("workload.path (the file's contents)"), std::string::npos) << file.err;

  // A baseline with no run of the experiment is refused, not passed with nothing compared.
  std::string other_text = kBase;
  other_text.replace(other_text.find("checked"), 7, "other");
  write_text(dir + "/other.yaml", other_text);
  const auto other = run_cli("check " + dir + "/other.yaml --baseline " + baseline);
  EXPECT_EQ(other.exit_code, 2) << other.out << other.err;
  EXPECT_NE(other.err.find("expected a run of experiment 'other'"), std::string::npos) << other.err;
}

// The compared metrics: the default set (no z_loss), --metrics, the expect: block's; counts compare
// exactly whatever the tolerance, floats within the default rtol.
TEST(Check, ComparedMetricsAndTolerances) {
  const std::string dir = testing::make_temp_dir();
  const std::string dropping =
      "name: dropping\nworkload: {batch: 512, skew: 1.5, seed: 3}\nrouter: {capacity_factor: 1}\nexecute: {enabled: false}\n";
  write_text(dir + "/exp.yaml", dropping);
  const std::string recorded = dir + "/recorded.json";
  ASSERT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + recorded + " --update-baseline").exit_code, 0);
  const nlohmann::json base = nlohmann::json::parse(testing::read_text(recorded));
  const nlohmann::json& m = base["strategies"][0]["metrics"];
  ASSERT_GT(m["dropped"].get<double>(), 1.0) << m.dump();
  auto edited = [&](const std::string& name, const std::string& metric, double value) {
    nlohmann::json b = base;
    b["strategies"][0]["metrics"][metric] = value;
    write_text(dir + "/" + name, b.dump());
    return dir + "/" + name;
  };
  // z_loss depends on the logits only: a better baseline z_loss is not compared by default.
  const std::string z = edited("z.json", "z_loss", m["z_loss"].get<double>() / 2);
  EXPECT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + z).exit_code, 0);
  const auto z_named = run_cli("check " + dir + "/exp.yaml --baseline " + z + " --metrics z_loss");
  EXPECT_EQ(z_named.exit_code, 1) << z_named.out;
  EXPECT_NE(z_named.out.find(": z_loss = "), std::string::npos) << z_named.out;
  // A count one below the run's fails even under a tolerance that would absorb it as a float.
  const std::string d = edited("d.json", "dropped", m["dropped"].get<double>() - 1);
  const auto dropped = run_cli("check " + dir + "/exp.yaml --baseline " + d + " --metrics dropped --rtol 1");
  EXPECT_EQ(dropped.exit_code, 1) << dropped.out << dropped.err;
  EXPECT_NE(dropped.out.find("(exact count)"), std::string::npos) << dropped.out;
  // imbalance 1e-9 relative better in the baseline: rounding noise, under the default rtol 1e-6; 1e-4 is not.
  const double imb = m["imbalance"].get<double>();
  EXPECT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + edited("i9.json", "imbalance", imb * (1 - 1e-9))).exit_code, 0);
  const auto i4 = run_cli("check " + dir + "/exp.yaml --baseline " + edited("i4.json", "imbalance", imb * (1 - 1e-4)));
  EXPECT_EQ(i4.exit_code, 1) << i4.out;
  EXPECT_NE(i4.out.find("(rtol 1e-06, atol 1e-12)"), std::string::npos) << i4.out;
  // An expect: block names the compared metrics: here only drop_rate, so the imbalance edit passes.
  write_text(dir + "/exp.yaml", dropping + "expect:\n  - {metric: drop_rate, max: 0.9}\n");
  EXPECT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + dir + "/i4.json").exit_code, 0);
}

// A baseline written by another command, or by an older moesim, exits 2 naming what it is.
TEST(Check, BaselineOfAnotherCommandOrSchemaIsExitTwo) {
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/exp.yaml", kBase);
  const auto sweep = run_cli("sweep " + dir + "/exp.yaml --vary workload.batch=64,128 --format json --out " + dir + "/s.json");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const auto s = run_cli("check " + dir + "/exp.yaml --baseline " + dir + "/s.json");
  EXPECT_EQ(s.exit_code, 2) << s.out << s.err;
  EXPECT_NE(s.err.find("s.json: provenance.command: expected the JSON of moesim run, compare or check, got a result "
                       "of moesim sweep"), std::string::npos) << s.err;
  const std::string b = dir + "/b.json";
  ASSERT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + b + " --update-baseline").exit_code, 0);
  nlohmann::json old = nlohmann::json::parse(testing::read_text(b));
  old["schema_version"] = 1;
  write_text(dir + "/old.json", old.dump());
  const auto o = run_cli("check " + dir + "/exp.yaml --baseline " + dir + "/old.json");
  EXPECT_EQ(o.exit_code, 2) << o.out << o.err;
  EXPECT_NE(o.err.find("old.json: schema_version: expected 3, got 1 (an older moesim wrote it"), std::string::npos) << o.err;
  const std::string text = testing::read_text(b);
  write_text(dir + "/cut.json", text.substr(0, text.size() / 2));
  const auto cut = run_cli("check " + dir + "/exp.yaml --baseline " + dir + "/cut.json");
  EXPECT_EQ(cut.exit_code, 2) << cut.out << cut.err;
  EXPECT_NE(cut.err.find("cut.json: expected JSON"), std::string::npos) << cut.err;
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

TEST(Check, TheGatedValueIsTheMeanOverTheBatchesAndAFlagChoosesAnother) {
  // 4 batches: the baseline's metrics are their headline (the mean of imbalance), the last batch under
  // last_record_metrics; --aggregate reads the others, and names them in a failure.
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/exp.yaml", "name: four\nworkload: {batch: 256, batches: 4, skew: 1.5, seed: 3}\n"
                                "router: {gating: aux_free_bias, bias_update_rate: 0.05}\nexecute: {enabled: false}\n");
  const std::string b = dir + "/b.json";
  ASSERT_EQ(run_cli("check " + dir + "/exp.yaml --baseline " + b + " --update-baseline").exit_code, 0);
  const nlohmann::json j = nlohmann::json::parse(testing::read_text(b));
  const auto& s = j["strategies"][0];
  const std::vector<double> series = s["series"]["imbalance"].get<std::vector<double>>();
  ASSERT_EQ(series.size(), 4u);
  const double mean = (series[0] + series[1] + series[2] + series[3]) / 4;
  EXPECT_DOUBLE_EQ(s["metrics"]["imbalance"].get<double>(), mean);
  EXPECT_DOUBLE_EQ(s["aggregates"]["imbalance"]["mean"].get<double>(), mean);
  EXPECT_DOUBLE_EQ(s["last_record_metrics"]["imbalance"].get<double>(), series[3]);
  EXPECT_NE(series[3], mean);  // the bias moves: the last batch is not the mean
  for (const char* agg : {"value", "last", "mean", "p50", "p95", "max"}) {
    const auto r = run_cli("check " + dir + "/exp.yaml --baseline " + b + " --aggregate " + agg);
    EXPECT_EQ(r.exit_code, 0) << agg << ": " << r.out << r.err;
  }
  // A worse last batch fails under last, named imbalance.last; a bad aggregate is refused.
  const auto worse = run_cli("check " + dir + "/exp.yaml --baseline " + b +
                             " --aggregate last --set router.bias_update_rate=0 --allow-change router.bias_update_rate");
  EXPECT_EQ(worse.exit_code, 1) << worse.out << worse.err;
  EXPECT_NE(worse.out.find("aux_free_bias: imbalance.last = "), std::string::npos) << worse.out;
  const auto bad = run_cli("check " + dir + "/exp.yaml --baseline " + b + " --aggregate median");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--aggregate: expected value, last, mean, p50, p95 or max, got 'median'"), std::string::npos)
      << bad.err;
  // The table reads the same headline as the baseline.
  const auto table = run_cli("run " + dir + "/exp.yaml --format csv");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const nlohmann::json run = nlohmann::json::parse(run_cli("run " + dir + "/exp.yaml --format json").out);
  EXPECT_DOUBLE_EQ(run["strategies"][0]["metrics"]["imbalance"].get<double>(), mean);
}

TEST(Check, ItsReportInEveryFormat) {
  const std::string dir = testing::make_temp_dir();
  write_text(dir + "/bad.yaml", std::string(kBase) + "expect:\n  imbalance: {max: 1.05}\n");
  const auto json = run_cli("check " + dir + "/bad.yaml --format json");
  EXPECT_EQ(json.exit_code, 1);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_FALSE(j["passed"].get<bool>());
  ASSERT_EQ(j["failures"].size(), 1u);
  EXPECT_EQ(j["failures"][0]["metric"], "imbalance");
  EXPECT_EQ(j["failures"][0]["strategy"], "token_choice");
  EXPECT_EQ(j["failures"][0]["bound"], "max 1.05");
  const auto csv = run_cli("check " + dir + "/bad.yaml --format csv");
  EXPECT_EQ(csv.exit_code, 1);
  EXPECT_EQ(csv.out.rfind("file,strategy,config_digest,baseline_strategy,baseline_config_digest,metric,value,baseline,"
                          "bound,passed\n", 0), 0u) << csv.out;
  EXPECT_NE(csv.out.find(",imbalance,"), std::string::npos) << csv.out;
  EXPECT_NE(csv.out.find(",max 1.05,false\n"), std::string::npos) << csv.out;
  const auto md = run_cli("check " + dir + "/bad.yaml --format markdown --out " + dir + "/r.md");
  EXPECT_EQ(md.exit_code, 1);
  const std::string r = testing::read_text(dir + "/r.md");
  EXPECT_NE(r.find("| token_choice | fnv1a64:"), std::string::npos) << r;
  EXPECT_NE(r.find("| expect: | imbalance |"), std::string::npos) << r;
  // JSON names what it compared: the strategy, the config's digest, each metric with its bound.
  ASSERT_EQ(j["compared"].size(), 1u);
  EXPECT_EQ(j["compared"][0]["strategy"], "token_choice");
  EXPECT_EQ(j["compared"][0]["against"], "expect");
  EXPECT_EQ(j["compared"][0]["config_digest"].get<std::string>().rfind("fnv1a64:", 0), 0u);
  EXPECT_EQ(j["compared"][0]["metrics"][0]["bound"], "max 1.05");
  EXPECT_FALSE(j["compared"][0]["metrics"][0]["passed"].get<bool>());
  EXPECT_EQ(run_cli("check " + dir + "/bad.yaml --format yaml").exit_code, 2);
}

// The gate tests the change: a baseline recorded with one gating, the file changed to another and the change
// allowed, check runs the file's new gating (not the baseline's again) and compares it with the baseline's
// strategy, naming both, with the config digest of each. aux_free_bias balances these skewed batches better
// than plain token choice, so the changed router is worse on the gated metrics: exit 1, the metrics named.
TEST(Check, AnAllowedGatingChangeRunsTheFilesStrategyAgainstTheBaselines) {
  const std::string dir = testing::make_temp_dir();
  const std::string text =
      "name: my-router\nmodel: {experts: 8, top_k: 2}\n"
      "router: {gating: aux_free_bias, capacity_factor: 1.25, groups: 1, topk_groups: 1}\n"
      "workload: {source: synthetic, batch: 2048, batches: 4, seed: 11, skew: 0.8}\nexecute: {enabled: false}\n";
  write_text(dir + "/r.yaml", text);
  const std::string baseline = dir + "/b.json";
  ASSERT_EQ(run_cli("check " + dir + "/r.yaml --baseline " + baseline + " --update-baseline").exit_code, 0);
  std::string changed = text;
  changed.replace(changed.find("aux_free_bias"), 13, "token_choice");
  write_text(dir + "/r.yaml", changed);
  EXPECT_EQ(run_cli("check " + dir + "/r.yaml --baseline " + baseline).exit_code, 2);
  const auto gate = run_cli("check " + dir + "/r.yaml --baseline " + baseline + " --allow-change router.gating");
  EXPECT_EQ(gate.exit_code, 1) << gate.out << gate.err;
  for (const char* metric : {"imbalance", "drop_rate"})
    EXPECT_NE(gate.out.find(std::string("FAIL ") + dir + "/r.yaml: token_choice: " + metric + " = "), std::string::npos)
        << gate.out;
  EXPECT_NE(gate.out.find("(the baseline's aux_free_bias; rtol"), std::string::npos) << gate.out;
  // The compared line (wrapped at 120 columns) names both strategies with their config digests.
  const std::string compared = std::regex_replace(gate.out, std::regex("\\s+"), " ");
  EXPECT_NE(compared.find("r.yaml: token_choice (config "), std::string::npos) << gate.out;
  EXPECT_NE(compared.find("b.json: aux_free_bias (config "), std::string::npos) << gate.out;
  EXPECT_EQ(gate.out.find("FAIL " + dir + "/r.yaml: aux_free_bias"), std::string::npos) << gate.out;
  const auto json = run_cli("check " + dir + "/r.yaml --baseline " + baseline + " --allow-change router.gating "
                            "--format json");
  EXPECT_EQ(json.exit_code, 1);
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_FALSE(j["passed"].get<bool>());
  ASSERT_EQ(j["compared"].size(), 1u);
  const nlohmann::json& c = j["compared"][0];
  EXPECT_EQ(c["strategy"], "token_choice");
  EXPECT_EQ(c["baseline_strategy"], "aux_free_bias");
  EXPECT_NE(c["config_digest"], c["baseline_config_digest"]);
  const nlohmann::json b = nlohmann::json::parse(testing::read_text(baseline));
  for (const auto& m : c["metrics"]) {
    // Each metric's baseline is the baseline's aux_free_bias value.
    EXPECT_EQ(m["baseline"], b["strategies"][0]["metrics"][m["metric"].get<std::string>()]) << m.dump();
    if (m["metric"] == "imbalance" || m["metric"] == "drop_rate") EXPECT_FALSE(m["passed"].get<bool>()) << m.dump();
  }
  // The unchanged file compared with its own baseline: the same digest on both sides.
  write_text(dir + "/r.yaml", text);
  const auto same = run_cli("check " + dir + "/r.yaml --baseline " + baseline + " --format json");
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  const nlohmann::json s = nlohmann::json::parse(same.out);
  EXPECT_EQ(s["compared"][0]["config_digest"], s["compared"][0]["baseline_config_digest"]);
  EXPECT_EQ(s["compared"][0]["strategy"], "aux_free_bias");
  // A baseline of several strategies side by side (compare --gating) keeps comparing each with its own row.
  const std::string side = dir + "/side.json";
  ASSERT_EQ(run_cli("compare " + dir + "/r.yaml --gating aux_free_bias,token_choice --no-execute --format json --out " +
                    side).exit_code, 0);
  write_text(dir + "/r.yaml", changed);
  const auto pairs = run_cli("check " + dir + "/r.yaml --baseline " + side + " --allow-change router.gating --format json");
  EXPECT_EQ(pairs.exit_code, 0) << pairs.out << pairs.err;
  const nlohmann::json p = nlohmann::json::parse(pairs.out);
  ASSERT_EQ(p["compared"].size(), 2u);
  for (const auto& x : p["compared"]) EXPECT_EQ(x["strategy"], x["baseline_strategy"]);
}

}  // namespace
}  // namespace moesim
