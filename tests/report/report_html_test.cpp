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
  EXPECT_EQ(count(html, ">d7 "), 3);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, no scripts
  EXPECT_EQ(html.find("http"), std::string::npos);     // and no network
  EXPECT_THROW(render_html_report(nlohmann::json::object(), "x.json"), InputError);
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
