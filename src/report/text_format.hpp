// The one set of number and cell formatters of every report (run, compare, sweep, validate, hardware,
// route, expert-parallel, check). Host only. Covered through
// the report tests (tests/report, tests/sweep) that compare printed tables and CSV.
#pragma once

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <string>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace moesim::text {

// v with `precision` digits after the point; "-" when not finite. A value that rounds to zero prints
// unsigned ("0.0", never "-0.0": a part of -1e-12 s is no saving).
inline std::string fixed(double v, int precision) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  if (buf[0] == '-' && std::strspn(buf + 1, "0.") == std::strlen(buf + 1)) return buf + 1;
  return buf;
}

// v in %.6g: enough digits to read back what a table shows, short for small and large values.
inline std::string real(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Bytes in MiB with one decimal: "12.5 MiB".
inline std::string mib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1 << 20));
  return buf;
}

// A CSV cell (RFC 4180): quoted, with doubled quotes, when it holds a comma, a quote or a newline.
inline std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// The terminal width every table and legend of a report keeps to by default (--wide lifts it for tables).
constexpr size_t kTerminalWidth = 120;

// `text` with every line longer than `width` broken at spaces; continuation lines start with the line's own
// leading spaces and then `indent`. A word longer than the width stays whole on its own line.
inline std::string wrap(const std::string& text, size_t width = kTerminalWidth, const std::string& indent = "  ") {
  std::string out;
  size_t from = 0;
  while (from <= text.size()) {
    size_t nl = text.find('\n', from);
    const bool last = nl == std::string::npos;
    if (last) nl = text.size();
    std::string line = text.substr(from, nl - from);
    const size_t own = std::min(line.size(), line.find_first_not_of(' '));  // the line's leading spaces
    const std::string next = std::string(own, ' ') + indent;
    while (line.size() > width) {
      const size_t lead = std::min(line.size(), line.find_first_not_of(' '));
      size_t cut = line.rfind(' ', width);
      if (cut == std::string::npos || cut <= lead) cut = line.find(' ', width);
      if (cut == std::string::npos) break;
      out += line.substr(0, cut) + "\n";
      line = next + line.substr(cut + 1);
    }
    out += line;
    if (last) break;
    out += "\n";
    from = nl + 1;
  }
  return out;
}

// The columns a table shows within `limit` characters: every column of priority 0, then the others by
// priority (a smaller number first; equal ones left to right) while they fit, each cell `gap` from the next.
// `width`: each column's widest cell. Returned in their original order. Without a limit (0): all.
inline std::vector<size_t> fit_columns(const std::vector<size_t>& width, const std::vector<int>& priority, size_t limit,
                                       size_t gap = 2) {
  if (priority.size() != width.size()) throw std::logic_error("fit_columns: one priority per column");
  std::vector<size_t> order(width.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<bool> keep(width.size(), false);
  size_t used = 0, shown = 0;
  auto add = [&](size_t c) {
    keep[c] = true;
    used += width[c] + (shown++ ? gap : 0);
  };
  for (size_t c : order)
    if (limit == 0 || priority[c] == 0) add(c);
  if (limit > 0) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return priority[a] < priority[b]; });
    for (size_t c : order)
      if (!keep[c] && used + gap + width[c] <= limit) add(c);
  }
  std::vector<size_t> out;
  for (size_t c = 0; c < width.size(); ++c)
    if (keep[c]) out.push_back(c);
  return out;
}

// `s` as HTML text or an attribute value: &, <, > and " escaped.
inline std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace moesim::text
