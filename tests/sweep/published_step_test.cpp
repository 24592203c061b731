// Tests src/sweep/published_step: the step tables' reader (the exact header, one-line errors naming the line and
// the column), the shipped tables modeled (every row finite, ServingFit holding the fit that `validate --published`
// makes now), the issue's headline checks reported, and the command's section. Host only.
#include "src/sweep/published_step.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_internal.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::CliResult;
using testing::run_cli;

std::string row(const std::string& quantity, const std::string& measured, const std::string& unit) {
  return "decode,deepseek-v3,h100-sxm,8,8,8,8,1,32,32,1024,100,1024,0,,two_batch,low_latency,fp8,bf16,fp8,0,balanced," +
         quantity + "," + measured + "," + unit + ",src,note\n";
}

TEST(PublishedStep, ParsesTheIssuesHeader) {
  const StepTable t = parse_step_csv(std::string(kStepHeader) + "\n" + row("layer_ms", "0.5", "ms"), "t.csv");
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0].requests_per_gpu, 32);
  EXPECT_EQ(t.rows[0].overlap, A2aOverlap::two_batch);
  EXPECT_EQ(t.rows[0].quantity, StepQuantity::layer_ms);
  EXPECT_TRUE(t.rows[0].fitted);
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_step_csv(text, "t.csv");
    ADD_FAILURE() << "no error for " << text;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(PublishedStep, BadCellsNameTheLineAndColumn) {
  const std::string h = std::string(kStepHeader) + "\n";
  expect_error("phase,model,gpu\n", "t.csv:1: header");
  expect_error(h + row("layer_ms", "0.5", "s"), "t.csv:2: unit");
  expect_error(h + row("flops", "0.5", "ms"), "t.csv:2: quantity");
  expect_error(h + row("layer_ms", "-1", "ms"), "t.csv:2: measured");
  expect_error(h + "decode,deepseek-v3,h100-sxm,8,8,8,8,1,,32,1024,100,1024,0,,none,low_latency,fp8,bf16,fp8,0,"
                   "balanced,layer_ms,1,ms,s,n\n",
               "t.csv:2: requests_per_gpu");
  expect_error(h + "decode,deepseek-v3,h100-sxm,8,8,8,8,1,32,99,1024,100,1024,0,,none,low_latency,fp8,bf16,fp8,0,"
                   "balanced,layer_ms,1,ms,s,n\n",
               "t.csv:2: tokens_per_gpu");
  expect_error(h + "decode,deepseek-v3,h100-sxm,8,8,8,8,1,32,32,1024,100,1024,0,,none,low_latency,fp8,bf16,fp8,0,"
                   "zipf,layer_ms,1,ms,s,n\n",
               "t.csv:2: routing");
}

