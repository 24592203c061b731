// The HTML report: one load chart per strategy, the metrics table and the efficiency chart, the
// expert-parallel plan per strategy (slots per device), valid
// against a malformed input; and the page renders in headless Chromium (skipped, with the reason,
// where Chromium is not installed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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

TEST(ReportHtml, NoEmptyChartAndThePhaseTableOfADecodeRun) {
  const std::string dir = testing::make_temp_dir();
  // One batch of aux_free_bias: one bias update and a series of one point draw no line, so neither is a chart.
  const auto one = testing::run_cli("run --no-execute --format json --set router.gating=aux_free_bias "
                                    "--set router.groups=1 --set router.topk_groups=1 --set workload.batches=1 "
                                    "--set workload.batch=256 --out " + dir + "/one.json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const std::string html = render_html_report(nlohmann::json::parse(testing::read_text(dir + "/one.json")), "one.json");
  EXPECT_EQ(count(html, "<svg class=\"bias\""), 0);
  EXPECT_EQ(count(html, "<svg class=\"series\""), 0);
  EXPECT_EQ(count(html, "<p class=\"bias-note\">aux_free_bias, layer 0: one bias update (one batch)"), 1) << html;
  // A decode run's report has its prefill/decode table, one row per strategy and phase.
  const auto d = testing::run_cli("run " MOESIM_SOURCE_DIR "/configs/mixtral-8x7b-decode.yaml --no-execute"
                                  " --set workload.batch=4 --set workload.decode_steps=3 --format json --out " +
                                  dir + "/d.json");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const std::string dec = render_html_report(nlohmann::json::parse(testing::read_text(dir + "/d.json")), "d.json");
  ASSERT_EQ(count(dec, "<table id=\"phases\">"), 1);
  EXPECT_EQ(count(dec, "<tr><td>token_choice</td><td>prefill</td><td>1</td>"), 1) << dec;
  EXPECT_EQ(count(dec, "<tr><td>token_choice</td><td>decode</td><td>3</td>"), 1) << dec;
  EXPECT_EQ(count(html, "<table id=\"phases\">"), 0);  // a batch run has no phases
}

// The installed Chromium, or "" (the test then skips, saying so).
std::string find_chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (std::ifstream(c).good()) return c;
  return "";
}

// Renders the report at `html_path` in headless Chromium with a script appended that measures the laid-out
// page: every <text> of every chart inside its chart's box, no two legend entries of the time chart overlapping,
// no line of fewer than two points; returns the script's verdict (JSON) from the dumped DOM.
nlohmann::json rendered_layout(const std::string& chromium, const std::string& dir, const std::string& html_path) {
  std::string page = testing::read_text(html_path);
  const std::string probe = R"(<script>
const problems = [];
document.querySelectorAll('svg').forEach(svg => {
  const box = svg.getBoundingClientRect();
  svg.querySelectorAll('text').forEach(t => {
    const r = t.getBoundingClientRect();
    if (!t.textContent.trim()) return;
    if (r.width === 0 || r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 ||
        r.bottom > box.bottom + 0.5)
      problems.push('outside ' + svg.getAttribute('class') + ': ' + t.textContent);
  });
  svg.querySelectorAll('polyline').forEach(p => {
    if (p.points.numberOfItems < 2) problems.push('a line of ' + p.points.numberOfItems + ' point(s) in ' + svg.getAttribute('class'));
  });
});
const entries = [...document.querySelectorAll('.legend-entry')].map(g => g.getBoundingClientRect());
for (let i = 0; i < entries.length; ++i)
  for (let j = i + 1; j < entries.length; ++j) {
    const a = entries[i], b = entries[j];
    if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) problems.push('legend ' + i + ' over ' + j);
  }
const out = document.createElement('pre');
out.id = 'layout';
out.textContent = JSON.stringify({problems: problems, legend_entries: entries.length,
                                  charts: document.querySelectorAll('svg').length});
document.body.appendChild(out);
</script>)";
  page.insert(page.rfind("</body>"), probe);
  testing::write_text(dir + "/probe.html", page);
  const std::string cmd = chromium +
                          " --headless --no-sandbox --disable-gpu --disable-background-networking"
                          " --disable-component-update --disable-sync --no-first-run --disable-quic"
                          " --window-size=1200,2000 --user-data-dir=" + dir + "/profile-" +
                          std::to_string(std::rand()) + " --dump-dom file://" + dir + "/probe.html > " + dir +
                          "/dom.html 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  const std::string dom = testing::read_text(dir + "/dom.html");
  const size_t at = dom.find("<pre id=\"layout\">");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no layout verdict in the rendered page: " << dom.substr(0, 400);
    return nlohmann::json::object();
  }
  std::string text = dom.substr(at + 17, dom.find("</pre>", at) - at - 17);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{{"&quot;", "\""}, {"&lt;", "<"},
                                                                                   {"&gt;", ">"}, {"&amp;", "&"}})
    for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size()))
      text.replace(p, from.size(), to);
  return nlohmann::json::parse(text);
}

TEST(ReportHtml, RendersInHeadlessChromium) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "no Chromium installed (apt-get install chromium); structure is checked above";
  const std::string dir = testing::make_temp_dir();
  const auto r = testing::run_cli("report " + compare_json(dir) + " --html " + dir + "/r.html");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json layout = rendered_layout(chromium, dir, dir + "/r.html");
  EXPECT_TRUE(layout["problems"].empty()) << layout.dump(1);
  // Every part of the time split has its legend entry, the last ("all-to-all imbalance") too: 10 parts, what skew
  // saves and this batch's tile phase among them.
  EXPECT_EQ(layout["legend_entries"], 10) << layout.dump();
  const std::string dom = testing::read_text(dir + "/dom.html");
  EXPECT_EQ(count(dom, "class=\"load-bars\""), 3) << dom.substr(0, 400);
  EXPECT_NE(dom.find("id=\"metrics\""), std::string::npos);
  EXPECT_NE(dom.find("aux_free_bias"), std::string::npos);
  EXPECT_NE(dom.find(">all-to-all imbalance</text>"), std::string::npos);

  // A one-batch run and a decode run: no chart without a line, and the phase table in the decode report.
  ASSERT_EQ(testing::run_cli("run --no-execute --format json --set router.gating=aux_free_bias --set router.groups=1 "
                             "--set router.topk_groups=1 --set workload.batches=1 --set workload.batch=256 --out " +
                             dir + "/one.json").exit_code, 0);
  ASSERT_EQ(testing::run_cli("report " + dir + "/one.json --html " + dir + "/one.html").exit_code, 0);
  const nlohmann::json one = rendered_layout(chromium, dir, dir + "/one.html");
  EXPECT_TRUE(one["problems"].empty()) << one.dump(1);
  ASSERT_EQ(testing::run_cli("run " MOESIM_SOURCE_DIR "/configs/mixtral-8x7b-decode.yaml --no-execute --set "
                             "workload.batch=4 --set workload.decode_steps=3 --format json --out " + dir + "/d.json")
                .exit_code, 0);
  ASSERT_EQ(testing::run_cli("report " + dir + "/d.json --html " + dir + "/d.html").exit_code, 0);
  const nlohmann::json dec = rendered_layout(chromium, dir, dir + "/d.html");
  EXPECT_TRUE(dec["problems"].empty()) << dec.dump(1);
  EXPECT_NE(testing::read_text(dir + "/dom.html").find("id=\"phases\""), std::string::npos);
}

}  // namespace
}  // namespace moesim
