// Tests `moesim serve`: the JSON's stable keys, the throughput and latency figures consistent with the run's own
// counts, balanced routing costing nothing against itself, a request file read in the Azure trace's format, the
// closed loop, and bad options exiting 2 with one line naming the option. Host only.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::CliResult;
using testing::run_cli;

const std::string kDeepSeek = std::string("serve ") + MOESIM_SOURCE_DIR +
                              "/configs/deepseek-v3.yaml --set placement.devices=16 --requests 96 --isl 512 --osl 32 "
                              "--max-batch 8 --max-num-tokens 1024";

TEST(ServeCli, JsonKeysAndTheirArithmetic) {
  const CliResult r = run_cli(kDeepSeek + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* k : {"output_tokens_per_s_per_gpu", "total_tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_ms",
                        "tpot_ms", "e2e_ms", "balance_ratio", "counterfactual", "kv_capacity_tokens_per_gpu"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"mean", "p50", "p90", "p99"}) {
    EXPECT_TRUE(j["ttft_ms"].contains(k)) << k;
    EXPECT_TRUE(j["tpot_ms"].contains(k)) << k;
  }
  EXPECT_TRUE(j["balance_ratio"].contains("mean"));
  EXPECT_TRUE(j["counterfactual"]["balanced_routing"].contains("output_tokens_per_s_per_gpu"));
  EXPECT_TRUE(j["counterfactual"]["balanced_attention"].contains("output_tokens_per_s_per_gpu"));
  // 96 requests of 32 output tokens over the run's duration and 16 GPUs.
  EXPECT_EQ(j["output_tokens"].get<int64_t>(), 96 * 32);
  EXPECT_NEAR(j["output_tokens_per_s_per_gpu"].get<double>(), 96.0 * 32 / j["duration_s"].get<double>() / 16, 1e-6);
  EXPECT_NEAR(j["total_tokens_per_s_per_gpu"].get<double>(), 96.0 * (512 + 32) / j["duration_s"].get<double>() / 16,
              1e-6);
  const auto& t = j["tpot_ms"];
  EXPECT_LE(t["p50"].get<double>(), t["p90"].get<double>());
  EXPECT_LE(t["p90"].get<double>(), t["p99"].get<double>());
  // The configured skew slows the run: balanced routing is faster.
  EXPECT_GT(j["counterfactual"]["balanced_routing"]["output_tokens_per_s_per_gpu"].get<double>(),
            j["output_tokens_per_s_per_gpu"].get<double>());
}

TEST(ServeCli, BalancedRoutingIsItsOwnCounterfactual) {
  const CliResult r = run_cli(kDeepSeek + " --routing balanced --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["counterfactual"]["balanced_routing"]["output_tokens_per_s_per_gpu"].get<double>(),
              j["output_tokens_per_s_per_gpu"].get<double>(), 1e-9);
}

TEST(ServeCli, ReadsAnAzureTraceAndRunsAClosedLoop) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/azure.csv",
                      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                      "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.2000000,879,31\n");
  const CliResult r = run_cli(std::string("serve ") + MOESIM_SOURCE_DIR +
                              "/configs/deepseek-v3.yaml --set placement.devices=16 --max-batch 8 --max-num-tokens 1024 "
                              "--requests-file " + dir + "/azure.csv --format json --no-counterfactuals");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["requests"].get<int64_t>(), 3);
  EXPECT_EQ(j["output_tokens"].get<int64_t>(), 44 + 109 + 31);
  EXPECT_FALSE(j.contains("counterfactual"));
  // The trace spans 4.5 s of arrivals: the run lasts at least that long.
  EXPECT_GT(j["duration_s"].get<double>(), 4.5);
  const CliResult c = run_cli(kDeepSeek + " --concurrency 4 --format json --no-counterfactuals");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const nlohmann::json k = nlohmann::json::parse(c.out);
  EXPECT_EQ(k["requests"].get<int64_t>(), 96);
  // Four clients keep at most four requests in flight: a request waits for no other's prefill beyond them, so the
  // first token comes sooner than when all 96 arrive at once.
  EXPECT_LT(k["ttft_ms"]["p90"].get<double>(), nlohmann::json::parse(run_cli(kDeepSeek + " --format json --no-counterfactuals").out)["ttft_ms"]["p90"].get<double>());
}

