// Sweep expansion (see sweep.hpp): VALUES lists with ranges, --vary parsing, the cartesian product.
// Integer ranges step in exact integer arithmetic; real ranges compute value i as start + i * step (or
// start * factor^i) rather than accumulating, so that the end is hit without drift.
// Host only. Covered by tests/sweep/sweep_expand_test.cpp.
#include "src/sweep/sweep.hpp"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

#include "src/common/error.hpp"

namespace moesim {
namespace {

// A number written in a range: its value, and whether the text was a plain integer.
struct Number {
  double value = 0;
  bool integer = false;
  long long as_int = 0;
};

[[noreturn]] void bad(const std::string& context, const std::string& what, const std::string& got) {
  throw InputError(context + ": expected " + what + ", got '" + got + "'");
}

bool parse_number(const std::string& s, Number& out) {
  if (s.empty() || s.find_first_of(" \t") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  if (errno == 0 && end == s.c_str() + s.size()) {
    out.value = static_cast<double>(i);
    out.integer = true;
    out.as_int = i;
    return true;
  }
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(d)) return false;
  out.value = d;
  out.integer = false;
  return true;
}

std::string format_real(double v) {
  if (v == 0) v = 0;  // no "-0"
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

void push(std::vector<std::string>& out, std::string v, const std::string& context) {
  if (out.size() >= kMaxSweepPoints)
    throw InputError(context + ": expected at most " + std::to_string(kMaxSweepPoints) + " values, got more");
  out.push_back(std::move(v));
}

// Expands one `START..END[*FACTOR|+STEP]` item into `out`.
void expand_range(const std::string& item, size_t dots, const std::string& context, std::vector<std::string>& out) {
  const std::string start_text = item.substr(0, dots);
  std::string rest = item.substr(dots + 2);
  // The operator follows the end number; search from position 1 so that a sign or an exponent sign
  // ("1e+3") inside the end is not taken for it: an exponent's '+' always follows 'e' or 'E'.
  char op = 0;
  size_t op_pos = std::string::npos;
  for (size_t i = 1; i < rest.size(); ++i) {
    if ((rest[i] == '*' || rest[i] == '+') && rest[i - 1] != 'e' && rest[i - 1] != 'E') {
      op = rest[i];
      op_pos = i;
      break;
    }
  }
  const std::string end_text = op ? rest.substr(0, op_pos) : rest;
  const std::string step_text = op ? rest.substr(op_pos + 1) : "1";
  const char* shape = "a range START..END, START..END*FACTOR or START..END+STEP";
  Number start, end, step;
  if (!parse_number(start_text, start) || !parse_number(end_text, end) || !parse_number(step_text, step))
    bad(context, shape, item);
  if (end.value < start.value) bad(context, "a range whose END is at least its START", item);
  const bool integers = start.integer && end.integer && step.integer;
  if (op == '*') {
    if (start.value <= 0) bad(context, "a geometric range with START > 0", item);
    if (step.value <= 1) bad(context, "a geometric range with FACTOR > 1", item);
    if (integers) {
      for (long long v = start.as_int; v <= end.as_int;) {
        push(out, std::to_string(v), context);
        if (v > std::numeric_limits<long long>::max() / step.as_int) break;
        v *= step.as_int;
      }
    } else {
      const double tol = 1e-9 * end.value;
      for (int i = 0;; ++i) {
        const double v = start.value * std::pow(step.value, i);
        if (v > end.value + tol) break;
        push(out, format_real(v), context);
      }
    }
  } else {
    if (step.value <= 0) bad(context, "a range with STEP > 0", item);
    if (integers) {
      for (long long v = start.as_int; v <= end.as_int;) {
        push(out, std::to_string(v), context);
        if (v > std::numeric_limits<long long>::max() - step.as_int) break;
        v += step.as_int;
      }
    } else {
      const double tol = 1e-9 * step.value;
      for (long long i = 0;; ++i) {
        const double v = start.value + static_cast<double>(i) * step.value;
        if (v > end.value + tol) break;
        push(out, format_real(std::fabs(v - end.value) <= tol ? end.value : v), context);
      }
    }
  }
}

}  // namespace

std::vector<std::string> expand_sweep_values(const std::string& list, const std::string& context) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = list.find(',', begin);
    const std::string item = list.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty()) bad(context, "a comma list of values or ranges with no empty item", list);
    const size_t dots = item.find("..");
    if (dots == std::string::npos) {
      push(out, item, context);
    } else {
      expand_range(item, dots, context, out);
    }
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

SweepAxis parse_vary(const std::string& key_eq_values) {
  const size_t eq = key_eq_values.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError("--vary: expected KEY=v1,v2,... or KEY=START..END*FACTOR, got '" + key_eq_values + "'");
  SweepAxis axis;
  axis.key = key_eq_values.substr(0, eq);
  size_t begin = 0;
  while (true) {
    const size_t comma = axis.key.find(',', begin);
    const std::string k = axis.key.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (k.empty() || k.find_first_of(" \t") != std::string::npos)
      throw InputError("--vary: expected a config key path like workload.batch (or tied keys a.b,c.d), got '" +
                       axis.key + "'");
    axis.keys.push_back(k);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  axis.values = expand_sweep_values(key_eq_values.substr(eq + 1), "--vary " + key_eq_values);
  return axis;
}

std::vector<SweepAxis> parse_varies(const std::vector<std::string>& varies) {
  std::vector<SweepAxis> axes;
  std::set<std::string> keys;
  for (const std::string& v : varies) {
    SweepAxis a = parse_vary(v);
    for (const std::string& k : a.keys)
      if (!keys.insert(k).second)
        throw InputError("--vary: expected each key once, got '" + k + "' twice; list its values in one --vary");
    axes.push_back(std::move(a));
  }
  return axes;
}

std::vector<SweepPoint> sweep_points(const std::vector<SweepAxis>& axes) {
  size_t total = 1;
  for (const SweepAxis& a : axes) {
    if (a.values.empty()) throw InputError("--vary " + a.key + ": expected at least one value");
    if (total > kMaxSweepPoints / a.values.size())
      throw InputError("--vary: expected at most " + std::to_string(kMaxSweepPoints) +
                       " points in the product of the axes, got more");
    total *= a.values.size();
  }
  std::vector<SweepPoint> points;
  points.reserve(total);
  std::vector<size_t> index(axes.size(), 0);
  for (size_t p = 0; p < total; ++p) {
    SweepPoint point;
    for (size_t a = 0; a < axes.size(); ++a) {
      const std::string& v = axes[a].values[index[a]];
      point.values.push_back(v);
      for (const std::string& k : axes[a].keys) point.settings.push_back(k + "=" + v);
    }
    points.push_back(std::move(point));
    // Odometer: the last axis turns fastest.
    for (size_t a = axes.size(); a-- > 0;) {
      if (++index[a] < axes[a].values.size()) break;
      index[a] = 0;
    }
  }
  return points;
}

}  // namespace moesim
