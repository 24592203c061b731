// Reader and writer of routing traces (see trace_replay.hpp): JSON Lines through nlohmann::json, one
// line at a time so that every error names its line, into flat arrays (FlatTrace) ordered by an index. Host only. Covered by tests/workload/trace_replay_test.cpp.
#include "src/workload/trace_replay.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>
#include <thrust/system/cpp/execution_policy.h>

#include "src/common/error.hpp"
#include "src/common/json_error.hpp"
#include "src/workload/megatron_loads.hpp"
#include "router/capacity.hpp"
#include "router/route.hpp"

namespace moesim {
namespace {

using nlohmann::json;

std::string describe(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

class LineReader {
 public:
  LineReader(const std::string& name, int64_t line, const json& obj) : name_(name), line_(line), obj_(obj) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(name_ + ":" + std::to_string(line_) + ": " + what);
  }
  [[noreturn]] void expected(const std::string& key, const std::string& what, const std::string& got) const {
    fail("\"" + key + "\": expected " + what + ", got " + got);
  }

  bool has(const char* key) const { return obj_.contains(key); }

  int64_t integer(const char* key, int64_t lo, int64_t hi) const {
    if (!obj_.contains(key)) fail("missing \"" + std::string(key) + "\" (required: step, layer, token, experts, weights)");
    const json& v = obj_.at(key);
    const std::string what = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!v.is_number_integer()) expected(key, what, describe(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) expected(key, what, describe(v));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) expected(key, what, describe(v));
    return x;
  }

  const json& array(const char* key, const std::string& what) const {
    if (!obj_.contains(key)) fail("missing \"" + std::string(key) + "\" (required: step, layer, token, experts, weights)");
    const json& v = obj_.at(key);
    if (!v.is_array()) expected(key, what, describe(v));
    return v;
  }

  // The numbers of `v`, a list that the message calls `key`.
  std::vector<float> numbers_of(const std::string& key, const json& v, size_t count, const std::string& what) const {
    if (!v.is_array()) expected(key, what, describe(v));
    if (v.size() != count) expected(key, what, std::to_string(v.size()) + " numbers");
    std::vector<float> out;
    for (const json& x : v) {
      if (!x.is_number()) expected(key, what, describe(x));
      const double d = x.get<double>();
      if (!std::isfinite(d) || !std::isfinite(static_cast<float>(d))) expected(key, what, describe(x));
      out.push_back(static_cast<float>(d));
    }
    return out;
  }

  std::string text(const char* key) const {
    const json& v = obj_.at(key);
    if (!v.is_string()) expected(key, "\"prefill\" or \"decode\"", describe(v));
    const std::string s = v.get<std::string>();
    if (s != "prefill" && s != "decode") expected(key, "\"prefill\" or \"decode\"", describe(v));
    return s;
  }

  void no_unknown_keys() const {
    static const char* const known[] = {"step",   "layer", "token",    "experts", "weights",
                                        "logits", "kept",  "token_id", "phase",   "token_ids"};
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return it.key() == k; }) == std::end(known))
        fail("unknown key \"" + it.key() +
             "\" (known: step, layer, token, experts, weights, logits, kept, token_id, phase; a batch line: token_ids)");
    }
  }
  // A batch line (lists of rows) names no single token.
  void only_batch_keys() const {
    for (const char* key : {"token", "token_id"})
      if (obj_.contains(key)) fail("\"" + std::string(key) + "\": a batch line (\"experts\" a list of rows) has \"token_ids\", not \"" + key + "\"");
  }
  // A token's line has no list of token ids.
  void no_batch_keys() const {
    if (obj_.contains("token_ids")) fail("\"token_ids\": expected only on a batch line (\"experts\" a list of rows per token)");
  }

 private:
  const std::string& name_;
  int64_t line_;
  const json& obj_;
};

std::string format_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

}  // namespace

