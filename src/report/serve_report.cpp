// A serving run as an HTML page (see serve_report.hpp).
#include "src/report/serve_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

#include "src/report/text_format.hpp"

namespace moesim {
namespace {

using text::html_escape;

// A series over time keeps, with more steps than 2 * kBuckets, each of kBuckets equal spans of the run's lowest and
// highest value: at most 1000 points a line. A distribution keeps at most kCdfSamples order statistics, two points
// each (the step up).
constexpr size_t kBuckets = 500;
constexpr size_t kCdfSamples = 500;

struct Point {
  double x = 0, y = 0;
};

struct Line {
  std::string name;
  const char* colour = "#4878a8";
  std::vector<Point> points;
  bool right = false;  // read against the right-hand axis
};

struct Marker {
  std::string label;
  double x = 0;
};

// An axis: from lo to hi, ticks every `step`.
struct Scale {
  double lo = 0, hi = 1, step = 0.2;
};

// An axis over [lo, hi] with about five ticks at 1, 2 or 5 times a power of ten, its ends on whole ticks. An empty
// or not finite span is made one unit wide.
Scale scale_over(double lo, double hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi <= lo) hi = lo + 1;
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  Scale s;
  s.step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
  s.lo = std::floor(lo / s.step + 1e-9) * s.step;
  s.hi = std::ceil(hi / s.step - 1e-9) * s.step;
  if (s.hi <= s.lo) s.hi = s.lo + s.step;
  return s;
}

// The digits after the point that tell ticks `step` apart.
int tick_precision(double step) {
  return std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 6);
}

// The largest y of the lines on one side, 0 for none.
double highest(const std::vector<Line>& lines, bool right) {
  double most = 0;
  for (const Line& l : lines)
    if (l.right == right)
      for (const Point& p : l.points) most = std::max(most, p.y);
  return most;
}

struct Chart {
  std::string id, title, x_label, y_label, right_label;
  Scale x, y, right;
  bool has_right = false;
  std::vector<Line> lines;
  std::vector<Marker> markers;
};

constexpr double kWidth = 680, kHeight = 230, kLeft = 64, kRightMargin = 64, kTop = 28, kBottom = 44;

