// One number per display for step runs (docs/design.md, "One number per metric: the headline value"):
// on a small decoder run with drops and on the three-layer OLMoE load profile, the table's imbalance and
// drop_rate cells, JSON `metrics`, the HTML row and the value `check` bounds (aggregate value and last)
// are the same number, equal to a token-weighted mean computed here from the JSON records; and variants
// that route identically share a rank in the table and the JSON. Runs the built binary. Host only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

const std::string kRoot = MOESIM_SOURCE_DIR;

// A decoder run small enough for a unit test: 4 sequences, a prefill of 3..9 tokens each and 3 decode
// steps through 2 executed layers, E=6, k=2, capacity factor 1 so that some assignments drop; round-robin
// over the built-in 8 devices (EPLB's policies need D to divide E + R).
const std::string kDecoder =
    " --set workload.source=decoder --set workload.batch=4 --set workload.prompt_len=3..9"
    " --set workload.decode_steps=3 --set workload.topics=3 --set workload.seed=5 --set model.experts=6"
    " --set model.top_k=2 --set router.capacity_factor=1.0 --set execute.hidden=48 --set execute.ffn=32"
    " --set execute.layers=2 --set execute.repeats=1 --set placement.policy=round_robin";

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

// Every digit, so that a bound written from it reads back as exactly v.
std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The cell of column `header` in the row of `strategy` (a label may hold spaces) of a printed run table.
std::string table_cell(const std::string& table, const std::string& strategy, const std::string& header) {
  std::istringstream lines(table);
  std::vector<std::string> headers;
  for (std::string line; std::getline(lines, line);) {
    if (headers.empty() && line.rfind("strategy ", 0) == 0) {
      std::istringstream words(line);
      for (std::string w; words >> w;) headers.push_back(w);
    } else if (!headers.empty() && (line.rfind(strategy + "  ", 0) == 0 || line.rfind(strategy + "*  ", 0) == 0)) {
      // A row that drops assignments is marked "*" after its label.
      std::istringstream words(line.substr(strategy.size() + (line[strategy.size()] == '*' ? 1 : 0)));
      std::vector<std::string> cells = {strategy};
      for (std::string w; words >> w;) cells.push_back(w);
      if (cells.size() != headers.size()) continue;
      for (size_t c = 0; c < headers.size(); ++c)
        if (headers[c] == header) return cells[c];
    }
  }
  return "<no cell " + strategy + "/" + header + ">";
}

// Σ num_tokens × metric / Σ num_tokens over the strategy's JSON records.
double weighted_mean(const nlohmann::json& s, const std::string& metric) {
  double num = 0, den = 0;
  for (const auto& r : s["records"]) {
    const double w = r["num_tokens"].get<double>();
    num += w * r["metrics"][metric].get<double>();
    den += w;
  }
  return num / den;
}

// `check` on `file` with one expect: list; returns the exit code (0 met, 1 failed), output on failure.
int check_with(const std::string& file, const std::string& args, const std::string& expect, std::string* out) {
  const auto r = run_cli("check " + file + args + " --set 'expect=[" + expect + "]'");
  *out = r.out + r.err;
  return r.exit_code;
}