TEST(ServeCli, HtmlIsAPageWithItsCharts) {
  const CliResult r = run_cli(kDeepSeek + " --format html");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* id : {"id=\"batch\"", "id=\"kv-use\"", "id=\"step-time\"", "id=\"balance\"", "id=\"ttft\"",
                         "id=\"tpot\""})
    EXPECT_NE(r.out.find(id), std::string::npos) << id;
  EXPECT_NE(r.out.find("moesim serve: deepseek-v3"), std::string::npos);
}

TEST(ServeCli, DisaggregatedCountsBothGroupsOfGpus) {
  const CliResult r = run_cli(std::string("serve ") + MOESIM_SOURCE_DIR +
                              "/configs/deepseek-v3.yaml --disaggregated 16:16 --requests 64 --rate 20 --isl 512 "
                              "--osl 32 --max-batch 8 --max-num-tokens 1024 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gpus"].get<int>(), 32);
  EXPECT_EQ(j["disaggregated"]["prefill_gpus"].get<int>(), 16);
  EXPECT_GT(j["disaggregated"]["kv_transfer_us_per_token"].get<double>(), 0);
  EXPECT_EQ(j["output_tokens"].get<int64_t>(), 64 * 32);
  EXPECT_NEAR(j["output_tokens_per_s_per_gpu"].get<double>(), 64.0 * 32 / j["duration_s"].get<double>() / 32, 1e-6);
  // Decode on its own GPUs: every request's tokens come at the decode step's pace.
  EXPECT_GT(j["tpot_ms"]["p50"].get<double>(), 0);
}

TEST(ServeCli, EplbOverTimeAgainstThePlanMadeOnce) {
  const CliResult r = run_cli(kDeepSeek + " --set placement.replicas=32 --rebalance-every 20 --drift-steps 5 --draws 4 "
                                          "--rate 50 --format json --no-counterfactuals");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("eplb"));
  EXPECT_EQ(j["eplb"]["rebalance_every"].get<int64_t>(), 20);
  EXPECT_EQ(j["eplb"]["draws"].get<int64_t>(), 4);
  EXPECT_EQ(j["eplb"]["replans"].get<int64_t>(), (j["steps"].get<int64_t>() - 1) / 20);
  EXPECT_GE(j["eplb"]["transfer_s"].get<double>(), 0);
  EXPECT_EQ(j["eplb"]["static_plan"]["output_tokens"].get<int64_t>(), j["output_tokens"].get<int64_t>());
  const CliResult t = run_cli(kDeepSeek + " --set placement.replicas=32 --rebalance-every 20");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("EPLB over time: "), std::string::npos) << t.out;
  // The config's placement.rebalance_every, without the flag; its ema estimator re-plans from other loads.
  const std::string keyed = kDeepSeek + " --set placement.replicas=32 --set placement.rebalance_every=20 --drift-steps 5 "
                                        "--draws 4 --rate 50 --format json --no-counterfactuals";
  const CliResult k = run_cli(keyed);
  ASSERT_EQ(k.exit_code, 0) << k.err;
  EXPECT_EQ(nlohmann::json::parse(k.out), j);
  const CliResult ema = run_cli(keyed + " --set placement.load_estimator=ema --set placement.ema_weight=1");
  ASSERT_EQ(ema.exit_code, 0) << ema.err;
  EXPECT_EQ(nlohmann::json::parse(ema.out)["eplb"]["replans"], j["eplb"]["replans"]);
}

