// The HTML page of a serving run (src/report/serve_report.hpp): its structure, the headline numbers as the page
// formats them, escaping, the four charts over time and the two latency distributions, downsampling of a long run
// (at most 1000 points a line, spikes kept, quickly), and an empty run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/report/serve_report.hpp"
#include "src/serve/serve_run.hpp"

namespace moesim {
namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The <svg> element with this id, whole.
std::string svg_with_id(const std::string& page, const std::string& id) {
  const size_t at = page.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t open = page.rfind("<svg", at);
  const size_t close = page.find("</svg>", at);
  return page.substr(open, close + 6 - open);
}

// The number of x,y pairs of every polyline in `s`, in order.
std::vector<int> polyline_points(const std::string& s) {
  std::vector<int> out;
  for (size_t p = s.find("<polyline"); p != std::string::npos; p = s.find("<polyline", p + 1)) {
    const size_t from = s.find("points=\"", p) + 8;
    const size_t to = s.find('"', from);
    const std::string points = s.substr(from, to - from);
    out.push_back(points.empty() ? 0 : count(points, ","));
  }
  return out;
}

// Three requests over four steps, worked by hand: TTFT 100, 200 and 200 ms; TPOT 100 ms (4 tokens over 0.3 s after
// the first) and 150 ms (3 over 0.3 s); the third has one output token and no TPOT.
ServeResult small_run() {
  Schedule s;
  s.requests = {{0.0, 0.1, 0.4, 100, 4, 0, 0}, {0.0, 0.2, 0.5, 200, 3, 1, 1}, {0.1, 0.3, 0.3, 50, 1, 0, 0}};
  s.steps = {{0.0, 0.1, 0, 300, 0, 0.25, 0.5},
             {0.1, 0.1, 1, 50, 1, 0.40, 0.75},
             {0.2, 0.1, 2, 0, 2, 0.45, 1.0},
             {0.3, 0.2, 2, 0, 2, 0.50, 0.95}};
  s.preemptions = 1;
  s.end_s = 0.5;
  ServeResult r;
  r.schedule = s;
  r.gpus = 2;
  r.metrics = serve_metrics(s, r.gpus);
  r.balanced_routing = r.metrics;
  r.balanced_routing.output_tokens_per_s_per_gpu = 10.0;
  r.balanced_attention = r.metrics;
  r.balanced_attention.output_tokens_per_s_per_gpu = 6.0;
  return r;
}

TEST(ServeReport, PageIsWellFormedAndShowsTheHeadline) {
  const ServeResult r = small_run();
  // 8 output tokens over 0.5 s on 2 GPUs; 358 tokens in all.
  ASSERT_DOUBLE_EQ(r.metrics.output_tokens_per_s_per_gpu, 8.0);
  const std::string page = format_serve_html("serve", {"model: test", "ranks: 2"}, r, true);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(page, "<html"), 1);
  EXPECT_EQ(count(page, "</html>"), 1);
  EXPECT_EQ(count(page, "<svg"), count(page, "</svg>"));
  EXPECT_EQ(count(page, "<table"), count(page, "</table>"));
  EXPECT_EQ(count(page, "<script"), 0);
  EXPECT_EQ(count(page, "http://"), count(page, "xmlns=\"http://www.w3.org/2000/svg\""));  // nothing fetched
  EXPECT_NE(page.find("<pre>model: test\nranks: 2</pre>"), std::string::npos);

  EXPECT_NE(page.find("<th>output tokens/s per GPU</th><td>8.0</td><td>10.0</td><td>6.0</td>"), std::string::npos);
  EXPECT_NE(page.find("<th>total tokens/s per GPU</th><td>358.0</td>"), std::string::npos);
  // The users' speeds: 1 / 0.1 s and 1 / 0.15 s, mean 8.33 tokens/s.
  EXPECT_NE(page.find("<th>tokens/s per user</th><td>8.3</td>"), std::string::npos);
  EXPECT_NE(page.find("<th>TTFT mean (ms)</th><td>166.67</td>"), std::string::npos);
  EXPECT_NE(page.find("<th>TTFT p50 (ms)</th><td>200.00</td>"), std::string::npos);
  EXPECT_NE(page.find("<th>TPOT mean (ms)</th><td>125.00</td>"), std::string::npos);
  EXPECT_NE(page.find("<th>E2E p99 (ms)</th><td>"), std::string::npos);
  EXPECT_NE(page.find("<th>balance ratio mean</th><td>0.800</td>"), std::string::npos);
  EXPECT_NE(page.find("<th>steps</th><td>4</td>"), std::string::npos);
  EXPECT_NE(page.find("<th>preemptions</th><td>1</td>"), std::string::npos);
  EXPECT_NE(page.find("<th>balanced routing</th><th>balanced attention</th>"), std::string::npos);
  EXPECT_NE(page.find("balanced routing 10.0 (+25.0% over the run)"), std::string::npos);
  EXPECT_NE(page.find("balanced attention 6.0 (-25.0% over the run)"), std::string::npos);
  EXPECT_NE(page.find("Definitions"), std::string::npos);
  EXPECT_EQ(page.find("nan"), std::string::npos);
  EXPECT_EQ(page.find("inf<"), std::string::npos);

  const std::string plain = format_serve_html("serve", {}, r, false);
  EXPECT_EQ(plain.find("<th>balanced routing</th>"), std::string::npos);
  EXPECT_NE(plain.find("<th>output tokens/s per GPU</th><td>8.0</td></tr>"), std::string::npos);
  EXPECT_EQ(plain.find("<pre>"), std::string::npos);
  EXPECT_EQ(page, format_serve_html("serve", {"model: test", "ranks: 2"}, r, true));  // deterministic
}

