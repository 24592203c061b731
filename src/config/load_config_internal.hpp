// The config stage's shared pieces, private to src/config/load_config*.cpp: the bounds of every key, the
// YAML scalar readers and their one-line errors ("WHERE: KEY.PATH: expected WHAT, got VALUE"), the schema
// table's types (Section, Field), and Loader, the state of one load (where each value came from: a file
// line or a --set). Deterministic, host only. Not an API: src/config/load_config.hpp is. Covered by
// tests/config/load_config_test.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {
namespace config_detail {

// ---- bounds of the keys ---------------------------------------------------------------------------
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kMaxWidth = int64_t{1} << 20;   // hidden / ffn: far above any published model
constexpr int64_t kMaxExperts = 65536;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 16384;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxTokensPerBatch = 1000000000;
constexpr int64_t kMaxSequenceLen = int64_t{1} << 24;
constexpr int64_t kMaxRepeats = 1000000;
constexpr int64_t kMaxTrainGpus = 1 << 20;       // train.gpus and the parallel degrees
constexpr int64_t kMaxTrainBatch = int64_t{1} << 30;  // train.global_batch, train.micro_batch (sequences)
constexpr int64_t kMaxRoutedMicroBatches = 64;   // train.routed_micro_batches: each routes a whole EP group's tokens

// expect: aggregates (src/report/report.hpp, metric_value): value is the headline value every report
// shows (a step run's aggregate over its records), last the last batch or record.
const char* const kAggregates[] = {"value", "last", "mean", "p50", "p95", "max"};
const char* const kExpectItemKeys[] = {"metric", "min", "max", "aggregate", "strategy"};

// ---- enum spellings ------------------------------------------------------------------------------
template <class E> struct EnumCount;
template <> struct EnumCount<Dtype> { static constexpr int value = 6; };
template <> struct EnumCount<Gating> { static constexpr int value = 9; };
template <> struct EnumCount<ScoreFunction> { static constexpr int value = 2; };
template <> struct EnumCount<DropPolicy> { static constexpr int value = 3; };
template <> struct EnumCount<Priority> { static constexpr int value = 2; };
template <> struct EnumCount<CapacityScope> { static constexpr int value = 2; };
template <> struct EnumCount<Layout> { static constexpr int value = 3; };
template <> struct EnumCount<GroupMaskFill> { static constexpr int value = 2; };
template <> struct EnumCount<RoutingSemantics> { static constexpr int value = 4; };
template <> struct EnumCount<CapacityRounding> { static constexpr int value = 2; };
template <> struct EnumCount<BiasUpdateCounts> { static constexpr int value = 2; };
template <> struct EnumCount<BiasArithmetic> { static constexpr int value = 2; };
template <> struct EnumCount<WorkloadSource> { static constexpr int value = 6; };
template <> struct EnumCount<LoadDistribution> { static constexpr int value = 2; };
template <> struct EnumCount<WeightDtype> { static constexpr int value = 3; };
template <> struct EnumCount<LoadFormat> { static constexpr int value = 4; };
template <> struct EnumCount<PlacementKind> { static constexpr int value = 2; };
template <> struct EnumCount<PlacementPolicy> { static constexpr int value = 6; };
template <> struct EnumCount<PlanFrom> { static constexpr int value = 3; };
template <> struct EnumCount<Popularity> { static constexpr int value = 2; };
template <> struct EnumCount<LoadEstimator> { static constexpr int value = 2; };
template <> struct EnumCount<A2aKernel> { static constexpr int value = 3; };
template <> struct EnumCount<A2aDtype> { static constexpr int value = 5; };
template <> struct EnumCount<A2aOverlap> { static constexpr int value = 2; };
template <> struct EnumCount<RequestBalance> { static constexpr int value = 2; };
template <> struct EnumCount<AttentionKind> { static constexpr int value = 2; };
template <> struct EnumCount<TrainPrecision> { static constexpr int value = 4; };
template <> struct EnumCount<Recompute> { static constexpr int value = 4; };
template <> struct EnumCount<Dispatcher> { static constexpr int value = 3; };

template <class E>
std::string enum_choices() {
  std::string s;
  for (int i = 0; i < EnumCount<E>::value; ++i) {
    s += (i ? "|" : "");
    s += to_string(static_cast<E>(i));
  }
  return s;
}

// ---- YAML helpers (load_config_yaml.cpp) -----------------------------------------------------------
// The items with `sep` between them.
std::string join(const std::vector<std::string>& items, const char* sep);
// What to say of an unknown `word` among `names`: "did you mean PREFIXname?" for the names it is a part of (or
// that are a part of it) or the nearest spellings (a few edits), up to five; else "known: a, b, c" when there
// are at most 8 names; else `every` (where the whole list is: "moesim config --explain lists every key").
std::string nearest_names(const std::string& word, const std::vector<std::string>& names, const std::string& prefix,
                          const std::string& every);
// Scalar text -> value, strictly (YAML 1.2 core spellings, no octal, hex or 1.1 booleans).
bool parse_int64_text(const std::string& s, int64_t* out);
bool parse_uint64_text(const std::string& s, uint64_t* out);
// Decimal or exponent notation only; .nan/.inf and overflow parse but are not finite.
bool parse_double_text(const std::string& s, double* out);
// "LO..HI" with LO, HI decimal integers.
bool parse_range_text(const std::string& s, int64_t* lo, int64_t* hi);

// The shortest decimal text that reads back to exactly v.
std::string format_double(double v);
std::string format_number(double v);

// A scalar written in quotes (or tagged !!str) is a string, never a number or a boolean.
bool is_text_scalar(const YAML::Node& n);
// A node as a message quotes it: 'VALUE' (cut to a readable length), a list, a map, null.
std::string describe(const YAML::Node& n);

// Where one YAML document and its root node start.
struct YamlDocument {
  YAML::Mark start, root;
  bool has_root = false;
};
// The documents of `text`. Throws YAML::ParserException for a syntax error, and for a stream on which
// yaml-cpp 0.7 would yield empty documents forever (see DocumentScan in load_config_yaml.cpp).
std::vector<YamlDocument> scan_documents(const std::string& text);

[[noreturn]] void fail(const std::string& where, const std::string& path, const std::string& what);
[[noreturn]] void fail_expected(const std::string& where, const std::string& path, const std::string& what,
                                const std::string& got);

int64_t read_int(const YAML::Node& n, const std::string& path, const std::string& where, int64_t lo, int64_t hi);
uint64_t read_uint64(const YAML::Node& n, const std::string& path, const std::string& where);
enum class Bound { none, at_least, above };
double read_double(const YAML::Node& n, const std::string& path, const std::string& where, Bound bound);
bool read_bool(const YAML::Node& n, const std::string& path, const std::string& where);
// A missing value (`path:` with nothing after it) is the empty string.
std::string read_string(const YAML::Node& n, const std::string& path, const std::string& where);

// A map key must be a plain name, and appear once.
std::string key_name(const YAML::Node& key, const std::string& parent, const std::string& where,
                     std::set<std::string>& seen);

template <class E>
E read_enum(const YAML::Node& n, const std::string& path, const std::string& where) {
  if (n.IsScalar()) {
    for (int i = 0; i < EnumCount<E>::value; ++i) {
      if (n.Scalar() == to_string(static_cast<E>(i))) return static_cast<E>(i);
    }
  }
  fail_expected(where, path, "one of " + enum_choices<E>(), describe(n));
}

template <size_t N>
bool one_of(const std::string& s, const char* const (&names)[N]) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

template <size_t N>
std::vector<std::string> to_vector(const char* const (&names)[N]) {
  return std::vector<std::string>(std::begin(names), std::end(names));
}

// ---- the schema --------------------------------------------------------------------------------
class Loader;
using ReadFn = std::function<void(Loader&, const YAML::Node&, const std::string& path, const std::string& where,
                                  Experiment&)>;
using EmitFn = std::function<void(YAML::Emitter&, const Experiment&)>;

struct Field {
  std::string key;
  ReadFn read;
  EmitFn emit;  // writes the value only (the key is written by the caller)
  // Whether the key is written at all; empty: always. An optional key (model.hf_config, model.moe_layers)
  // is left out while unset, so that experiments without it re-emit as before.
  std::function<bool(const Experiment&)> present = nullptr;
};

struct Section {
  std::string key;
  std::vector<Field> fields;
  const Field* find(const std::string& k) const {
    for (const Field& f : fields) {
      if (f.key == k) return &f;
    }
    return nullptr;
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const Field& f : fields) out.push_back(f.key);
    return out;
  }
};

