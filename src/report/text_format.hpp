// Number and cell formatting shared by the run, sweep and validation reports. Host only. Covered through
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
