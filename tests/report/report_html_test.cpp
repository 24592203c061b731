// The HTML report: one load chart per strategy, the metrics table and the efficiency chart, the
// expert-parallel plan per strategy (slots per device), valid
// against a malformed input; and the page renders in headless Chromium (skipped, with the reason,
// where Chromium is not installed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "src/common/error.hpp"
#include "src/report/report_html.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string compare_json(const std::string& dir) {
  const auto r = testing::run_cli(
      "compare --gating token_choice,balanced,aux_free_bias --no-execute --format json --set workload.batch=256"
      " --set workload.batches=4 --out " + dir + "/c.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir + "/c.json";
}

TEST(ReportHtml, HasEveryElement) {
  const std::string dir = testing::make_temp_dir();
  const nlohmann::json run = nlohmann::json::parse(testing::read_text(compare_json(dir)));
  const std::string html = render_html_report(run, "c.json");
  EXPECT_EQ(count(html, "<svg class=\"load-bars\""), 3);
  EXPECT_EQ(count(html, "<svg class=\"efficiency\""), 1);
  EXPECT_EQ(count(html, "<svg class=\"series\""), 1);  // several batches: the imbalance series
  EXPECT_EQ(count(html, "<svg class=\"bias\""), 1);    // aux_free_bias: its bias after each batch
  EXPECT_EQ(count(html, "<table id=\"metrics\">"), 1);
  EXPECT_EQ(count(html, "<table id=\"erosion\">"), 1);
  EXPECT_EQ(count(html, "<tr><td>"), 6);  // 3 strategies in each table
  // The built-in experiment is expert parallel over 8 devices: one plan chart per strategy, a column per
  // device with its planned load, one rectangle per physical slot (8 experts, no replicas).
  EXPECT_EQ(count(html, "<svg class=\"plan-slots\""), 3);
  EXPECT_EQ(count(html, "<rect class=\"slot\""), 3 * 8);
  EXPECT_EQ(count(html, ">d7</text>"), 3);
  // Where the time goes: one stacked bar per strategy, six parts each at most.
  EXPECT_EQ(count(html, "<svg class=\"time-split\""), 1);
  EXPECT_GE(count(html, "<rect class=\"part\""), 3 * 3);
  // Every chart has both axes, each with its label.
  const int charts = count(html, "<svg class=");
  EXPECT_EQ(count(html, "class=\"axis x-axis\""), charts);
  EXPECT_EQ(count(html, "class=\"axis y-axis\""), charts - 3);  // the three bar charts of one value per row
  EXPECT_EQ(count(html, "class=\"axis-label\""), 2 * charts - 3);
  EXPECT_NE(html.find(">assignments</text>"), std::string::npos);
  EXPECT_NE(html.find(">expert (8)</text>"), std::string::npos);
  EXPECT_NE(html.find(">modeled time of one MoE layer (us)</text>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, no scripts
  EXPECT_EQ(html.find("http"), std::string::npos);     // and no network
  EXPECT_THROW(render_html_report(nlohmann::json::object(), "x.json"), InputError);
}

TEST(ReportHtml, ScalesTo256ExpertsOn32DevicesAndLabelsDecodeRecords) {
  // DeepSeek-V3's size: 256 bars, 32 device columns whose labels thin out (no load numbers overprinting),
  // the bias legend naming the extremes and counting the rest.
  const std::string dir = testing::make_temp_dir();
  const auto r = testing::run_cli(
      "compare --gating aux_free_bias,token_choice --no-execute --format json --set model.experts=256"
      " --set model.top_k=8 --set router.groups=8 --set router.topk_groups=4 --set placement.devices=32"
      " --set workload.batch=1024 --set workload.batches=3 --out " + dir + "/c.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = render_html_report(nlohmann::json::parse(testing::read_text(dir + "/c.json")), "c.json");
  EXPECT_EQ(count(html, ">d0</text>"), 2);
  EXPECT_EQ(count(html, ">d1</text>"), 0);  // 32 columns of 19 px: a label every third device
  EXPECT_EQ(count(html, ">d3</text>"), 2);
  EXPECT_EQ(count(html, "<rect class=\"device\""), 2 * 32);  // every device's load in its tooltip
  EXPECT_NE(html.find(">expert (256)</text>"), std::string::npos);
  EXPECT_NE(html.find(">250 others (grey)</text>"), std::string::npos);
  // A decoder run's series counts records by step, not "batch 1..N".
  const auto d = testing::run_cli("run " MOESIM_SOURCE_DIR "/configs/mixtral-8x7b-decode.yaml --no-execute"
                                  " --set workload.batch=4 --set workload.decode_steps=3 --format json --out " +
                                  dir + "/d.json");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const std::string dec = render_html_report(nlohmann::json::parse(testing::read_text(dir + "/d.json")), "d.json");
  EXPECT_NE(dec.find("imbalance (max/mean load) per record"), std::string::npos);
  EXPECT_NE(dec.find("step (0: prefill), each of 2 layer records"), std::string::npos) << dec.substr(0, 2000);
  EXPECT_EQ(dec.find("batch 1.."), std::string::npos);
}

TEST(ReportHtml, RendersInHeadlessChromium) {
  const char* candidates[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"};
  std::string chromium;
  for (const char* c : candidates)
    if (std::ifstream(c).good()) chromium = c;
  if (chromium.empty()) GTEST_SKIP() << "no Chromium installed (apt-get install chromium); structure is checked above";
  const std::string dir = testing::make_temp_dir();
  const auto r = testing::run_cli("report " + compare_json(dir) + " --html " + dir + "/r.html");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // --dump-dom prints the DOM after the page has loaded and rendered.
  const std::string cmd = chromium +
                          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                          " --disable-background-networking --disable-component-update --disable-sync"
                          " --user-data-dir=" + dir + "/profile --dump-dom file://" + dir + "/r.html > " + dir +
                          "/dom.html 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string dom = testing::read_text(dir + "/dom.html");
  EXPECT_EQ(count(dom, "class=\"load-bars\""), 3) << dom.substr(0, 400);
  EXPECT_NE(dom.find("id=\"metrics\""), std::string::npos);
  EXPECT_NE(dom.find("aux_free_bias"), std::string::npos);
}

}  // namespace
}  // namespace moesim
