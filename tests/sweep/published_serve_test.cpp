// Tests src/sweep/published_serve: the serving tables' reader (the exact header, the engine defaults an empty cell
// takes, one-line errors naming the line and the column), the shipped table modeled (every row finite and positive,
// the throughput and per-user rows of one run consistent with each other), and the validate section. Host only.
#include "src/sweep/published_serve.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::CliResult;
using testing::run_cli;

std::string row(const std::string& cells) { return std::string(kServeHeader) + "\n" + cells + "\n"; }

const std::string kRow =
    "TensorRT-LLM,deepseek-v3,fp8,fp8,h200,8,8,8,8,0,,128,1151,1024,,1024,2048,round_robin,no,,,"
    "output_tokens_per_s_per_gpu,1436,tokens/s,src,note";

TEST(PublishedServe, ParsesTheIssuesHeaderAndTheDefaults) {
  const ServeTable t = parse_serve_csv(row(kRow), "t.csv");
  ASSERT_EQ(t.rows.size(), 1u);
  const ServeRow& r = t.rows[0];
  EXPECT_EQ(r.gpus, 8);
  EXPECT_EQ(r.attention_dp, 8);
  EXPECT_EQ(r.max_batch_size, 128);
  EXPECT_EQ(r.max_num_tokens, 1151);
  EXPECT_EQ(r.concurrency, 1024);
  EXPECT_EQ(r.requests, 16 * 1024);  // empty: 16 x concurrency
  EXPECT_EQ(r.kv_dtype, "fp8");
  EXPECT_EQ(r.quantity, ServeQuantity::output_tokens_per_s_per_gpu);
  // Empty limits take TensorRT-LLM's build defaults.
  const ServeTable d = parse_serve_csv(
      row("X,deepseek-v3,,,h200,8,,,,,,,,64,,1024,128,,,,,tpot_ms,50,ms,src,note"), "t.csv");
  EXPECT_EQ(d.rows[0].max_batch_size, kServeDefaultMaxBatch);
  EXPECT_EQ(d.rows[0].max_num_tokens, kServeDefaultMaxNumTokens);
  EXPECT_EQ(d.rows[0].attention_dp, 8);
  EXPECT_EQ(d.rows[0].kv_dtype, "bf16");
  EXPECT_FALSE(d.rows[0].disaggregated);
}

TEST(PublishedServe, BadCellsNameTheLineAndColumn) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      parse_serve_csv(text, "t.csv");
      ADD_FAILURE() << "no error for " << text;
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  expect_error("system,model\n", "t.csv:1: header");
  std::string bad = kRow;
  expect_error(row(std::string(kRow).replace(kRow.find("tokens/s"), 8, "ms")), "t.csv:2: unit");
  expect_error(row(std::string(kRow).replace(kRow.find("round_robin"), 11, "fastest")), "t.csv:2: scheduler");
  expect_error(row(std::string(kRow).replace(kRow.find(",no,"), 4, ",maybe,")), "t.csv:2: disaggregated");
  expect_error(row(std::string(kRow).replace(kRow.find("output_tokens_per_s_per_gpu"), 27, "goodput")),
               "t.csv:2: quantity");
  expect_error(row(std::string(kRow).replace(kRow.find(",128,1151,"), 10, ",128,64,")), "t.csv:2: max_num_tokens");
  expect_error(row(std::string(kRow).replace(kRow.find(",1024,,"), 7, ",,,")), "t.csv:2: concurrency");
  expect_error(row(std::string(kRow).replace(kRow.find(",no,,,"), 6, ",yes,,,")), "t.csv:2: prefill_gpus");
}

TEST(PublishedServe, ShippedTableIsModeled) {
  const std::vector<ServeTable> tables = load_serve_tables("all");
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(tables[0].rows.size(), 5u);
  const ServeValidation v = validate_serving(tables);
  EXPECT_EQ(v.model.points, 5);
  for (const ServeResultRow& r : v.rows)
    EXPECT_TRUE(std::isfinite(r.model) && r.model > 0) << to_string(r.row.quantity) << " line " << r.row.line;
  // The H200 run's output tokens/s per GPU and per user come from one schedule: 1,024 clients each at the per-user
  // speed give at most the run's output over 8 GPUs (prefill takes the rest of each request's time).
  const ServeResultRow& gpu = v.rows[3];
  const ServeResultRow& user = v.rows[4];
  ASSERT_EQ(gpu.row.quantity, ServeQuantity::output_tokens_per_s_per_gpu);
  ASSERT_EQ(user.row.quantity, ServeQuantity::tokens_per_s_per_user);
  EXPECT_LE(gpu.model * 8, user.model * 1024 * 1.001);
  EXPECT_EQ(v.rows[0].approximation, "nvfp4 GEMMs costed in fp8");
}

TEST(PublishedServe, ValidateReportsTheServingSection) {
  const CliResult r = run_cli(std::string("validate --published ") + MOESIM_SOURCE_DIR + "/data/serving --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("serving"));
  EXPECT_EQ(j["serving"]["rows"].size(), 5u);
  EXPECT_EQ(j["serving"]["errors"]["model"]["points"].get<int>(), 5);
}

TEST(PublishedServe, DeepSeekProductionEnvelope) {
  // DeepSeek's Day-6 figures (data/serving/README.md): about 14.8k output tokens/s a decode node of H800 at 20-22
  // tokens/s a user; a plausibility envelope, held within 25 %.
  const CliResult r = run_cli(std::string("step ") + MOESIM_SOURCE_DIR +
                              "/configs/deepseek-v3.yaml --set hardware=h800 --set placement.devices=144 "
                              "--set placement.replicas=32 --set placement.overlap=two_batch "
                              "--set placement.a2a_kernel=low_latency --requests-per-gpu 88 --kv-len 4989 "
                              "--mtp-draft 1 --mtp-accept 0.8 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["tokens_per_s_per_node"].get<double>(), 14800, 0.25 * 14800);
  const double per_user = 1e3 / j["tpot_ms"].get<double>();
  EXPECT_GT(per_user, 0.75 * 20);
  EXPECT_LT(per_user, 1.25 * 22);
}

TEST(PublishedServe, ServeDocQuotesTheValidation) {
  const CliResult r = run_cli(std::string("validate --published ") + MOESIM_SOURCE_DIR + "/data/serving");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string doc = testing::read_text(std::string(MOESIM_SOURCE_DIR) + "/docs/serve.md");
  EXPECT_NE(doc.find(r.out), std::string::npos) << "docs/serve.md does not quote:\n" << r.out;
}

}  // namespace
}  // namespace moesim