TEST(ServeReport, EscapesTheTitleAndHeader) {
  const std::string page = format_serve_html("a <b> & \"c\"", {"x<y>&z"}, small_run(), true);
  EXPECT_NE(page.find("<title>a &lt;b&gt; &amp; &quot;c&quot;</title>"), std::string::npos);
  EXPECT_NE(page.find("<h1>a &lt;b&gt; &amp; &quot;c&quot;</h1>"), std::string::npos);
  EXPECT_NE(page.find("<pre>x&lt;y&gt;&amp;z</pre>"), std::string::npos);
  EXPECT_EQ(page.find("<b>"), std::string::npos);
  EXPECT_EQ(page.find("x<y>"), std::string::npos);
}

TEST(ServeReport, HasTheFourChartsOverTimeAndTheTwoDistributions) {
  const std::string page = format_serve_html("serve", {}, small_run(), true);
  EXPECT_EQ(count(page, "<svg"), 6);
  for (const char* id : {"batch", "kv-use", "step-time", "balance", "ttft", "tpot"}) {
    const std::string svg = svg_with_id(page, id);
    ASSERT_FALSE(svg.empty()) << id;
    EXPECT_GE(count(svg, "<polyline"), 1) << id;
    EXPECT_GE(count(svg, "<text"), 4) << id;  // tick labels and axis labels
  }
  // The batch chart: decoding requests and prefill tokens, four steps each.
  EXPECT_EQ(polyline_points(svg_with_id(page, "batch")), (std::vector<int>{4, 4}));
  EXPECT_NE(svg_with_id(page, "batch").find("prefill tokens"), std::string::npos);
  EXPECT_NE(svg_with_id(page, "step-time").find("step time (ms)"), std::string::npos);
  EXPECT_NE(svg_with_id(page, "kv-use").find(">1.0</text>"), std::string::npos);  // KV use on 0..1
  // TTFT over three requests, TPOT over the two of more than one output token: a step up each.
  EXPECT_EQ(polyline_points(svg_with_id(page, "ttft")), (std::vector<int>{6}));
  EXPECT_EQ(polyline_points(svg_with_id(page, "tpot")), (std::vector<int>{4}));
  EXPECT_NE(svg_with_id(page, "ttft").find("p50 200.00"), std::string::npos);
  EXPECT_NE(svg_with_id(page, "tpot").find("TPOT (ms)"), std::string::npos);
}

TEST(ServeReport, LongRunIsDownsampledAndKeepsItsSpikes) {
  Schedule s;
  const int n = 200000;
  s.steps.resize(n);
  for (int i = 0; i < n; ++i) {
    ServeStepRecord& x = s.steps[static_cast<size_t>(i)];
    x.start_s = 0.01 * i;
    x.time_s = i == 123457 ? 1.0 : 0.01;  // one spike of 1000 ms among 10 ms steps
    x.decode_requests = i % 64;
    x.prefill_tokens = (i * 37) % 2048;
    x.decode_tokens = x.decode_requests;
    x.kv_use = (i % 1000) / 1000.0;
    x.balance_ratio = 0.5 + 0.5 * ((i * 7) % 100) / 100.0;
  }
  for (int i = 0; i < 20000; ++i)
    s.requests.push_back(
        {0.1 * i, 0.1 * i + 0.05 + 0.001 * (i % 97), 0.1 * i + 1.0 + 0.001 * (i % 89), 512, 100, 0, 0});
  s.end_s = s.requests.back().finish_s;
  ServeResult r;
  r.schedule = s;
  r.gpus = 8;
  r.metrics = serve_metrics(s, r.gpus);

  const std::string page = format_serve_html("long", {}, r, false);
  EXPECT_LT(page.size(), 400000u);

  const std::vector<int> points = polyline_points(page);
  ASSERT_EQ(points.size(), 7u);  // batch (2), KV use, step time, balance, TTFT, TPOT
  for (int p : points) {
    EXPECT_GT(p, 100);
    EXPECT_LE(p, 1000);
  }
  // The spike stands at the top of the step-time chart (y 28, the plot's top edge; the axis reaches 1000 ms).
  const std::string time = svg_with_id(page, "step-time");
  EXPECT_NE(time.find(">1000</text>"), std::string::npos);
  const size_t from = time.find("points=\"");
  EXPECT_NE(time.substr(from, time.find('"', from + 8) - from).find(",28.0"), std::string::npos);
  EXPECT_NE(page.find("200000 steps"), std::string::npos);
}

TEST(ServeReport, EmptyRunSaysSo) {
  const ServeResult r;
  const std::string page = format_serve_html("empty", {"nothing"}, r, true);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("no steps"), std::string::npos);
  EXPECT_NE(page.find("no requests"), std::string::npos);
  EXPECT_EQ(count(page, "<svg"), 0);
  EXPECT_NE(page.find("<th>steps</th><td>0</td>"), std::string::npos);
  EXPECT_EQ(page.find("nan"), std::string::npos);
  EXPECT_EQ(page.find("inf"), std::string::npos);
  EXPECT_EQ(page.find("over the run)"), std::string::npos);  // no change over a zero rate

  // Requests of one output token only: a TTFT distribution, no TPOT.
  ServeResult one = small_run();
  for (RequestTiming& q : one.schedule.requests) q.output_tokens = 1;
  const std::string single = format_serve_html("single", {}, one, false);
  EXPECT_FALSE(svg_with_id(single, "ttft").empty());
  EXPECT_TRUE(svg_with_id(single, "tpot").empty());
  EXPECT_NE(single.find("no TPOT"), std::string::npos);
}

}  // namespace
}  // namespace moesim