namespace {

const char* phase_name(uint8_t code) { return code == 1 ? "prefill" : code == 2 ? "decode" : ""; }

// Parses JSON Lines from `in` into flat arrays (see FlatTrace), then orders the rows by (step, layer, token)
// and checks each batch: duplicate tokens and mixed phases, in batch order, as parse_trace always has.
FlatTrace parse_flat(std::istream& in, const std::string& name, int num_experts) {
  MOESIM_REQUIRE(num_experts >= 1, "parse_trace needs num_experts >= 1, got " << num_experts);
  constexpr int64_t kMaxIndex = (int64_t{1} << 31) - 1;
  FlatTrace t;
  t.num_experts = num_experts;
  t.row_offset.push_back(0);
  int64_t first_line = 0;  // the first data line, which decides whether the trace has logits
  const std::string ids_what = "a list of distinct expert ids in [0, " + std::to_string(num_experts) + ")";
  std::vector<bool> seen(num_experts, false);
  std::string raw;
  for (int64_t line_no = 1; std::getline(in, raw); ++line_no) {
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    if (raw.find_first_not_of(" \t") == std::string::npos) continue;
    json obj;
    try {
      obj = json::parse(raw);
    } catch (const json::exception& e) {
      throw InputError(name + ":" + std::to_string(line_no) + ": expected one JSON object per line, got invalid JSON: " +
                       json_error_text(e.what()));
    }
    if (!obj.is_object()) {
      throw InputError(name + ":" + std::to_string(line_no) + ": expected one JSON object per line, got " + describe(obj));
    }
    LineReader r(name, line_no, obj);
    r.no_unknown_keys();
    const int64_t step = r.integer("step", 0, kMaxIndex);
    const int layer = static_cast<int>(r.integer("layer", 0, kMaxIndex));
    uint8_t phase = 0;
    if (r.has("phase")) phase = r.text("phase") == "prefill" ? 1 : 2;
    const bool line_has_logits = r.has("logits");
    if (first_line == 0) {
      first_line = line_no;
      t.has_logits = line_has_logits;
    } else if (line_has_logits != t.has_logits) {
      r.fail(std::string(line_has_logits ? "has" : "has no") + " \"logits\" but line " + std::to_string(first_line) +
             (t.has_logits ? " has" : " has none") + ": a trace carries logits on every line or on none");
    }
    // One token's row: `at` names the row's values in messages ("experts", or "experts[3]" on a batch line).
    auto add_row = [&](int64_t token, int64_t token_id, const json& experts, const json& weights, const json* kept,
                       const json* logits, const std::string& at) {
      const std::string ex_key = "experts" + at, w_key = "weights" + at, kept_key = "kept" + at,
                        lg_key = "logits" + at;
      if (!experts.is_array()) r.expected(ex_key, ids_what, describe(experts));
      std::fill(seen.begin(), seen.end(), false);
      const size_t first = t.expert.size();
      for (const json& x : experts) {
        if (!x.is_number_integer()) r.expected(ex_key, ids_what, describe(x));
        const int64_t ex = x.get<int64_t>();
        if (ex < 0 || ex >= num_experts) {
          r.expected(ex_key, ids_what + " (model.experts = " + std::to_string(num_experts) + ")", describe(x));
        }
        if (seen[ex]) r.expected(ex_key, ids_what, "expert " + std::to_string(ex) + " twice");
        seen[ex] = true;
        t.expert.push_back(static_cast<int32_t>(ex));
      }
      const size_t k = t.expert.size() - first;
      const std::vector<float> w =
          r.numbers_of(w_key, weights, k, std::to_string(k) + " finite numbers, one per expert");
      t.weight.insert(t.weight.end(), w.begin(), w.end());
      t.kept.resize(first + k, 1);
      if (kept != nullptr) {
        const std::string what = std::to_string(k) + " flags (0 or 1), one per expert";
        if (!kept->is_array()) r.expected(kept_key, what, describe(*kept));
        if (kept->size() != k) r.expected(kept_key, what, std::to_string(kept->size()) + " flags");
        for (size_t i = 0; i < k; ++i) {
          const json& f = (*kept)[i];
          if (f.is_boolean()) {
            t.kept[first + i] = f.get<bool>() ? 1 : 0;
          } else if (f.is_number_integer() && (f.get<int64_t>() == 0 || f.get<int64_t>() == 1)) {
            t.kept[first + i] = static_cast<uint8_t>(f.get<int64_t>());
          } else {
            r.expected(kept_key, what, describe(f));
          }
        }
      }
      if (logits != nullptr) {
        const std::vector<float> lg = r.numbers_of(lg_key, *logits, static_cast<size_t>(num_experts),
                                                   std::to_string(num_experts) + " finite router logits (model.experts)");
        t.logits.insert(t.logits.end(), lg.begin(), lg.end());
      }
      t.row_step.push_back(step);
      t.row_layer.push_back(static_cast<int32_t>(layer));
      t.row_token.push_back(token);
      t.row_token_id.push_back(token_id);
      t.row_line.push_back(line_no);
      t.row_phase.push_back(phase);
      t.row_offset.push_back(static_cast<int64_t>(t.expert.size()));
    };
    const json& experts = r.array("experts", ids_what);
    if (!r.has("token") && !experts.empty() && experts.front().is_array()) {
      // A batch line: the (step, layer) batch's tokens 0..n-1, row i of each list (docs/workloads.md).
      r.only_batch_keys();
      const size_t n = experts.size();
      const std::string rows_what = std::to_string(n) + " rows, one per token of \"experts\"";
      const json& weights = r.array("weights", rows_what);
      if (weights.size() != n) r.expected("weights", rows_what, std::to_string(weights.size()) + " rows");
      const json* kept = r.has("kept") ? &r.array("kept", rows_what) : nullptr;
      if (kept != nullptr && kept->size() != n) r.expected("kept", rows_what, std::to_string(kept->size()) + " rows");
      const json* logits = line_has_logits ? &r.array("logits", rows_what) : nullptr;
      if (logits != nullptr && logits->size() != n)
        r.expected("logits", rows_what, std::to_string(logits->size()) + " rows");
      const json* ids = r.has("token_ids") ? &r.array("token_ids", rows_what) : nullptr;
      if (ids != nullptr && ids->size() != n) r.expected("token_ids", rows_what, std::to_string(ids->size()) + " ids");
      for (size_t i = 0; i < n; ++i) {
        int64_t token_id = -1;
        if (ids != nullptr) {
          const json& id = (*ids)[i];
          const bool fits = id.is_number_integer() &&
                            (id.is_number_unsigned()
                                 ? id.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                                 : id.get<int64_t>() >= 0);
          if (!fits) r.expected("token_ids", "integers >= 0", describe(id));
          token_id = id.get<int64_t>();
        }
        const std::string at = "[" + std::to_string(i) + "]";
        add_row(static_cast<int64_t>(i), token_id, experts[i], weights[i], kept ? &(*kept)[i] : nullptr,
                logits ? &(*logits)[i] : nullptr, at);
      }
      if (n == 0) r.fail("\"experts\": expected at least one token's row, got none");
    } else {
      r.no_batch_keys();
      const int64_t token = r.integer("token", 0, kMaxIndex);
      const int64_t token_id = r.has("token_id") ? r.integer("token_id", 0, std::numeric_limits<int64_t>::max()) : -1;
      add_row(token, token_id, experts, r.array("weights", "one finite number per expert"),
              r.has("kept") ? &r.array("kept", "one flag (0 or 1) per expert") : nullptr,
              line_has_logits ? &r.array("logits", std::to_string(num_experts) + " finite router logits") : nullptr, "");
    }
  }
  const int64_t rows = static_cast<int64_t>(t.row_step.size());
  if (rows == 0) throw InputError(name + ": expected at least one trace line (JSON Lines), got none");

  t.order.resize(rows);
  for (int64_t i = 0; i < rows; ++i) t.order[i] = i;
  std::stable_sort(t.order.begin(), t.order.end(), [&t](int64_t a, int64_t b) {
    if (t.row_step[a] != t.row_step[b]) return t.row_step[a] < t.row_step[b];
    if (t.row_layer[a] != t.row_layer[b]) return t.row_layer[a] < t.row_layer[b];
    return t.row_token[a] < t.row_token[b];
  });
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = t.order[i];
    const bool starts = i == 0 || t.row_step[row] != t.row_step[t.order[i - 1]] ||
                        t.row_layer[row] != t.row_layer[t.order[i - 1]];
    if (starts) {
      t.batch_begin.push_back(i);
      t.batch_phase.push_back(0);
    } else {
      const int64_t prev = t.order[i - 1];
      if (t.row_token[row] == t.row_token[prev]) {
        throw InputError(name + ":" + std::to_string(t.row_line[row]) + ": token " + std::to_string(t.row_token[row]) +
                         " of step " + std::to_string(t.row_step[row]) + ", layer " + std::to_string(t.row_layer[row]) +
                         " already appears on line " + std::to_string(t.row_line[prev]));
      }
    }
    const uint8_t phase = t.row_phase[row];
    uint8_t& batch_phase = t.batch_phase.back();
    if (phase != 0) {
      if (batch_phase == 0) {
        batch_phase = phase;
      } else if (batch_phase != phase) {
        throw InputError(name + ":" + std::to_string(t.row_line[row]) + ": \"phase\": expected \"" +
                         phase_name(batch_phase) + "\" like the other tokens of step " +
                         std::to_string(t.row_step[row]) + ", got \"" + phase_name(phase) + "\"");
      }
    }
  }
  t.batch_begin.push_back(rows);
  // push_back left up to twice the rows' capacity: give it back before the run holds its results.
  for (auto* v : {&t.row_step, &t.row_token, &t.row_token_id, &t.row_line, &t.row_offset}) v->shrink_to_fit();
  t.row_layer.shrink_to_fit();
  t.row_phase.shrink_to_fit();
  t.expert.shrink_to_fit();
  t.weight.shrink_to_fit();
  t.kept.shrink_to_fit();
  t.logits.shrink_to_fit();
  t.batch_begin.shrink_to_fit();
  t.batch_phase.shrink_to_fit();
  return t;
}

}  // namespace