TEST(PublishedStep, ReadsTheBalancednessTable) {
  const std::string h = std::string(kBalancednessHeader) + "\n";
  const StepTable t = parse_balancedness_csv(
      h + "16,0,gpu_balancedness,0.613,blog,n\n32,32,rank_imbalance_max_minus_mean_over_mean,0.25,other,n\n", "b.csv");
  ASSERT_EQ(t.rows.size(), 2u);
  const StepRow& a = t.rows[0];
  EXPECT_EQ(a.quantity, StepQuantity::balancedness);
  EXPECT_EQ(a.ep, 16);
  EXPECT_EQ(a.gpus, 16);
  EXPECT_EQ(a.attention_dp, 16);
  EXPECT_EQ(a.requests_per_gpu, 256);
  EXPECT_EQ(a.routing, "model");
  EXPECT_FALSE(a.fitted);
  EXPECT_DOUBLE_EQ(a.measured, 0.613);
  // (max - mean) / mean = 0.25 is mean / max = 1 / 1.25.
  EXPECT_DOUBLE_EQ(t.rows[1].measured, 0.8);
  EXPECT_EQ(t.rows[1].redundant_experts, 32);
  EXPECT_NE(t.rows[0].table, t.rows[1].table);
  // parse_step_table tells the two formats apart by their header.
  EXPECT_EQ(parse_step_table(h + "8,0,gpu_balancedness,0.7,s,n\n", "b.csv").rows.size(), 1u);
  for (const auto& [text, needle] :
       std::vector<std::pair<std::string, std::string>>{{h + "8,0,skew,0.7,s,n\n", "b.csv:2: metric"},
                                                        {h + "8,0,gpu_balancedness,1.5,s,n\n", "b.csv:2: value"},
                                                        {h + "0,0,gpu_balancedness,0.5,s,n\n", "b.csv:2: ep"},
                                                        {h + "8,0,gpu_balancedness\n", "b.csv:2: columns"},
                                                        {"ep,metric\n", "b.csv:1: header"}}) {
    try {
      parse_balancedness_csv(text, "b.csv");
      ADD_FAILURE() << "no error for " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

int64_t sum_of(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

TEST(PublishedStep, TheEplbPlanComesFromPlacementPlanFrom) {
  const std::string root = MOESIM_SOURCE_DIR;
  StepRow r;
  r.routing = "model";
  r.gpus = r.ep = 32;
  // past (the default): placement.warmup_batches (8) warm-up batches of 4096 tokens x top-8, summed; not a draw's own
  // loads.
  const std::vector<std::string> ep32 = {"placement.devices=32", "placement.replicas=32"};
  const StepRouting past = route_loads(r, load_experiment_file(root + "/configs/deepseek-v3.yaml", ep32), 4096, true);
  ASSERT_EQ(past.plan_loads.size(), past.loads.size());
  EXPECT_EQ(sum_of(past.plan_loads[0]), 8 * 4096 * 8);
  EXPECT_NE(past.plan_loads[0], past.loads[0]);
  // oracle: each draw planned from its own loads.
  std::vector<std::string> oracle = ep32;
  oracle.push_back("placement.plan_from=oracle");
  const StepRouting own = route_loads(r, load_experiment_file(root + "/configs/deepseek-v3.yaml", oracle), 4096, true);
  EXPECT_EQ(own.plan_loads, own.loads);
  EXPECT_EQ(own.loads, past.loads);  // the same draws
  // profile: Mixtral's recorded counts, scaled to the draw's 1000 tokens x top-2, for every draw.
  const Experiment m = load_experiment_file(
      root + "/configs/mixtral-8x7b.yaml",
      {"placement.kind=expert_parallel", "placement.devices=4", "placement.replicas=8", "placement.policy=global",
       "placement.plan_from=profile",
       "placement.plan_profile=" + root + "/data/routing-traces/olmoe-mixtral-expert-counts/expert_counts.json#mistral/"
                                          "expert_counts/arxiv"});
  r.gpus = r.ep = 4;
  const StepRouting prof = route_loads(r, m, 1000, true);
  ASSERT_EQ(prof.plan_loads.size(), prof.loads.size());
  const run_detail::PlanProfile recorded = run_detail::read_plan_profile(m);
  double total = 0;
  for (double x : recorded.total) total += x;
  for (const std::vector<int64_t>& plan : prof.plan_loads) {
    ASSERT_EQ(plan.size(), 8u);
    EXPECT_EQ(sum_of(plan), 2000);
    for (size_t x = 0; x < plan.size(); ++x) EXPECT_NEAR(plan[x] / 2000.0, recorded.total[x] / total, 1e-3);
  }
}

TEST(PublishedStep, ShippedTablesAndTheirFit) {
  const std::vector<StepTable> tables = load_step_tables("all");
  ASSERT_EQ(tables.size(), 2u);
  EXPECT_EQ(tables[0].rows.size(), 10u);  // deepseek-v3-balancedness.csv
  EXPECT_EQ(tables[1].rows.size(), 47u);  // step-measurements.csv
  const StepValidation v = validate_steps(tables);
  EXPECT_EQ(v.tables.size(), 8u);
  for (const StepResult& r : v.rows) {
    EXPECT_TRUE(std::isfinite(r.model) && r.model > 0) << to_string(r.row.quantity) << " line " << r.row.line;
    EXPECT_TRUE(std::isfinite(r.held_out) && r.held_out > 0) << to_string(r.row.quantity) << " line " << r.row.line;
  }
  // ServingFit holds what the fit gives now (refit it and copy the figures when the model changes).
  EXPECT_NEAR(v.refit.other_kernels, v.fit.other_kernels, 0.05 * v.fit.other_kernels + 0.5);
  EXPECT_NEAR(v.refit.attention_efficiency, v.fit.attention_efficiency, 0.02);
  EXPECT_NEAR(v.refit.decode_launch_share, v.fit.decode_launch_share, 0.02);
  // The headline checks are computed from the rows: SGLang's prefill ratio and TensorRT-LLM's sync share.
  EXPECT_NEAR(v.prefill_balance_ratio_measured, 59337.0 / 50302.0, 0.002);
  EXPECT_GT(v.prefill_balance_ratio_model, 1.0);
  EXPECT_NEAR(v.sync_share_measured, 161.85 / 1319.85, 1e-4);
  EXPECT_GT(v.sync_share_model, 0.0);
}

TEST(PublishedStep, ValidateReportsTheServingStepSection) {
  const CliResult r = run_cli(std::string("validate --published ") + MOESIM_SOURCE_DIR +
                              "/data/serving-step/step-measurements.csv --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("serving_step"));
  EXPECT_EQ(j["serving_step"]["rows"].size(), 47u);
  EXPECT_TRUE(j["serving_step"].contains("sync_share"));
  EXPECT_TRUE(j["serving_step"].contains("prefill_balance_ratio"));
}

TEST(PublishedStep, ValidateReadsTheStepFolder) {
  // The folder holds both formats; neither is mistaken for a kernel table.
  const CliResult r = run_cli(std::string("validate --published ") + MOESIM_SOURCE_DIR + "/data/serving-step --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["serving_step"]["rows"].size(), 57u);
}

TEST(PublishedStep, ServingDocQuotesTheSummary) {
  const CliResult r = run_cli(std::string("validate --published ") + MOESIM_SOURCE_DIR + "/data/serving-step");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string doc = testing::read_text(std::string(MOESIM_SOURCE_DIR) + "/docs/serving.md");
  const std::size_t from = r.out.find("serving-step error by quantity");
  const std::size_t to = r.out.find('\n', r.out.find("synchronization share of the layer"));
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  const std::string summary = r.out.substr(from, to + 1 - from);
  EXPECT_NE(doc.find(summary), std::string::npos) << "docs/serving.md does not quote:\n" << summary;
}

}  // namespace
}  // namespace moesim
