// The published kernel tables against the cost model (src/sweep/published.hpp): CSV errors name the
// file, line and column; the routing draws follow the uniform top-k formula; the memory term of a point
// worked out by hand; the fit recovers known figures from times the model generated; the held-out column
// never sees its own table; and the CLI gate (validate --published --max-median-error, calibrate
// --from-published). Host only, deterministic.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/sweep/published.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

const std::string kHeader = kPublishedHeader;

std::string row(const std::string& gpu, const std::string& shape, const std::string& batch, const std::string& us,
                const std::string& scope = "layer") {
  return gpu + ",bf16," + shape + "," + batch + "," + us + ",owner/repo#1,2026-01-01,tool,cfg,random,notes," + scope +
         "\n";
}

std::string error_of(const std::string& text) {
  try {
    parse_published_csv(text, "t.csv");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Published, ShippedTablesParse) {
  const std::vector<PublishedTable> tables = load_published("all");
  ASSERT_GE(tables.size(), 9u);
  std::size_t points = 0;
  for (const PublishedTable& t : tables) {
    EXPECT_FALSE(t.points.empty()) << t.name;
    EXPECT_EQ(t.origin.rfind("data/validation/", 0), 0u) << t.origin;
    points += t.points.size();
  }
  EXPECT_GE(points, 74u);
}

TEST(Published, BadRowsNameFileLineAndColumn) {
  const std::string shape = "8,7168,4096,2,2";
  EXPECT_NE(error_of("gpu,dtype\n").find("t.csv:1: header: expected the columns"), std::string::npos);
  EXPECT_NE(error_of(kHeader + "\n" + row("h100-sxm", shape, "0", "10")).find("t.csv:2: batch: expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of(kHeader + "\n" + row("h100-sxm", shape, "4", "-1")).find("t.csv:2: measured_us: expected a positive"),
            std::string::npos);
  EXPECT_NE(error_of(kHeader + "\n" + row("h100-sxm", shape, "4", "9") + row("nope", shape, "4", "10"))
                .find("t.csv:3: gpu: expected a built-in hardware profile"),
            std::string::npos);
  EXPECT_NE(error_of(kHeader + "\n" + row("h100-sxm", shape, "4", "9", "gemm")).find("t.csv:2: scope: expected layer"),
            std::string::npos);
  EXPECT_NE(error_of(kHeader + "\n" + row("h100-sxm", "8,7168,4096,9,2", "4", "9")).find("t.csv:2: top_k: expected"),
            std::string::npos);
  // Bounds that keep the routing draws fast: batch at most 65536, top_k at most 64.
  EXPECT_NE(error_of(kHeader + "\n" + row("h100-sxm", shape, "65537", "9")).find("batch: expected an integer from 1 to 65536"),
            std::string::npos);
  EXPECT_NE(error_of(kHeader + "\n" + row("h100-sxm", "512,128,2048,65,1", "4", "9")).find("top_k: expected an integer from 1 to 64"),
            std::string::npos);
  EXPECT_NE(error_of(kHeader + "\nh100-sxm,bf16,8\n").find("t.csv:2: row: expected 16 fields, got '3 fields'"),
            std::string::npos);
  EXPECT_NE(error_of(kHeader + "\n").find("expected at least one measurement row"), std::string::npos);
  EXPECT_NE(error_of("").find("got an empty file"), std::string::npos);
  EXPECT_THROW(load_published("/no/such/file.csv"), InputError);
}

PublishedPoint point(int experts, int top_k, int64_t batch, PublishedScope scope = PublishedScope::layer) {
  PublishedPoint p;
  p.gpu = "h100-sxm";
  p.dtype = Dtype::bf16;
  p.experts = experts;
  p.top_k = top_k;
  p.n = 1408;
  p.k = 2048;
  p.batch = batch;
  p.measured_s = 1e-4;
  p.scope = scope;
  return p;
}

HardwareProfile h100() {
  HardwareRef ref;
  ref.name = "h100-sxm";
  return load_hardware_profile(ref, "");
}

// Each token takes top_k distinct experts uniformly, so an expert is idle with probability
// (1 - k/E)^M and the expected active count is E (1 - (1 - k/E)^M).
TEST(Published, ActiveExpertsFollowTheUniformTopKFormula) {
  const HardwareProfile hw = h100();
  EXPECT_DOUBLE_EQ(published_terms(point(64, 6, 1), hw).active_experts, 6.0);  // one token: exactly k
  EXPECT_DOUBLE_EQ(published_terms(point(8, 2, 4096), hw).active_experts, 8.0);
  for (const auto& [e, k, m] : {std::tuple{64, 6, 4}, std::tuple{128, 8, 16}, std::tuple{512, 10, 64}}) {
    const double expected = e * (1.0 - std::pow(1.0 - double(k) / e, m));
    // 16 draws: the mean's spread is well under 4% at these sizes.
    EXPECT_NEAR(published_terms(point(e, k, m), hw).active_experts, expected, 0.04 * expected)
        << "E " << e << " k " << k << " M " << m;
  }
}

// One token, top-2 of 8: two experts of one row each. The down GEMM alone reads its weights, K x N
// each, and moves half of a row's activations, (K + N) elements, per row.
TEST(Published, DownGemmMemoryTermByHand) {
  const HardwareProfile hw = h100();
  PublishedPoint p = point(8, 2, 1, PublishedScope::down_gemm);
  const PublishedTerms t = published_terms(p, hw);
  const double bytes = 2.0, K = 2048, N = 1408;
  const double expected = (2 * K * N * bytes + 2 * (K + N) * bytes) / 3350e9;
  EXPECT_NEAR(t.memory_s, expected, 1e-12 * expected);
  EXPECT_EQ(t.kernels, 1);
  p.scope = PublishedScope::layer;
  const PublishedTerms layer = published_terms(p, hw);
  EXPECT_NEAR(layer.memory_s, (2 * 3 * K * N * bytes + 2 * 2 * (K + N) * bytes) / 3350e9, 1e-12 * expected);
  EXPECT_EQ(layer.kernels, 6);
}

TEST(Published, FitRecoversFiguresTheModelGenerated) {
  const HardwareProfile hw = h100();
  PublishedFit truth;
  truth.efficiency_bw = 0.83;
  truth.efficiency_flops = 0.55;
  truth.launch_overhead_s = 3.5e-6;
  std::vector<PublishedSample> samples;
  for (int64_t m : {1, 3, 16, 70, 256, 1000, 4096, 9000}) {
    PublishedPoint p = point(64, 6, m);
    PublishedSample s;
    s.terms = published_terms(p, hw);
    s.measured_s = published_time_s(s.terms, truth, 1.0);
    samples.push_back(s);
  }
  // The K-step floor held at 0: where it would bind compute-bound points it trades against
  // efficiency_flops (both scale with the tile waves), so the three profile figures are fitted alone.
  const PublishedFit fit = fit_published(samples, false);
  EXPECT_NEAR(fit.efficiency_bw, truth.efficiency_bw, 0.02 * truth.efficiency_bw);
  EXPECT_NEAR(fit.efficiency_flops, truth.efficiency_flops, 0.02 * truth.efficiency_flops);
  EXPECT_NEAR(fit.launch_overhead_s, truth.launch_overhead_s, 0.5e-6);
  EXPECT_EQ(fit.k_step_s, 0.0);
  EXPECT_EQ(fit.points, 8);
}

// Many small experts (E 512, N 128): the tiles walk K in series, so the K-step floor binds at small
// batches and the fit recovers its latency too.
TEST(Published, FitRecoversTheKStepLatency) {
  HardwareRef ref;
  ref.name = "h20-3e";
  const HardwareProfile hw = load_hardware_profile(ref, "");
  PublishedFit truth;
  truth.efficiency_bw = 0.8;
  truth.efficiency_flops = 0.7;
  truth.launch_overhead_s = 4e-6;
  truth.k_step_s = 0.9e-6;
  std::vector<PublishedSample> samples;
  int bound = 0;
  for (int64_t m : {1, 4, 16, 64, 128, 256, 1024, 4096}) {
    PublishedPoint p = point(512, 10, m);
    p.gpu = "h20-3e";
    p.n = 128;
    PublishedSample s;
    s.terms = published_terms(p, hw);
    s.measured_s = published_time_s(s.terms, truth, 1.0);
    const double rest = combine_terms(s.terms.memory_s / 0.8, s.terms.compute_s / 0.7, 1.0);
    bound += s.terms.k_steps * truth.k_step_s > rest;
    samples.push_back(s);
  }
  ASSERT_GE(bound, 2) << "the floor must bind some points for the fit to see it";
  const PublishedFit fit = fit_published(samples);
  EXPECT_NEAR(fit.k_step_s, truth.k_step_s, 0.03 * truth.k_step_s);
  EXPECT_NEAR(fit.launch_overhead_s, truth.launch_overhead_s, 0.5e-6);
  EXPECT_EQ(fit_published(samples, false).k_step_s, 0.0);
}

double held_out_of(const PublishedValidation& v, const std::string& table, int64_t batch) {
  for (const PublishedRow& r : v.rows)
    if (v.tables[static_cast<std::size_t>(r.table)].table.name == table && r.point.batch == batch) return r.held_out_s;
  ADD_FAILURE() << table << " batch " << batch;
  return 0;
}

// Leave one table out: doubling one table's measurements leaves its own held-out prediction exactly as
// it was, and moves the prediction of the table that was fitted on it.
TEST(Published, HeldOutColumnNeverSeesItsTable) {
  const std::string shape = "64,1408,2048,6,1";
  std::string a = kHeader + "\n", b = kHeader + "\n", b2 = kHeader + "\n";
  int i = 0;
  for (const char* m : {"1", "8", "64", "512", "4096"}) {
    const double us_a = 40.0 * (1 << i), us_b = 45.0 * (1 << i);
    a += row("h100-sxm", shape, m, std::to_string(us_a));
    b += row("h100-sxm", shape, m, std::to_string(us_b));
    b2 += row("h100-sxm", shape, m, std::to_string(2 * us_b));
    ++i;
  }
  const PublishedTable ta = parse_published_csv(a, "a.csv"), tb = parse_published_csv(b, "b.csv"),
                       tb2 = parse_published_csv(b2, "b.csv");
  const PublishedValidation v1 = validate_published({ta, tb}), v2 = validate_published({ta, tb2});
  ASSERT_EQ(v1.tables.size(), 2u);
  EXPECT_EQ(v1.tables[1].held_out_basis, "every other table");
  ASSERT_EQ(v1.tables[1].fitted_on, std::vector<std::string>{"a"});
  for (int64_t m : {1, 8, 64, 512, 4096}) {
    EXPECT_EQ(held_out_of(v1, "b", m), held_out_of(v2, "b", m)) << m;
    EXPECT_NE(held_out_of(v1, "a", m), held_out_of(v2, "a", m)) << m;
  }
  // One table alone has nothing to be fitted on: no held-out column, and the summary counts no point.
  const PublishedValidation alone = validate_published({ta});
  EXPECT_EQ(alone.tables[0].held_out_basis, "none");
  EXPECT_EQ(alone.overall[static_cast<int>(PublishedColumn::held_out)].points, 0);
}

TEST(Published, ErrorSummaryByHand) {
  const ErrorSummary s = summarize_errors({0.1, -0.3, 0.05, 0.2});
  EXPECT_DOUBLE_EQ(s.median_abs, 0.15);
  EXPECT_DOUBLE_EQ(s.worst, -0.3);
  EXPECT_EQ(s.points, 4);
}

TEST(PublishedCli, GateExitsOneAboveTheLimitAndZeroBelow) {
  const auto over = run_cli("validate --published --column quantized --max-median-error 1%");
  EXPECT_EQ(over.exit_code, 1) << over.err;
  EXPECT_NE(over.err.find("the quantized column's median |error|"), std::string::npos) << over.err;
  const auto under = run_cli("validate --published all --column quantized --max-median-error 10");
  EXPECT_EQ(under.exit_code, 0) << under.err;
  EXPECT_NE(under.out.find("overall"), std::string::npos);
  const auto json = run_cli("validate --published --format json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_GE(j["tables"].size(), 9u);
  EXPECT_TRUE(j["overall"].contains("held_out"));
  const auto csv = run_cli("validate --published --format csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("table,gpu,dtype,experts,n,k,top_k,tp,batch,scope,active_experts,measured_s,ideal_s,", 0), 0u);
}

TEST(PublishedCli, BadOptionsExitTwo) {
  for (const char* args : {"validate --published --column bogus", "validate --published --max-median-error lots",
                           "validate --published /no/such.csv", "validate --column calibrated",
                           "validate --max-median-error 5%", "validate --published --set model.top_k=2",
                           "calibrate --from-published /no/such.csv"}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": one line, got " << r.err;
  }
}

TEST(PublishedCli, CalibrateFromPublishedWritesALoadableProfile) {
  const std::string dir = testing::make_temp_dir();
  const auto r = run_cli("calibrate --from-published " + std::string(MOESIM_SOURCE_DIR) +
                         "/data/validation/vllm-pr24700-mixtral-h100-bf16.csv --out " + dir + "/fit.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string text = testing::read_text(dir + "/fit.yaml");
  const HardwareProfile hw = parse_hardware_profile(text, "fit.yaml");
  EXPECT_EQ(hw.name, "h100-sxm-published");
  EXPECT_TRUE(hw.calibrated);
  EXPECT_GT(hw.efficiency_bw, 0.5);
  EXPECT_LE(hw.efficiency_bw, 1.0);
  EXPECT_EQ(hw.memory_bandwidth_bytes_per_s, 3350e9);  // the datasheet figures stay
  // Tables of two GPUs cannot make one profile.
  const auto mixed = run_cli("calibrate --from-published " + std::string(MOESIM_SOURCE_DIR) +
                             "/data/validation/vllm-pr24700-mixtral-h100-bf16.csv " + std::string(MOESIM_SOURCE_DIR) +
                             "/data/validation/vllm-pr44152-mixtral-h20-bf16.csv");
  EXPECT_EQ(mixed.exit_code, 2);
  EXPECT_NE(mixed.err.find("gpu: expected 'h100-sxm'"), std::string::npos) << mixed.err;
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// docs/cost-model.md "How right is it?" quotes the summary `validate --published all` prints.
TEST(PublishedCli, CostModelDocQuotesTheCurrentSummary) {
  const std::string doc = testing::read_text(std::string(MOESIM_SOURCE_DIR) + "/docs/cost-model.md");
  const std::string marker = "`validate --published all` (held by tests/sweep/published_test.cpp against this page):";
  const auto at = doc.find(marker);
  ASSERT_NE(at, std::string::npos) << "the doc lost its marker";
  const auto open = doc.find("```\n", at);
  const auto close = doc.find("```", open + 4);
  ASSERT_NE(close, std::string::npos);
  const std::string quoted = doc.substr(open + 4, close - open - 4);
  const auto r = run_cli("validate --published all");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto from = r.out.find("error per table");
  ASSERT_NE(from, std::string::npos);
  EXPECT_EQ(quoted, r.out.substr(from)) << "regenerate the block: moesim validate --published all";
}

}  // namespace
}  // namespace moesim