TraceBatch FlatTrace::batch(size_t i) const {
  TraceBatch b;
  const int64_t lo = batch_begin[i], hi = batch_begin[i + 1];
  const int64_t first = order[lo];
  b.step = row_step[first];
  b.layer = row_layer[first];
  b.phase = phase_name(batch_phase[i]);
  b.num_tokens = hi - lo;
  b.token.reserve(b.num_tokens);
  b.token_ids.reserve(b.num_tokens);
  b.line.reserve(b.num_tokens);
  b.offsets.reserve(b.num_tokens + 1);
  b.offsets.push_back(0);
  for (int64_t j = lo; j < hi; ++j) {
    const int64_t row = order[j];
    b.token.push_back(row_token[row]);
    b.token_ids.push_back(row_token_id[row] >= 0 ? row_token_id[row] : row_token[row]);
    b.line.push_back(row_line[row]);
    const int64_t a0 = row_offset[row], a1 = row_offset[row + 1];
    b.expert.insert(b.expert.end(), expert.begin() + a0, expert.begin() + a1);
    b.weight.insert(b.weight.end(), weight.begin() + a0, weight.begin() + a1);
    b.kept.insert(b.kept.end(), kept.begin() + a0, kept.begin() + a1);
    b.offsets.push_back(static_cast<int64_t>(b.expert.size()));
    if (has_logits) {
      b.logits.insert(b.logits.end(), logits.begin() + row * num_experts, logits.begin() + (row + 1) * num_experts);
    }
  }
  return b;
}

