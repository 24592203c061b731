// The one set of number and cell formatters of every report (run, compare, sweep, validate, hardware,
// route, expert-parallel, check). Host only. Covered through
// the report tests (tests/report, tests/sweep) that compare printed tables and CSV.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace moesim::text {

// v with `precision` digits after the point; "-" when not finite.
inline std::string fixed(double v, int precision) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
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

}  // namespace moesim::text