template <class S, class T>
Field int_field(const char* key, S Experiment::*sec, T S::*mem, int64_t lo, int64_t hi) {
  return {key,
          [=](Loader&, const YAML::Node& n, const std::string& path, const std::string& where, Experiment& e) {
            (e.*sec).*mem = static_cast<T>(read_int(n, path, where, lo, hi));
          },
          [=](YAML::Emitter& out, const Experiment& e) { out << std::to_string((e.*sec).*mem); }};
}

// An integer key whose 0 means "not set" (its default follows from other keys): read in [lo, hi], written
// only when set.
template <class S, class T>
Field optional_int_field(const char* key, S Experiment::*sec, T S::*mem, int64_t lo, int64_t hi) {
  Field f = int_field(key, sec, mem, lo, hi);
  f.present = [=](const Experiment& e) { return (e.*sec).*mem != 0; };
  return f;
}

template <class S>
Field double_field(const char* key, S Experiment::*sec, double S::*mem, Bound bound) {
  return {key,
          [=](Loader&, const YAML::Node& n, const std::string& path, const std::string& where, Experiment& e) {
            (e.*sec).*mem = read_double(n, path, where, bound);
          },
          [=](YAML::Emitter& out, const Experiment& e) { out << format_double((e.*sec).*mem); }};
}