double FlatTrace::bytes() const {
  auto cap = [](const auto& v) { return static_cast<double>(v.capacity() * sizeof(v[0])); };
  return cap(row_step) + cap(row_layer) + cap(row_token) + cap(row_token_id) + cap(row_line) + cap(row_phase) +
         cap(row_offset) + cap(expert) + cap(weight) + cap(kept) + cap(logits) + cap(order) + cap(batch_begin) +
         cap(batch_phase);
}

FlatTrace parse_flat_trace(const std::string& text, const std::string& name, int num_experts) {
  std::istringstream in(text);
  return parse_flat(in, name, num_experts);
}

Trace parse_trace(const std::string& text, const std::string& name, int num_experts) {
  const FlatTrace flat = parse_flat_trace(text, name, num_experts);
  Trace trace;
  trace.num_experts = num_experts;
  trace.has_logits = flat.has_logits;
  for (size_t i = 0; i < flat.num_batches(); ++i) trace.batches.push_back(flat.batch(i));
  return trace;
}

bool trace_file_has_logits(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    return j.is_object() && j.contains("logits");
  }
  return false;
}

bool trace_can_reroute(const std::string& path, int num_experts) {
  return !is_megatron_router_trace_file(path) && read_flat_trace_file(path, num_experts).has_logits;
}

FlatTrace read_flat_trace_file(const std::string& path, int num_experts) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": cannot read a directory: expected a trace file (JSON Lines)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw open_failure<InputError>(path, path + ": cannot open the trace file");
  FlatTrace t = parse_flat(in, path, num_experts);
  if (in.bad()) throw InputError(path + ": cannot read the trace file");
  return t;
}

Trace read_trace_file(const std::string& path, int num_experts) {
  const FlatTrace flat = read_flat_trace_file(path, num_experts);
  Trace trace;
  trace.num_experts = num_experts;
  trace.has_logits = flat.has_logits;
  for (size_t i = 0; i < flat.num_batches(); ++i) trace.batches.push_back(flat.batch(i));
  return trace;
}