// A line chart: grid and ticks on both axes (and a right-hand axis for the lines that read against it), the lines as
// polylines clipped to the plot, dashed vertical markers, the lines' names on top.
std::string line_chart(const Chart& c) {
  const double plot_w = kWidth - kLeft - kRightMargin, plot_h = kHeight - kTop - kBottom;
  const double bottom = kTop + plot_h, right_edge = kLeft + plot_w;
  auto px = [&](double x) {
    return kLeft + std::clamp((x - c.x.lo) / (c.x.hi - c.x.lo), 0.0, 1.0) * plot_w;
  };
  auto py = [&](double y, const Scale& s) {
    return bottom - std::clamp((y - s.lo) / (s.hi - s.lo), 0.0, 1.0) * plot_h;
  };
  auto f1 = [](double v) { return text::fixed(v, 1); };
  std::ostringstream os;
  os << "<h3>" << html_escape(c.title) << "</h3>\n<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"" << html_escape(c.id)
     << "\" width=\"" << kWidth << "\" height=\"" << kHeight << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
     << "\" role=\"img\" font-family=\"sans-serif\" font-size=\"11\">\n";
  // The ticks: at most a few dozen, whatever the scale says.
  auto ticks = [](const Scale& s) {
    std::vector<double> v;
    for (int i = 0; i <= 40; ++i) {
      const double t = s.lo + i * s.step;
      if (t > s.hi + s.step * 1e-6) break;
      v.push_back(t);
    }
    return v;
  };
  const int xp = tick_precision(c.x.step), yp = tick_precision(c.y.step), rp = tick_precision(c.right.step);
  for (double t : ticks(c.x)) {
    os << "<line x1=\"" << f1(px(t)) << "\" y1=\"" << f1(kTop) << "\" x2=\"" << f1(px(t)) << "\" y2=\"" << f1(bottom)
       << "\" stroke=\"#e4e4e4\"/><text x=\"" << f1(px(t)) << "\" y=\"" << f1(bottom + 14)
       << "\" text-anchor=\"middle\">" << text::fixed(t, xp) << "</text>\n";
  }
  for (double t : ticks(c.y)) {
    os << "<line x1=\"" << f1(kLeft) << "\" y1=\"" << f1(py(t, c.y)) << "\" x2=\"" << f1(right_edge) << "\" y2=\""
       << f1(py(t, c.y)) << "\" stroke=\"#e4e4e4\"/><text x=\"" << f1(kLeft - 4) << "\" y=\"" << f1(py(t, c.y) + 4)
       << "\" text-anchor=\"end\">" << text::fixed(t, yp) << "</text>\n";
  }
  if (c.has_right)
    for (double t : ticks(c.right))
      os << "<text x=\"" << f1(right_edge + 4) << "\" y=\"" << f1(py(t, c.right) + 4) << "\">" << text::fixed(t, rp)
         << "</text>\n";
  os << "<rect x=\"" << f1(kLeft) << "\" y=\"" << f1(kTop) << "\" width=\"" << f1(plot_w) << "\" height=\""
     << f1(plot_h) << "\" fill=\"none\" stroke=\"#888\"/>\n";
  os << "<text x=\"" << f1(kLeft + plot_w / 2) << "\" y=\"" << f1(kHeight - 6) << "\" text-anchor=\"middle\">"
     << html_escape(c.x_label) << "</text>\n";
  os << "<text transform=\"translate(14 " << f1(kTop + plot_h / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
     << html_escape(c.y_label) << "</text>\n";
  if (c.has_right)
    os << "<text transform=\"translate(" << f1(kWidth - 8) << " " << f1(kTop + plot_h / 2)
       << ") rotate(90)\" text-anchor=\"middle\">" << html_escape(c.right_label) << "</text>\n";
  // The right-hand axis's lines first, paler, so that the left-hand ones stay in sight on top of them.
  for (bool right : {true, false})
    for (const Line& l : c.lines) {
      if (l.right != right) continue;
      const Scale& s = l.right ? c.right : c.y;
      os << "<polyline fill=\"none\" stroke=\"" << l.colour << "\" stroke-width=\"1.5\""
         << (l.right ? " stroke-opacity=\"0.6\"" : "") << " points=\"";
      for (size_t i = 0; i < l.points.size(); ++i)
        os << (i ? " " : "") << f1(px(l.points[i].x)) << "," << f1(py(l.points[i].y, s));
      os << "\"><title>" << html_escape(l.name) << "</title></polyline>\n";
    }
  // Each marker's label a line lower than the one before, so that markers close together stay readable; left of
  // its line in the plot's right-hand part.
  for (size_t i = 0; i < c.markers.size(); ++i) {
    const Marker& m = c.markers[i];
    const double at = px(m.x);
    const bool left = at > kLeft + plot_w / 2;
    os << "<line x1=\"" << f1(at) << "\" y1=\"" << f1(kTop) << "\" x2=\"" << f1(at) << "\" y2=\"" << f1(bottom)
       << "\" stroke=\"#c06040\" stroke-dasharray=\"4 3\"/><text x=\"" << f1(left ? at - 3 : at + 3) << "\" y=\""
       << f1(kTop + 12 + 12 * static_cast<double>(i)) << "\" fill=\"#c06040\""
       << (left ? " text-anchor=\"end\"" : "") << ">" << html_escape(m.label) << "</text>\n";
  }
  double x = kLeft;
  for (const Line& l : c.lines) {
    const std::string name = l.name + (c.has_right ? (l.right ? " (right)" : " (left)") : "");
    os << "<text x=\"" << f1(x) << "\" y=\"" << f1(kTop - 9) << "\" fill=\"" << l.colour << "\">&#9632; "
       << html_escape(name) << "</text>\n";
    x += 7.0 * static_cast<double>(name.size()) + 30;
  }
  os << "</svg>\n";
  return os.str();
}

// One value of every step over time (x: the step's start). With more than 2 * kBuckets steps, the steps' span is
// cut into kBuckets equal buckets and each keeps its lowest and highest value, in the order they came.
template <class Value>
std::vector<Point> over_time(const std::vector<ServeStepRecord>& steps, Value value) {
  std::vector<Point> out;
  if (steps.size() <= 2 * kBuckets) {
    for (const ServeStepRecord& s : steps) {
      const double v = value(s);
      if (std::isfinite(s.start_s) && std::isfinite(v)) out.push_back({s.start_s, v});
    }
    return out;
  }
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (const ServeStepRecord& s : steps)
    if (std::isfinite(s.start_s)) t0 = std::min(t0, s.start_s), t1 = std::max(t1, s.start_s);
  const double span = t1 - t0;
  struct Bucket {
    bool any = false;
    size_t low_i = 0, high_i = 0;
    Point low, high;
  };
  std::vector<Bucket> buckets(kBuckets);
  for (size_t i = 0; i < steps.size(); ++i) {
    const double t = steps[i].start_s, v = value(steps[i]);
    if (!std::isfinite(t) || !std::isfinite(v)) continue;
    const size_t k = span > 0 ? std::min(kBuckets - 1, static_cast<size_t>((t - t0) / span * kBuckets)) : 0;
    Bucket& b = buckets[k];
    if (!b.any) {
      b = {true, i, i, {t, v}, {t, v}};
      continue;
    }
    if (v < b.low.y) b.low_i = i, b.low = {t, v};
    if (v > b.high.y) b.high_i = i, b.high = {t, v};
  }
  for (const Bucket& b : buckets) {
    if (!b.any) continue;
    if (b.low_i == b.high_i) {
      out.push_back(b.low);
    } else if (b.low_i < b.high_i) {
      out.push_back(b.low);
      out.push_back(b.high);
    } else {
      out.push_back(b.high);
      out.push_back(b.low);
    }
  }
  return out;
}

// The empirical CDF of `values` as a staircase: at most kCdfSamples order statistics, evenly spaced by rank, each
// a step up from (rank / n) to ((rank + 1) / n).
std::vector<Point> cdf_points(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size(), k = std::min(n, kCdfSamples);
  std::vector<Point> out;
  for (size_t j = 0; j < k; ++j) {
    const size_t i = k == 1 ? n - 1 : j * (n - 1) / (k - 1);
    out.push_back({values[i], static_cast<double>(i) / static_cast<double>(n)});
    out.push_back({values[i], static_cast<double>(i + 1) / static_cast<double>(n)});
  }
  return out;
}

// A distribution chart of latencies in ms, with its p50, p90 and p99 marked.
std::string distribution(const std::string& id, const std::string& title, const std::string& what,
                         const std::vector<double>& ms, const char* colour) {
  const LatencySummary q = summarize_latency(ms);
  Chart c;
  c.id = id;
  c.title = title;
  c.x_label = what + " (ms)";
  c.y_label = "fraction of requests";
  const std::vector<Point> points = cdf_points(ms);
  c.x = scale_over(std::min(0.0, points.front().x), points.back().x);
  c.y = {0, 1, 0.2};
  c.lines.push_back({what + " CDF", colour, points, false});
  c.markers = {{"p50 " + text::fixed(q.p50, 2), q.p50}, {"p90 " + text::fixed(q.p90, 2), q.p90},
               {"p99 " + text::fixed(q.p99, 2), q.p99}};
  return line_chart(c);
}

std::string ms(double s) { return text::fixed(s * 1e3, 2); }
std::string count(int64_t v) { return std::to_string(v); }

using Cell = std::string (*)(const ServeMetrics&);
const std::pair<const char*, Cell> kHeadline[] = {
    {"output tokens/s per GPU", [](const ServeMetrics& m) { return text::fixed(m.output_tokens_per_s_per_gpu, 1); }},
    {"total tokens/s per GPU", [](const ServeMetrics& m) { return text::fixed(m.total_tokens_per_s_per_gpu, 1); }},
    {"tokens/s per user", [](const ServeMetrics& m) { return text::fixed(m.tokens_per_s_per_user, 1); }},
    {"TTFT mean (ms)", [](const ServeMetrics& m) { return ms(m.ttft_s.mean); }},
    {"TTFT p50 (ms)", [](const ServeMetrics& m) { return ms(m.ttft_s.p50); }},
    {"TTFT p90 (ms)", [](const ServeMetrics& m) { return ms(m.ttft_s.p90); }},
    {"TTFT p99 (ms)", [](const ServeMetrics& m) { return ms(m.ttft_s.p99); }},
    {"TPOT mean (ms)", [](const ServeMetrics& m) { return ms(m.tpot_s.mean); }},
    {"TPOT p50 (ms)", [](const ServeMetrics& m) { return ms(m.tpot_s.p50); }},
    {"TPOT p90 (ms)", [](const ServeMetrics& m) { return ms(m.tpot_s.p90); }},
    {"TPOT p99 (ms)", [](const ServeMetrics& m) { return ms(m.tpot_s.p99); }},
    {"E2E mean (ms)", [](const ServeMetrics& m) { return ms(m.e2e_s.mean); }},
    {"E2E p50 (ms)", [](const ServeMetrics& m) { return ms(m.e2e_s.p50); }},
    {"E2E p90 (ms)", [](const ServeMetrics& m) { return ms(m.e2e_s.p90); }},
    {"E2E p99 (ms)", [](const ServeMetrics& m) { return ms(m.e2e_s.p99); }},
    {"balance ratio mean", [](const ServeMetrics& m) { return text::fixed(m.balance_ratio_mean, 3); }},
    {"requests", [](const ServeMetrics& m) { return count(m.requests); }},
    {"duration (s)", [](const ServeMetrics& m) { return text::fixed(m.duration_s, 3); }},
    {"steps", [](const ServeMetrics& m) { return count(m.steps); }},
    {"preemptions", [](const ServeMetrics& m) { return count(m.preemptions); }},
};

// "+12.3%" of `v` over `base`; empty when base is not positive.
std::string change(double v, double base) {
  if (!(base > 0) || !std::isfinite(v)) return "";
  const double pct = (v / base - 1) * 100;
  return (pct >= 0 ? " (+" : " (") + text::fixed(pct, 1) + "% over the run)";
}

std::string headline(const ServeResult& r, bool counterfactuals) {
  std::ostringstream os;
  os << "<table class=\"headline\">\n<tr><th></th><th>actual</th>";
  if (counterfactuals) os << "<th>balanced routing</th><th>balanced attention</th>";
  os << "</tr>\n";
  for (const auto& [name, cell] : kHeadline) {
    os << "<tr><th>" << html_escape(name) << "</th><td>" << cell(r.metrics) << "</td>";
    if (counterfactuals)
      os << "<td>" << cell(r.balanced_routing) << "</td><td>" << cell(r.balanced_attention) << "</td>";
    os << "</tr>\n";
  }
  os << "</table>\n<p>On " << r.gpus << (r.gpus == 1 ? " GPU." : " GPUs.");
  if (counterfactuals) {
    const double base = r.metrics.output_tokens_per_s_per_gpu;
    os << " Output tokens/s per GPU with balanced routing "
       << text::fixed(r.balanced_routing.output_tokens_per_s_per_gpu, 1)
       << change(r.balanced_routing.output_tokens_per_s_per_gpu, base) << ", with balanced attention "
       << text::fixed(r.balanced_attention.output_tokens_per_s_per_gpu, 1)
       << change(r.balanced_attention.output_tokens_per_s_per_gpu, base) << ".";
  }
  os << "</p>\n";
  return os.str();
}

std::string time_series(const std::vector<ServeStepRecord>& steps) {
  if (steps.empty()) return "<p>no steps</p>\n";
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (const ServeStepRecord& s : steps)
    if (std::isfinite(s.start_s) && std::isfinite(s.time_s))
      t0 = std::min(t0, s.start_s), t1 = std::max(t1, s.start_s + s.time_s);
  const Scale x = scale_over(t0, t1);
  std::ostringstream os;

  Chart batch;
  batch.id = "batch";
  batch.title = "The batch: decoding requests and prompt tokens a step (all ranks)";
  batch.x_label = "time (s)";
  batch.y_label = "decoding requests";
  batch.right_label = "prefill tokens";
  batch.x = x;
  batch.has_right = true;
  auto requests = [](const ServeStepRecord& s) { return static_cast<double>(s.decode_requests); };
  auto prompt = [](const ServeStepRecord& s) { return static_cast<double>(s.prefill_tokens); };
  batch.lines.push_back({"decoding requests", "#4878a8", over_time(steps, requests), false});
  batch.lines.push_back({"prefill tokens", "#d8a038", over_time(steps, prompt), true});
  batch.y = scale_over(0, highest(batch.lines, false));
  batch.right = scale_over(0, highest(batch.lines, true));
  os << line_chart(batch);

  Chart kv;
  kv.id = "kv-use";
  kv.title = "KV use: the fullest rank's cache after each step";
  kv.x_label = "time (s)";
  kv.y_label = "KV use (of capacity)";
  kv.x = x;
  kv.y = {0, 1, 0.2};
  kv.lines.push_back({"KV use", "#a070c0", over_time(steps, [](const ServeStepRecord& s) { return s.kv_use; })});
  os << line_chart(kv);

  Chart step_time;
  step_time.id = "step-time";
  step_time.title = "Step time";
  step_time.x_label = "time (s)";
  step_time.y_label = "step time (ms)";
  step_time.x = x;
  step_time.lines.push_back(
      {"step time", "#c06040", over_time(steps, [](const ServeStepRecord& s) { return s.time_s * 1e3; })});
  step_time.y = scale_over(0, highest(step_time.lines, false));
  os << line_chart(step_time);

  Chart balance;
  balance.id = "balance";
  balance.title = "Balance ratio over the ranks: mean over max tokens a rank";
  balance.x_label = "time (s)";
  balance.y_label = "balance ratio";
  balance.x = x;
  balance.y = {0, 1, 0.2};
  balance.lines.push_back(
      {"balance ratio", "#78a848", over_time(steps, [](const ServeStepRecord& s) { return s.balance_ratio; })});
  os << line_chart(balance);
  if (steps.size() > 2 * kBuckets)
    os << "<p>" << steps.size() << " steps: each line shows the lowest and the highest value of each of " << kBuckets
       << " equal spans of the run.</p>\n";
  return os.str();
}

std::string distributions(const std::vector<RequestTiming>& requests) {
  if (requests.empty()) return "<p>no requests</p>\n";
  std::vector<double> ttft, tpot;
  for (const RequestTiming& q : requests) {
    const double t = (q.first_token_s - q.arrival_s) * 1e3;
    if (std::isfinite(t)) ttft.push_back(t);
    if (q.output_tokens > 1 && q.finish_s > q.first_token_s) {
      const double p = (q.finish_s - q.first_token_s) / static_cast<double>(q.output_tokens - 1) * 1e3;
      if (std::isfinite(p)) tpot.push_back(p);
    }
  }
  std::ostringstream os;
  if (ttft.empty())
    os << "<p>no requests with a first token</p>\n";
  else
    os << distribution("ttft", "TTFT over requests (CDF)", "TTFT", ttft, "#4878a8");
  if (tpot.empty())
    os << "<p>no requests with more than one output token: no TPOT</p>\n";
  else
    os << distribution("tpot", "TPOT over requests (CDF)", "TPOT", tpot, "#d8a038");
  return os.str();
}

constexpr const char* kDefinitions =
    "TTFT: time to first token, from a request's arrival to the step that finishes its prompt. TPOT: time per output "
    "token after the first, (finish - first token) / (output tokens - 1), over requests of more than one output token. "
    "E2E: arrival to finish. Tokens/s per GPU: output (or prompt + output) tokens over the run's duration (first "
    "arrival to last finish) and the GPUs; tokens/s per user: the mean over requests of 1 / TPOT. Percentiles "
    "interpolate linearly between order statistics. Balance ratio: the mean over the maximum of the ranks' tokens (KV "
    "tokens in a decode step, prompt tokens in a prefill step); 1 is even. KV use: the fullest rank's cached tokens "
    "over its capacity, after the step. Balanced routing reruns the stream with every draw's loads even over the "
    "experts; balanced attention gives every rank the ranks' mean share each step; each rerun schedules the whole "
    "stream again, so its batches differ too.";

// The page's head, its title and the run's header lines (the table's first block) as preformatted text.
std::string page_head(const std::string& title, const std::vector<std::string>& header_lines) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(title)
     << "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:60em}"
        "table{border-collapse:collapse}th,td{padding:2px 10px;border-bottom:1px solid #ddd}"
        "td{text-align:right;font-variant-numeric:tabular-nums}th{text-align:left}svg{display:block}</style>"
        "</head><body>\n<h1>"
     << html_escape(title) << "</h1>\n";
  if (!header_lines.empty()) {
    os << "<pre>";
    for (size_t i = 0; i < header_lines.size(); ++i) os << (i ? "\n" : "") << html_escape(header_lines[i]);
    os << "</pre>\n";
  }
  return os.str();
}

}  // namespace