// The bound just below v fails and [v, v] passes, for aggregate `agg`: check reads exactly v.
void expect_check_reads(const std::string& file, const std::string& args, const std::string& metric,
                        const std::string& agg, double v) {
  std::string out;
  const std::string item = "{metric: " + metric + ", aggregate: " + agg;
  EXPECT_EQ(check_with(file, args, item + ", min: " + exact(v) + ", max: " + exact(v) + "}", &out), 0)
      << metric << "." << agg << " = " << exact(v) << ": " << out;
  const double below = std::nextafter(v, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(check_with(file, args, item + ", max: " + exact(below) + "}", &out), 1)
      << metric << "." << agg << " max " << exact(below) << ": " << out;
  EXPECT_NE(out.find(": " + metric), std::string::npos) << out;
  const double above = std::nextafter(v, std::numeric_limits<double>::infinity());
  EXPECT_EQ(check_with(file, args, item + ", min: " + exact(above) + "}", &out), 1)
      << metric << "." << agg << " min " << exact(above) << ": " << out;
}

// The table, JSON, HTML and check of `file` (with `args`) agree on imbalance and drop_rate.
void expect_reports_agree(const std::string& file, const std::string& args, const std::string& name) {
  SCOPED_TRACE(name);
  const std::string dir = testing::make_temp_dir();
  const auto table = run_cli("run " + file + args + " --no-execute --wide");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const auto json = run_cli("run " + file + args + " --no-execute --format json --records --out " + dir + "/run.json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(testing::read_text(dir + "/run.json"));
  const nlohmann::json& s = j["strategies"][0];
  ASSERT_GT(s["records"].size(), 1u);
  const std::string label = s["strategy"].get<std::string>();
  const double imbalance = s["metrics"]["imbalance"].get<double>();
  const double drop_rate = s["metrics"]["drop_rate"].get<double>();

  // JSON against the records: 1e-14 relative, the same sums in the same order up to rounding.
  EXPECT_NEAR(imbalance, weighted_mean(s, "imbalance"), 1e-14 * imbalance);
  EXPECT_NEAR(drop_rate, weighted_mean(s, "drop_rate"), 1e-14);
  // drop_rate = total dropped / total assignments (every record has the same top_k).
  double dropped = 0, assignments = 0;
  for (const auto& r : s["records"]) {
    dropped += r["metrics"]["dropped"].get<double>();
    assignments += r["num_tokens"].get<double>() * j["model"]["top_k"].get<double>();
  }
  EXPECT_EQ(s["metrics"]["dropped"].get<double>(), dropped);
  EXPECT_NEAR(drop_rate, dropped / assignments, 1e-14);
  // The last record under its own key.
  EXPECT_EQ(s["last_record_metrics"]["imbalance"], s["records"].back()["metrics"]["imbalance"]);

  // The table prints the same numbers.
  EXPECT_EQ(table_cell(table.out, label, "imbalance"), fixed(imbalance, 3)) << table.out;
  EXPECT_EQ(table_cell(table.out, label, "drop_rate"), fixed(drop_rate, 4)) << table.out;
  EXPECT_EQ(table_cell(table.out, label, "unrouted"), fixed(s["metrics"]["tokens_unrouted"].get<double>(), 0));
  EXPECT_EQ(table_cell(table.out, label, "model_us"),
            fixed(s["modeled"]["single"]["time_s"].get<double>() * 1e6, 1));

  // So does the HTML page drawn from the JSON.
  const auto html = run_cli("report " + dir + "/run.json --html " + dir + "/run.html");
  ASSERT_EQ(html.exit_code, 0) << html.err;
  const std::string page = testing::read_text(dir + "/run.html");
  EXPECT_NE(page.find("<tr><td>" + label + "</td><td>" + fixed(imbalance, 3) + "</td>"), std::string::npos);

  // check reads exactly these values by default, and the last record's under `last`.
  expect_check_reads(file, args, "imbalance", "value", imbalance);
  expect_check_reads(file, args, "drop_rate", "value", drop_rate);
  expect_check_reads(file, args, "imbalance", "last", s["records"].back()["metrics"]["imbalance"].get<double>());
}

TEST(ReportsAgree, DecoderRunTableJsonHtmlAndCheck) {
  const std::string dir = testing::make_temp_dir();
  const auto config = run_cli("config" + kDecoder + " --out " + dir + "/decoder.yaml");
  ASSERT_EQ(config.exit_code, 0) << config.err;
  expect_reports_agree(dir + "/decoder.yaml", "", "decoder");
  // The run has drops and prefill and decode records of different sizes, so the weights matter.
  const auto json = run_cli("run " + dir + "/decoder.yaml --no-execute --format json --records");
  const nlohmann::json s = nlohmann::json::parse(json.out)["strategies"][0];
  EXPECT_GT(s["metrics"]["drop_rate"].get<double>(), 0);
  EXPECT_NE(s["records"].front()["num_tokens"], s["records"].back()["num_tokens"]);
  double plain = 0;
  for (const auto& r : s["records"]) plain += r["metrics"]["imbalance"].get<double>() / s["records"].size();
  EXPECT_GT(std::fabs(plain - s["metrics"]["imbalance"].get<double>()), 1e-3);
}

TEST(ReportsAgree, LoadProfileTableJsonHtmlAndCheck) {
  expect_reports_agree(kRoot + "/configs/olmoe-profile.yaml", "", "olmoe-profile");
}

// token_choice and group_limited with one group route every token alike, so every headline value is
// equal and each pair (capacity factor 1 and 0.5) shares a rank; the next rank skips: 1, 1, 3, 3.
TEST(ReportsAgree, IdenticalVariantsShareARank) {
  const std::string args = "compare --gating token_choice,group_limited --vary router.capacity_factor=1,0.5"
                           " --set router.groups=1 --set router.topk_groups=1 --no-execute" + kDecoder;
  const auto json = run_cli(args + " --format json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["strategies"].size(), 4u);
  std::map<std::string, nlohmann::json> by_label;
  std::vector<int> ranks;
  for (const auto& s : j["strategies"]) {
    by_label[s["strategy"].get<std::string>()] = s;
    ranks.push_back(s["rank"].get<int>());
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{1, 1, 3, 3}));
  const auto table = run_cli(args);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* cf : {"1", "0.5"}) {
    const std::string tc = std::string("token_choice capacity_factor=") + cf;
    const std::string gl = std::string("group_limited capacity_factor=") + cf;
    ASSERT_TRUE(by_label.count(tc) && by_label.count(gl)) << json.out.substr(0, 2000);
    EXPECT_EQ(by_label[tc]["metrics"], by_label[gl]["metrics"]) << cf;
    EXPECT_EQ(by_label[tc]["rank"], by_label[gl]["rank"]) << cf;
    const std::string rank = std::to_string(by_label[tc]["rank"].get<int>());
    EXPECT_EQ(table_cell(table.out, tc, "rank"), rank) << table.out;
    EXPECT_EQ(table_cell(table.out, gl, "rank"), rank) << table.out;
  }
  // The dropping pair is not tied with the other: capacity factor 0.5 drops more.
  EXPECT_GT(by_label["token_choice capacity_factor=0.5"]["metrics"]["drop_rate"].get<double>(),
            by_label["token_choice capacity_factor=1"]["metrics"]["drop_rate"].get<double>());
}

}  // namespace
}  // namespace moesim