template <class S>
Field bool_field(const char* key, S Experiment::*sec, bool S::*mem) {
  return {key,
          [=](Loader&, const YAML::Node& n, const std::string& path, const std::string& where, Experiment& e) {
            (e.*sec).*mem = read_bool(n, path, where);
          },
          [=](YAML::Emitter& out, const Experiment& e) { out << ((e.*sec).*mem ? "true" : "false"); }};
}

template <class S>
Field string_field(const char* key, S Experiment::*sec, std::string S::*mem) {
  return {key,
          [=](Loader&, const YAML::Node& n, const std::string& path, const std::string& where, Experiment& e) {
            (e.*sec).*mem = read_string(n, path, where);
          },
          [=](YAML::Emitter& out, const Experiment& e) { out << (e.*sec).*mem; }};
}

template <class S, class E>
Field enum_field(const char* key, S Experiment::*sec, E S::*mem) {
  return {key,
          [=](Loader&, const YAML::Node& n, const std::string& path, const std::string& where, Experiment& e) {
            (e.*sec).*mem = read_enum<E>(n, path, where);
          },
          [=](YAML::Emitter& out, const Experiment& e) { out << std::string(to_string((e.*sec).*mem)); }};
}

// The state one load keeps beside the Experiment it fills.
class Loader {
 public:
  explicit Loader(std::string source) : source_(std::move(source)) {}

  // Where the value at `path` came from: the last --set covering it, else FILE:LINE of `mark`.
  std::string where(const std::string& path, const YAML::Mark& mark) const {
    for (auto it = set_origins_.rbegin(); it != set_origins_.rend(); ++it) {
      const std::string& p = it->first;
      if (path == p || (path.size() > p.size() && path.compare(0, p.size(), p) == 0 &&
                        (path[p.size()] == '.' || path[p.size()] == '['))) {
        return it->second;
      }
    }
    // The built-in experiment's lines are configs/quickstart.yaml's, which `moesim config` prints.
    if (mark.line >= 0 && source_ == "<built-in>")
      return "the built-in experiment (configs/quickstart.yaml:" + std::to_string(mark.line + 1) + ", --set overrides it)";
    if (mark.line >= 0) return source_ + ":" + std::to_string(mark.line + 1);
    return source_;
  }

  // Where the first of `paths` that was set came from (file line or --set); the source name if none was.
  std::string origin(std::initializer_list<std::string> paths) const {
    for (const std::string& p : paths) {
      auto it = origins_.find(p);
      if (it != origins_.end()) return it->second;
    }
    return source_;
  }

  void apply_set(YAML::Node& root, const std::string& key_eq_value);
  Experiment read(const YAML::Node& root);

  // The experiment's source name: a file path, or "<built-in>" / "<effective FILE>" for text of moesim's own.
  const std::string& source() const { return source_; }

  // workload.prompt_len written as "LO..HI"; workload.prompt_len_range given explicitly.
  bool prompt_len_text_range = false;
  std::optional<bool> prompt_len_range_explicit;
  std::string prompt_len_range_where;

 private:
  void set_at(YAML::Node& root, const std::vector<std::string>& parts, const YAML::Node& value,
              const std::string& prefix);
  void read_section(const Section& s, const YAML::Node& n, const std::string& where, Experiment& e);
  void read_hardware(const YAML::Node& n, const std::string& where, Experiment& e);
  void read_expect(const YAML::Node& n, const std::string& where, Experiment& e);
  Expectation read_expect_item(const YAML::Node& n, const std::string& path, const std::string& metric);
  // Fills, from the config.json of model.hf_config, every key the file and the --set did not give
  // (load_config_hf.cpp); e.model.hf_config_keys lists them.
  void apply_hf_config(Experiment& e);
  void validate(const Experiment& e) const;
  void validate_placement(const Experiment& e) const;

  std::string source_;
  std::vector<std::pair<std::string, std::string>> set_origins_;  // (key path, "--set KEY=VALUE"), in order
  std::map<std::string, std::string> origins_;                     // key path -> where its value came from
};

// ---- the schema table (load_config_sections.cpp) ---------------------------------------------------
// The model, router, workload, placement and execute sections, in experiment.hpp's order.
const std::vector<Section>& sections();
const Section* find_section(const std::string& key);
const std::vector<std::string>& top_keys();
// Every key of `e` as one YAML map (experiment_to_yaml). given_preset_keys_only: leave out the router keys
// of semantics_preset_keys() that e.router.given_preset_keys does not list, so that loading the text back
// applies the (possibly changed) semantics preset to them again (apply_override), and the keys
// e.model.hf_config_keys lists, so that model.hf_config fills them again.
void emit_experiment(YAML::Emitter& out, const Experiment& e, bool given_preset_keys_only = false);

// ---- hardware: and expect:, the top-level keys outside the table (load_config_expect.cpp) ---------
bool is_known_metric(const std::string& m);
// A strategy label: a gating name, then optional router overrides, e.g. "token_choice capacity_factor=1.5".
bool valid_strategy_label(const std::string& label);

}  // namespace config_detail
}  // namespace moesim