std::string format_serve_html(const std::string& title, const std::vector<std::string>& header_lines,
                              const ServeResult& r, bool counterfactuals) {
  std::ostringstream os;
  os << page_head(title, header_lines);
  os << "<h2>Headline</h2>\n" << headline(r, counterfactuals);
  os << "<h2>Over time</h2>\n" << time_series(r.schedule.steps);
  os << "<h2>Latency over requests</h2>\n" << distributions(r.schedule.requests);
  os << "<h2>Definitions</h2>\n<p>" << html_escape(kDefinitions) << "</p>\n";
  os << "</body></html>\n";
  return os.str();
}

std::string format_search_html(const std::string& title, const std::vector<std::string>& header_lines,
                               const std::vector<SearchLayout>& layouts,
                               const std::vector<std::pair<size_t, size_t>>& best,
                               const std::vector<std::pair<size_t, size_t>>& front,
                               const std::vector<std::pair<size_t, size_t>>& balanced_front) {
  std::ostringstream os;
  os << page_head(title, header_lines);
  os << "<h2>Best layouts</h2>\n";
  if (best.empty()) {
    os << "<p>No layout meets the targets at these batches.</p>\n";
  } else {
    os << "<table><tr><th>layout</th><th>batch</th><th>output tokens/s a GPU</th><th>tokens/s a user</th>"
          "<th>TPOT (ms)</th><th>TTFT (ms)</th><th>balanced routing: tokens/s a GPU</th></tr>\n";
    for (const auto& [l, i] : best) {
      const SteadyPoint& a = layouts[l].actual[i];
      os << "<tr><th>" << html_escape(layouts[l].label) << "</th><td>" << a.batch << "</td><td>"
         << text::fixed(a.output_tokens_per_s_per_gpu, 1) << "</td><td>" << text::fixed(a.tokens_per_s_per_user, 2)
         << "</td><td>" << ms(a.tpot_s) << "</td><td>" << ms(a.ttft_s) << "</td><td>"
         << text::fixed(layouts[l].balanced[i].output_tokens_per_s_per_gpu, 1) << "</td></tr>\n";
    }
    os << "</table>\n";
  }
  Chart c;
  c.id = "front";
  c.title = "The front: output tokens/s a GPU against tokens/s a user";
  c.x_label = "tokens/s a user";
  c.y_label = "output tokens/s a GPU";
  auto line = [&](const std::vector<std::pair<size_t, size_t>>& v, bool balanced) {
    std::vector<Point> pts;
    for (const auto& [l, i] : v) {
      const SteadyPoint& p = balanced ? layouts[l].balanced[i] : layouts[l].actual[i];
      pts.push_back({p.tokens_per_s_per_user, p.output_tokens_per_s_per_gpu});
    }
    return pts;
  };
  c.lines.push_back({"actual routing", "#4878a8", line(front, false), false});
  c.lines.push_back({"balanced routing", "#d8a038", line(balanced_front, true), false});
  double most_x = 0;
  for (const Line& l : c.lines)
    for (const Point& p : l.points) most_x = std::max(most_x, p.x);
  c.x = scale_over(0, most_x);
  c.y = scale_over(0, highest(c.lines, false));
  os << "<h2>The front</h2>\n" << line_chart(c)
     << "<p>Each point is a layout at a batch that no other point beats in both tokens/s a GPU and tokens/s a user; "
        "the balanced line runs the same layouts with every expert's load even. The steady state of a closed loop "
        "of fixed lengths (docs/serve.md \"Searching layouts\").</p>\n";
  os << "</body></html>\n";
  return os.str();
}

}  // namespace moesim