Routing recorded_routing(const TraceBatch& b, int num_experts, int top_k) {
  Routing r;
  r.num_tokens = b.num_tokens;
  r.num_experts = num_experts;
  r.top_k = top_k;
  r.capacity = 0;
  for (int64_t t = 0; t < b.num_tokens; ++t) {
    for (int64_t a = b.offsets[t]; a < b.offsets[t + 1]; ++a) r.token.push_back(static_cast<int32_t>(t));
  }
  r.expert = b.expert;
  r.weight = b.weight;
  r.kept = b.kept;
  return r;
}

Routing replay_routing(const TraceBatch& b, const std::string& name, int num_experts, int top_k,
                       const RouterConfig& router, uint64_t seed) {
  for (int64_t t = 0; t < b.num_tokens; ++t) {
    const int64_t listed = b.offsets[t + 1] - b.offsets[t];
    if (listed != top_k) {
      throw InputError(name + ":" + std::to_string(b.line[t]) + ": \"experts\": expected model.top_k = " +
                       std::to_string(top_k) + " expert ids (a replay keeps every token's recorded top-k), got " +
                       std::to_string(listed));
    }
  }
  Routing r = recorded_routing(b, num_experts, top_k);
  const int64_t capacity = expert_capacity(router, b.num_tokens, top_k, num_experts);
  if (capacity > 0 && router.capacity_scope == CapacityScope::sequence) {
    throw InputError(name + ": router.capacity_scope: expected batch for a trace replay (a trace records no sequence "
                     "boundaries), got sequence");
  }
  r.capacity = capacity;
  const int64_t m = r.num_assignments();
  if (capacity == 0 || m == 0) return r;
  // Assignments recorded as dropped go to a phantom expert num_experts: its own capacity segment, so they
  // take no slot of a real expert and leave the others' priority ranks and random keys unchanged.
  std::vector<int32_t> expert = r.expert;
  for (int64_t a = 0; a < m; ++a)
    if (!r.kept[a]) expert[a] = num_experts;
  std::vector<uint8_t> kept(m, 1);
  std::vector<int64_t> perm(m), segment(m), rank(m);
  apply_capacity(thrust::cpp::par, expert.data(), r.weight.data(), b.num_tokens, top_k, num_experts + 1, capacity, 0,
                 router.drop_policy, router.priority, seed, kept.data(),
                 CapacityScratch{perm.data(), segment.data(), rank.data()});
  std::vector<uint8_t> newly_dropped_token(b.num_tokens, 0);
  for (int64_t a = 0; a < m; ++a) {
    if (r.kept[a] && !kept[a]) newly_dropped_token[a / top_k] = 1;
    r.kept[a] = r.kept[a] && kept[a];
  }
  if (router.renormalize_after_drop) {
    std::vector<float> rescaled = r.weight;
    renormalize_kept_weights(thrust::cpp::par, r.kept.data(), b.num_tokens, top_k, rescaled.data());
    for (int64_t a = 0; a < m; ++a)
      if (newly_dropped_token[a / top_k]) r.weight[a] = rescaled[a];
  }
  return r;
}

std::string format_trace_lines(const Routing& r, const float* logits, int64_t step, int layer, const std::string& phase,
                               const int64_t* token_ids) {
  std::vector<std::vector<int64_t>> by_token(r.num_tokens);
  for (int64_t a = 0; a < r.num_assignments(); ++a) by_token[r.token[a]].push_back(a);
  std::ostringstream os;
  for (int64_t t = 0; t < r.num_tokens; ++t) {
    const std::vector<int64_t>& as = by_token[t];
    bool any_dropped = false;
    for (int64_t a : as) any_dropped = any_dropped || !r.kept[a];
    os << "{\"step\": " << step << ", \"layer\": " << layer << ", \"token\": " << t;
    if (!phase.empty()) os << ", \"phase\": \"" << phase << "\"";
    if (token_ids) os << ", \"token_id\": " << token_ids[t];
    os << ", \"experts\": [";
    for (size_t i = 0; i < as.size(); ++i) os << (i ? ", " : "") << r.expert[as[i]];
    os << "], \"weights\": [";
    for (size_t i = 0; i < as.size(); ++i) os << (i ? ", " : "") << format_float(r.weight[as[i]]);
    os << "]";
    if (any_dropped) {
      os << ", \"kept\": [";
      for (size_t i = 0; i < as.size(); ++i) os << (i ? ", " : "") << int(r.kept[as[i]]);
      os << "]";
    }
    if (logits) {
      os << ", \"logits\": [";
      for (int e = 0; e < r.num_experts; ++e) os << (e ? ", " : "") << format_float(logits[t * r.num_experts + e]);
      os << "]";
    }
    os << "}\n";
  }
  return os.str();
}

}  // namespace moesim