TEST(ServeCli, TheConfigsPlacementKeysAreTheFlagsDefaults) {
  // placement.request_balance kv_tokens reads --scheduler kv_balanced, placement.attention_tp 2 reads --tp 2.
  const CliResult flags = run_cli(kDeepSeek + " --scheduler kv_balanced --tp 2 --format json --no-counterfactuals");
  const CliResult keys = run_cli(kDeepSeek + " --set placement.request_balance=kv_tokens --set placement.attention_tp=2 "
                                             "--format json --no-counterfactuals");
  ASSERT_EQ(flags.exit_code, 0) << flags.err;
  ASSERT_EQ(keys.exit_code, 0) << keys.err;
  const nlohmann::json a = nlohmann::json::parse(flags.out), b = nlohmann::json::parse(keys.out);
  EXPECT_EQ(b["scheduler"], "kv_balanced");
  EXPECT_EQ(b["tp"], 2);
  EXPECT_EQ(a, b);
}

TEST(ServeCli, DraftTokensShortenTheRunWhenAccepted) {
  const CliResult plain = run_cli(kDeepSeek + " --format json --no-counterfactuals");
  const CliResult mtp = run_cli(kDeepSeek + " --mtp-draft 1 --mtp-accept 1 --format json --no-counterfactuals");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(mtp.exit_code, 0) << mtp.err;
  const nlohmann::json a = nlohmann::json::parse(plain.out), b = nlohmann::json::parse(mtp.out);
  EXPECT_EQ(a["output_tokens"], b["output_tokens"]);
  // Every draft accepted: two tokens a decode step, so fewer steps for the same tokens.
  EXPECT_LT(b["steps"].get<int64_t>(), a["steps"].get<int64_t>());
}

TEST(ServeCli, BadOptionsExit2WithOneLine) {
  for (const std::string& bad :
       {std::string(" --scheduler fastest"), std::string(" --kv-dtype int2"), std::string(" --tp 3"),
        std::string(" --max-num-tokens 4"), std::string(" --isl 0"), std::string(" --osl lognormal:x:1"),
        std::string(" --concurrency 4 --rate 2"), std::string(" --requests-file /nonexistent.csv"),
        std::string(" --mem-fraction 0.05"), std::string(" --disaggregated 16"), std::string(" --disaggregated 0:8"),
        std::string(" --disaggregated 16:16 --concurrency 4"), std::string(" --rebalance-every 10"),
        std::string(" --drift-steps 5"), std::string(" --mtp-draft 1 --mtp-accept 2"),
        std::string(" --mtp-accept 0.5"), std::string(" --mtp-draft 200"),
        std::string(" --requests-file /dev/null --rate 3"), std::string(" --search --vary placement.devices=16 --scheduler kv_balanced"),
        std::string(" --search --vary placement.devices=16 --disaggregated 8:8"), std::string(" --tp 0"),
        std::string(" --set placement.attention_tp=3"),
        std::string(" --search --vary placement.devices=16 --mtp-draft 1 --mtp-accept 2")}) {
    const CliResult r = run_cli(kDeepSeek + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << bad << ": " << r.err;
  }
}

// An attention TP that does not divide the decode GPUs is named where it came from: the config key (checked against
// placement.devices when the config is read), or --tp.
TEST(ServeCli, AnAttentionTpThatDoesNotDivideNamesItsSource) {
  const std::string disagg = " --disaggregated 8:6";
  const CliResult key = run_cli(kDeepSeek + " --set placement.devices=16 --set placement.attention_tp=4" + disagg);
  EXPECT_EQ(key.exit_code, 2) << key.err;
  EXPECT_NE(key.err.find("placement.attention_tp: expected a divisor of the expert-parallel GPUs (6), got 4"),
            std::string::npos) << key.err;
  const CliResult flag = run_cli(kDeepSeek + " --tp 4" + disagg);
  EXPECT_EQ(flag.exit_code, 2) << flag.err;
  EXPECT_NE(flag.err.find("--tp: expected a divisor of the expert-parallel GPUs (6), got 4"), std::string::npos)
      << flag.err;
}

}  // namespace
}  // namespace moesim
