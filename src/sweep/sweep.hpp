// Sweep expansion: `--vary KEY=VALUES` axes -> the cartesian product of config overrides.
// VALUES is a comma list whose items are literals or ranges: `1..1024*2` (geometric: 1, 2, 4, ... 1024),
// `0..1+0.25` (arithmetic, end inclusive), `a..b` (step 1). KEY may tie several keys to one value:
// `model.hidden,model.ffn=256..8192*2` sets both at each point. Output order is fixed: the first axis
// varies slowest, values in the order written. Pure string work, host only, deterministic.
// Covered by tests/sweep/sweep_expand_test.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace moesim {

// Most points one sweep may expand to (and most values one axis may hold).
constexpr size_t kMaxSweepPoints = 100000;

// One varied config key (or several tied keys) and its values, in order.
struct SweepAxis {
  std::string key;                  // as written, e.g. "workload.batch" or "model.hidden,model.ffn"
  std::vector<std::string> keys;    // the config key paths it sets, e.g. {"model.hidden", "model.ffn"}
  std::vector<std::string> values;  // the values as text, passed to apply_override as KEY=VALUE
};

// One point of a sweep: the value of each axis, and the overrides that set them.
struct SweepPoint {
  std::vector<std::string> values;    // [axes] in axis order
  std::vector<std::string> settings;  // "KEY=VALUE" for every key of every axis, in axis order
};

// Expands a VALUES list. Ranges of integers give integers; a range with a non-integer bound or step
// gives reals printed with up to 10 significant digits. Throws InputError, naming `context` (e.g.
// "--vary workload.batch=..."), on an empty item, a bad number, a geometric range with start <= 0 or
// factor <= 1, an arithmetic range with step <= 0, a range whose end is below its start, or more than
// kMaxSweepPoints values.
std::vector<std::string> expand_sweep_values(const std::string& list, const std::string& context);

// Parses one `KEY[,KEY2...]=VALUES` argument. Throws InputError when '=' is missing, a key is empty or
// holds spaces, or VALUES does not expand (see expand_sweep_values).
SweepAxis parse_vary(const std::string& key_eq_values);

// Parses every --vary argument; a key given twice (in one axis or across axes) is an InputError.
std::vector<SweepAxis> parse_varies(const std::vector<std::string>& varies);

// The cartesian product of the axes, the first axis varying slowest. No axes: one point with no
// settings. Throws InputError when the product exceeds kMaxSweepPoints.
std::vector<SweepPoint> sweep_points(const std::vector<SweepAxis>& axes);

}  // namespace moesim
