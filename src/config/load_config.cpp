// The config stage: YAML text -> node tree -> `--set` overrides applied to the tree -> typed Experiment
// -> cross-field validation. One schema table drives reading, `--set` key checks and re-emission, so
// every key of experiment.hpp is read, overridable and written back the same way.
// Errors: one line, "FILE:LINE: KEY.PATH: expected WHAT, got VALUE", or "--set KEY=VALUE: ..." for a
// value that came from an override. Deterministic, host only. Covered by tests/config/load_config_test.cpp.
#include "src/config/load_config.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "src/common/embedded.hpp"
#include "src/common/error.hpp"

namespace moesim {
namespace {

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

const char* const kAggregates[] = {"value", "mean", "p50", "p95", "max"};
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
template <> struct EnumCount<WorkloadSource> { static constexpr int value = 5; };
template <> struct EnumCount<PlacementKind> { static constexpr int value = 2; };

template <class E>
std::string enum_choices() {
  std::string s;
  for (int i = 0; i < EnumCount<E>::value; ++i) {
    s += (i ? "|" : "");
    s += to_string(static_cast<E>(i));
  }
  return s;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

// ---- scalar text -> value, strictly (YAML 1.2 core spellings, no octal, hex or 1.1 booleans) -------
bool parse_int64_text(const std::string& s, int64_t* out) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return false;
  }
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool parse_uint64_text(const std::string& s, uint64_t* out) {
  size_t i = (!s.empty() && s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return false;
  }
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  *out = static_cast<uint64_t>(v);
  return true;
}

// Decimal or exponent notation only; .nan/.inf and overflow parse but are not finite.
bool parse_double_text(const std::string& s, double* out) {
  std::string lower;
  for (char c : s) lower += static_cast<char>((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c);
  const std::string bare = (!lower.empty() && (lower[0] == '+' || lower[0] == '-')) ? lower.substr(1) : lower;
  if (bare == ".nan" || bare == "nan") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (bare == ".inf" || bare == "inf" || bare == "infinity") {
    *out = (lower[0] == '-' ? -1 : 1) * std::numeric_limits<double>::infinity();
    return true;
  }
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return false;
  }
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// The shortest decimal text that reads back to exactly v.
std::string format_double(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A scalar written in quotes (or tagged !!str) is a string, never a number or a boolean.
bool is_text_scalar(const YAML::Node& n) {
  return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str";
}

// A value quoted in a message, cut to a readable length.
std::string shown(const std::string& s) {
  constexpr size_t kShownChars = 120;
  return s.size() <= kShownChars ? s : s.substr(0, kShownChars) + "...";
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return "'" + shown(n.Scalar()) + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Null: return "null";
    default: return "nothing";
  }
}

// yaml-cpp's event parser run once over a stream, noting where each document and its root node start.
// It replaces YAML::LoadAll, which in yaml-cpp 0.7 (Debian 12) never returns on a stream whose next
// token starts no node, e.g. a lone ",": every call yields another empty document at the same place,
// allocating until memory runs out (jbeder/yaml-cpp#1040, fixed upstream by #1319). Here a document
// that starts where the previous one started is reported as invalid YAML.
class DocumentScan : public YAML::EventHandler {
 public:
  struct Document {
    YAML::Mark start, root;
    bool has_root = false;
  };
  std::vector<Document> documents;

  void OnDocumentStart(const YAML::Mark& mark) override { documents.push_back({mark, mark, false}); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark) {
    if (!documents.empty() && !documents.back().has_root) {
      documents.back().root = mark;
      documents.back().has_root = true;
    }
  }
};

// The documents of `text`. Throws YAML::ParserException for a syntax error, and for the stuck stream above.
std::vector<DocumentScan::Document> scan_documents(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentScan scan;
  while (parser.HandleNextDocument(scan)) {
    const auto& d = scan.documents;
    if (d.size() >= 2 && d[d.size() - 1].start.pos == d[d.size() - 2].start.pos) {
      const YAML::Mark& at = d.back().start;
      const std::string token = at.pos >= 0 && static_cast<size_t>(at.pos) < text.size() ? text.substr(at.pos, 1) : "";
      throw YAML::ParserException(at, "unexpected '" + token + "' where a value or a key was expected");
    }
  }
  return scan.documents;
}

[[noreturn]] void fail(const std::string& where, const std::string& path, const std::string& what) {
  throw ConfigError(where + ": " + path + ": " + what);
}

[[noreturn]] void fail_expected(const std::string& where, const std::string& path, const std::string& what,
                                const std::string& got) {
  fail(where, path, "expected " + what + ", got " + got);
}

std::string int_what(int64_t lo, int64_t hi) {
  if (hi == kInt64Max) return "an integer >= " + std::to_string(lo);
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

int64_t read_int(const YAML::Node& n, const std::string& path, const std::string& where, int64_t lo, int64_t hi) {
  const std::string what = int_what(lo, hi);
  int64_t v = 0;
  if (!n.IsScalar() || is_text_scalar(n) || !parse_int64_text(n.Scalar(), &v)) {
    fail_expected(where, path, what, describe(n));
  }
  if (v < lo || v > hi) fail_expected(where, path, what, std::to_string(v));
  return v;
}

uint64_t read_uint64(const YAML::Node& n, const std::string& path, const std::string& where) {
  uint64_t v = 0;
  if (!n.IsScalar() || is_text_scalar(n) || !parse_uint64_text(n.Scalar(), &v)) {
    fail_expected(where, path, "an integer in [0, 18446744073709551615]", describe(n));
  }
  return v;
}

enum class Bound { none, at_least, above };

double read_double(const YAML::Node& n, const std::string& path, const std::string& where, Bound bound) {
  std::string what = "a finite number";
  if (bound == Bound::at_least) what += " >= 0";
  if (bound == Bound::above) what += " > 0";
  double v = 0;
  if (!n.IsScalar() || is_text_scalar(n) || !parse_double_text(n.Scalar(), &v) || !std::isfinite(v)) {
    fail_expected(where, path, what, describe(n));
  }
  if ((bound == Bound::at_least && v < 0) || (bound == Bound::above && v <= 0)) {
    fail_expected(where, path, what, n.Scalar());
  }
  return v;
}

bool read_bool(const YAML::Node& n, const std::string& path, const std::string& where) {
  if (n.IsScalar() && !is_text_scalar(n)) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  fail_expected(where, path, "true or false", describe(n));
}

// A missing value (`path:` with nothing after it) is the empty string.
std::string read_string(const YAML::Node& n, const std::string& path, const std::string& where) {
  if (n.IsNull()) return "";
  if (!n.IsScalar()) fail_expected(where, path, "a string", describe(n));
  return n.Scalar();
}

template <class E>
E read_enum(const YAML::Node& n, const std::string& path, const std::string& where) {
  if (n.IsScalar()) {
    for (int i = 0; i < EnumCount<E>::value; ++i) {
      if (n.Scalar() == to_string(static_cast<E>(i))) return static_cast<E>(i);
    }
  }
  fail_expected(where, path, "one of " + enum_choices<E>(), describe(n));
}

// "LO..HI" with LO, HI decimal integers.
bool parse_range_text(const std::string& s, int64_t* lo, int64_t* hi) {
  const size_t dots = s.find("..");
  if (dots == std::string::npos) return false;
  auto trim = [](std::string t) {
    while (!t.empty() && t.front() == ' ') t.erase(t.begin());
    while (!t.empty() && t.back() == ' ') t.pop_back();
    return t;
  };
  return parse_int64_text(trim(s.substr(0, dots)), lo) && parse_int64_text(trim(s.substr(dots + 2)), hi);
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
  void validate(const Experiment& e) const;

  std::string source_;
  std::vector<std::pair<std::string, std::string>> set_origins_;  // (key path, "--set KEY=VALUE"), in order
  std::map<std::string, std::string> origins_;                     // key path -> where its value came from
};

void read_prompt_len(Loader& L, const YAML::Node& n, const std::string& path, const std::string& where,
                     Experiment& e) {
  const std::string what = "a length in [1, " + std::to_string(kMaxSequenceLen) + "], a list of lengths, or 'LO..HI'";
  std::vector<int> lens;
  L.prompt_len_text_range = false;
  if (n.IsScalar()) {
    int64_t lo = 0;
    int64_t hi = 0;
    if (!is_text_scalar(n) && parse_int64_text(n.Scalar(), &lo)) {
      lens.push_back(static_cast<int>(read_int(n, path, where, 1, kMaxSequenceLen)));
    } else if (parse_range_text(n.Scalar(), &lo, &hi)) {
      if (lo < 1 || hi > kMaxSequenceLen || lo > hi) {
        fail_expected(where, path, "'LO..HI' with 1 <= LO <= HI <= " + std::to_string(kMaxSequenceLen), describe(n));
      }
      lens = {static_cast<int>(lo), static_cast<int>(hi)};
      L.prompt_len_text_range = true;
    } else {
      fail_expected(where, path, what, describe(n));
    }
  } else if (n.IsSequence() && n.size() > 0) {
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      lens.push_back(static_cast<int>(read_int(n[i], p, L.where(p, n[i].Mark()), 1, kMaxSequenceLen)));
    }
  } else {
    fail_expected(where, path, what, n.IsSequence() ? "an empty list" : describe(n));
  }
  e.workload.prompt_len = lens;
}

void read_prompt_len_range(Loader& L, const YAML::Node& n, const std::string& path, const std::string& where,
                           Experiment&) {
  L.prompt_len_range_explicit = read_bool(n, path, where);
  L.prompt_len_range_where = where;
}

void emit_prompt_len(YAML::Emitter& out, const Experiment& e) {
  const std::vector<int>& p = e.workload.prompt_len;
  if (e.workload.prompt_len_range && p.size() == 2) {
    out << std::to_string(p[0]) + ".." + std::to_string(p[1]);
  } else if (p.size() == 1) {
    out << std::to_string(p[0]);
  } else {
    out << YAML::Flow << YAML::BeginSeq;
    for (int v : p) out << std::to_string(v);
    out << YAML::EndSeq;
  }
}

void read_placement_map(Loader& L, const YAML::Node& n, const std::string& path, const std::string& where,
                        Experiment& e) {
  if (!n.IsSequence()) fail_expected(where, path, "a list of device indices, one per expert", describe(n));
  std::vector<int> map;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    map.push_back(static_cast<int>(read_int(n[i], p, L.where(p, n[i].Mark()), 0, kMaxExperts - 1)));
  }
  e.placement.map = map;
}

void emit_int_list(YAML::Emitter& out, const std::vector<int>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (int x : v) out << std::to_string(x);
  out << YAML::EndSeq;
}

const std::vector<Section>& sections() {
  using E = Experiment;
  static const std::vector<Section> table = {
      {"model",
       {string_field("name", &E::model, &ModelConfig::name),
        int_field("hidden", &E::model, &ModelConfig::hidden, 1, kMaxWidth),
        int_field("ffn", &E::model, &ModelConfig::ffn, 1, kMaxWidth),
        int_field("experts", &E::model, &ModelConfig::experts, 1, kMaxExperts),
        int_field("top_k", &E::model, &ModelConfig::top_k, 1, kMaxExperts),
        int_field("shared_experts", &E::model, &ModelConfig::shared_experts, 0, kMaxExperts),
        int_field("layers", &E::model, &ModelConfig::layers, 1, kMaxLayers),
        int_field("heads", &E::model, &ModelConfig::heads, 1, kMaxHeads),
        int_field("kv_heads", &E::model, &ModelConfig::kv_heads, 1, kMaxHeads),
        int_field("head_dim", &E::model, &ModelConfig::head_dim, 1, kMaxHeads),
        int_field("vocab", &E::model, &ModelConfig::vocab, 1, kMaxVocab),
        enum_field("dtype", &E::model, &ModelConfig::dtype)}},
      {"router",
       {enum_field("gating", &E::router, &RouterConfig::gating),
        enum_field("score", &E::router, &RouterConfig::score),
        bool_field("renormalize", &E::router, &RouterConfig::renormalize),
        bool_field("pre_softmax", &E::router, &RouterConfig::pre_softmax),
        double_field("capacity_factor", &E::router, &RouterConfig::capacity_factor, Bound::at_least),
        int_field("min_capacity", &E::router, &RouterConfig::min_capacity, 0, kMaxTokensPerBatch),
        enum_field("drop_policy", &E::router, &RouterConfig::drop_policy),
        enum_field("priority", &E::router, &RouterConfig::priority),
        enum_field("capacity_scope", &E::router, &RouterConfig::capacity_scope),
        bool_field("renormalize_after_drop", &E::router, &RouterConfig::renormalize_after_drop),
        enum_field("layout", &E::router, &RouterConfig::layout),
        int_field("block_size", &E::router, &RouterConfig::block_size, 1, kMaxWidth),
        double_field("noise_std", &E::router, &RouterConfig::noise_std, Bound::at_least),
        int_field("sinkhorn_iterations", &E::router, &RouterConfig::sinkhorn_iterations, 1, kMaxRepeats),
        double_field("sinkhorn_tolerance", &E::router, &RouterConfig::sinkhorn_tolerance, Bound::above),
        int_field("groups", &E::router, &RouterConfig::groups, 1, kMaxExperts),
        int_field("topk_groups", &E::router, &RouterConfig::topk_groups, 1, kMaxExperts),
        enum_field("group_mask_fill", &E::router, &RouterConfig::group_mask_fill),
        double_field("bias_update_rate", &E::router, &RouterConfig::bias_update_rate, Bound::at_least),
        double_field("routed_scaling_factor", &E::router, &RouterConfig::routed_scaling_factor, Bound::above)}},
      {"workload",
       {enum_field("source", &E::workload, &WorkloadConfig::source),
        int_field("batch", &E::workload, &WorkloadConfig::batch, 1, kMaxTokensPerBatch),
        int_field("batches", &E::workload, &WorkloadConfig::batches, 1, kMaxRepeats),
        {"prompt_len", read_prompt_len, emit_prompt_len},
        // Not written back: emit_prompt_len writes a range as "LO..HI", which implies it.
        {"prompt_len_range", read_prompt_len_range, nullptr},
        int_field("decode_steps", &E::workload, &WorkloadConfig::decode_steps, 0, kMaxSequenceLen),
        {"seed",
         [](Loader&, const YAML::Node& n, const std::string& path, const std::string& where, Experiment& e) {
           e.workload.seed = read_uint64(n, path, where);
         },
         [](YAML::Emitter& out, const Experiment& e) { out << std::to_string(e.workload.seed); }},
        double_field("skew", &E::workload, &WorkloadConfig::skew, Bound::at_least),
        int_field("topics", &E::workload, &WorkloadConfig::topics, 1, kMaxWidth),
        string_field("path", &E::workload, &WorkloadConfig::path),
        string_field("profile_key", &E::workload, &WorkloadConfig::profile_key)}},
      {"placement",
       {enum_field("kind", &E::placement, &PlacementConfig::kind),
        int_field("devices", &E::placement, &PlacementConfig::devices, 1, kMaxExperts),
        int_field("replicas", &E::placement, &PlacementConfig::replicas, 0, kMaxExperts),
        {"map", read_placement_map, [](YAML::Emitter& out, const Experiment& e) { emit_int_list(out, e.placement.map); }},
        int_field("rebalance_every", &E::placement, &PlacementConfig::rebalance_every, 0, kIntMax)}},
      {"execute",
       {bool_field("enabled", &E::execute, &ExecuteConfig::enabled),
        int_field("hidden", &E::execute, &ExecuteConfig::hidden, 1, kMaxWidth),
        int_field("ffn", &E::execute, &ExecuteConfig::ffn, 1, kMaxWidth),
        int_field("layers", &E::execute, &ExecuteConfig::layers, 1, kMaxLayers),
        int_field("repeats", &E::execute, &ExecuteConfig::repeats, 1, kMaxRepeats),
        enum_field("dtype", &E::execute, &ExecuteConfig::dtype)}},
  };
  return table;
}

const Section* find_section(const std::string& key) {
  for (const Section& s : sections()) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

const std::vector<std::string>& top_keys() {
  static const std::vector<std::string> keys = {"name",      "model",     "router",  "workload",
                                                "hardware",  "placement", "execute", "expect"};
  return keys;
}

bool is_known_metric(const std::string& m) {
  for (const std::string& k : known_expect_metrics()) {
    if (k == m) return true;
  }
  return false;
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

// A strategy label: a gating name, then optional router overrides, e.g. "token_choice capacity_factor=1.5"
// (the form `moesim check` and `compare` use to name router variants; the values are checked when applied).
bool valid_strategy_label(const std::string& label) {
  std::istringstream words(label);
  std::string word;
  if (!(words >> word) || !parse_gating(word)) return false;
  const Section* router = find_section("router");
  while (words >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq + 1 == word.size() || !router->find(word.substr(0, eq))) return false;
  }
  return true;
}

// A map key must be a plain name, and appear once.
std::string key_name(const YAML::Node& key, const std::string& parent, const std::string& where,
                     std::set<std::string>& seen) {
  const std::string at = parent.empty() ? "" : parent + ".";
  if (!key.IsScalar()) fail_expected(where, parent.empty() ? "(top level)" : parent, "a key name", describe(key));
  const std::string name = key.Scalar();
  if (!seen.insert(name).second) fail(where, at + name, "duplicate key");
  return name;
}

// ---- --set ------------------------------------------------------------------------------------------
void Loader::set_at(YAML::Node& root, const std::vector<std::string>& parts, const YAML::Node& value,
                    const std::string& prefix) {
  YAML::Node node = root;
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path += (i ? "." : "") + parts[i];
    const YAML::Node& cnode = node;  // const lookup: never inserts
    const YAML::Node child = cnode[parts[i]];  // invalid (not merely undefined) when missing
    if (!child.IsDefined() || child.IsNull()) {
      node.remove(parts[i]);
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
      const YAML::Node created = node[parts[i]];
      node.reset(created);  // rebinds; operator= would overwrite the node's contents in the tree
    } else if (!child.IsMap()) {
      fail_expected(where(path, child.Mark()), path, "a map", describe(child));
    } else {
      node.reset(child);
    }
  }
  // Remove, then add: assigning into an existing node would also change every YAML alias of it.
  node.remove(parts.back());
  node[parts.back()] = value;
  std::string full;
  for (size_t i = 0; i < parts.size(); ++i) full += (i ? "." : "") + parts[i];
  set_origins_.emplace_back(full, prefix);
}

void Loader::apply_set(YAML::Node& root, const std::string& key_eq_value) {
  const std::string prefix = "--set " + key_eq_value;
  const size_t eq = key_eq_value.find('=');
  if (eq == std::string::npos) throw ConfigError(prefix + ": expected KEY.PATH=VALUE");
  std::string key = key_eq_value.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.pop_back();
  while (!key.empty() && key.front() == ' ') key.erase(key.begin());
  std::vector<std::string> parts;
  std::string part;
  std::istringstream ks(key);
  while (std::getline(ks, part, '.')) parts.push_back(part);
  if (key.empty() || key.back() == '.') parts.push_back("");
  for (const std::string& p : parts) {
    if (p.empty()) throw ConfigError(prefix + ": expected KEY.PATH=VALUE, got key '" + key + "'");
  }
  const YAML::Node value = [&] {
    const std::string text = key_eq_value.substr(eq + 1);
    try {
      const auto documents = scan_documents(text);
      if (documents.size() > 1) {
        throw ConfigError(prefix + ": expected one YAML value, got " + std::to_string(documents.size()) + " documents");
      }
      return documents.empty() ? YAML::Node() : YAML::Load(text);
    } catch (const YAML::ParserException& ex) {
      throw ConfigError(prefix + ": invalid YAML: " + ex.msg);
    }
  }();
  auto unknown = [&](const std::string& known) {
    throw ConfigError(prefix + ": unknown key " + key + " (" + known + ")");
  };
  const std::string& top = parts[0];
  bool known_top = false;
  for (const std::string& k : top_keys()) known_top = known_top || k == top;
  if (!known_top) unknown("known: " + join(top_keys(), ", "));

  if (const Section* s = find_section(top)) {
    if (parts.size() == 1 && value.IsMap()) {
      // A map given for a whole section sets the keys it names; the others keep their values.
      for (auto it = value.begin(); it != value.end(); ++it) {
        const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
        if (!s->find(k)) {
          throw ConfigError(prefix + ": unknown key " + top + "." + k + " (known: " + join(s->keys(), ", ") + ")");
        }
        set_at(root, {top, k}, it->second, prefix);
      }
      return;
    }
    if (parts.size() > 2 || (parts.size() == 2 && !s->find(parts[1]))) {
      unknown("known: " + join(s->keys(), ", "));
    }
  } else if (top == "name") {
    if (parts.size() > 1) unknown("name is a string");
  } else if (top == "hardware" && parts.size() > 1) {
    // Keys inside an inline hardware map may be overridden one by one, when they exist.
    const YAML::Node& croot = root;
    YAML::Node node = croot["hardware"];
    bool found = true;
    for (size_t i = 1; found && i < parts.size(); ++i) {
      found = node.IsDefined() && node.IsMap();
      if (found) {
        const YAML::Node& cnode = node;
        const YAML::Node child = cnode[parts[i]];
        found = child.IsDefined();
        if (found) node.reset(child);
      }
    }
    if (!found) unknown("hardware is a profile name, or an inline map without this key");
  } else if (top == "expect" && parts.size() > 1) {
    const YAML::Node& croot = root;
    const YAML::Node expect = croot["expect"];
    if (expect.IsDefined() && expect.IsSequence()) {
      unknown("expect is a list here: set it whole, --set expect=[{metric: ..., max: ...}]");
    }
    if (!is_known_metric(parts[1])) unknown("known metrics: " + join(known_expect_metrics(), ", "));
    if (parts.size() > 3 || (parts.size() == 3 && (parts[2] == "metric" || !one_of(parts[2], kExpectItemKeys)))) {
      unknown("known: min, max, aggregate, strategy");
    }
  }
  set_at(root, parts, value, prefix);
}

// ---- reading --------------------------------------------------------------------------------------
void Loader::read_section(const Section& s, const YAML::Node& n, const std::string& where_, Experiment& e) {
  if (n.IsNull()) return;
  if (!n.IsMap()) fail_expected(where_, s.key, "a map (keys: " + join(s.keys(), ", ") + ")", describe(n));
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string name = key_name(it->first, s.key, where(s.key, it->first.Mark()), seen);
    const std::string path = s.key + "." + name;
    const std::string at = where(path, it->first.Mark());
    const Field* f = s.find(name);
    if (!f) fail(at, path, "unknown key (known: " + join(s.keys(), ", ") + ")");
    f->read(*this, it->second, path, at, e);
    origins_[path] = at;
  }
}

void Loader::read_hardware(const YAML::Node& n, const std::string& at, Experiment& e) {
  const std::string what = "a profile name, a profile path or an inline map";
  if (n.IsScalar() && !n.Scalar().empty()) {
    e.hardware.name = n.Scalar();
    e.hardware.inline_yaml.clear();
  } else if (n.IsMap()) {
    YAML::Emitter out;
    out << n;
    e.hardware.name.clear();
    e.hardware.inline_yaml = out.c_str();
    // The table is kept as YAML text (re-emitted by `moesim config`, parsed by the profile reader). yaml-cpp's
    // emitter can write text its own parser rejects (a fuzzed value of control bytes and '~' runs did): such
    // a table is refused here, once, with the key named.
    bool reparses = out.good();
    try {
      if (reparses) YAML::Load(e.hardware.inline_yaml);
    } catch (const YAML::Exception&) {
      reparses = false;
    }
    if (!reparses) fail_expected(at, "hardware", "an inline map of plain keys and values", "one that cannot be written back as YAML");
  } else {
    fail_expected(at, "hardware", what, describe(n));
  }
}

Expectation Loader::read_expect_item(const YAML::Node& n, const std::string& path, const std::string& metric) {
  const std::string at = where(path, n.Mark());
  if (!n.IsMap()) fail_expected(at, path, "a map with min, max, aggregate, strategy", describe(n));
  Expectation x;
  x.metric = metric;
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = key_name(it->first, path, where(path, it->first.Mark()), seen);
    const std::string kp = path + "." + k;
    const std::string kat = where(kp, it->first.Mark());
    const YAML::Node v = it->second;
    if (k == "metric" && metric.empty()) {
      x.metric = read_string(v, kp, kat);
      if (!is_known_metric(x.metric)) {
        fail_expected(kat, kp, "one of " + join(known_expect_metrics(), "|"), describe(v));
      }
    } else if (k == "min") {
      x.min = read_double(v, kp, kat, Bound::none);
    } else if (k == "max") {
      x.max = read_double(v, kp, kat, Bound::none);
    } else if (k == "aggregate") {
      x.aggregate = read_string(v, kp, kat);
      if (!one_of(x.aggregate, kAggregates)) fail_expected(kat, kp, "one of value|mean|p50|p95|max", describe(v));
    } else if (k == "strategy") {
      x.strategy = read_string(v, kp, kat);
      if (!valid_strategy_label(x.strategy)) {
        fail_expected(kat, kp, "a gating name (" + enum_choices<Gating>() + "), optionally followed by router KEY=VALUE words",
                      describe(v));
      }
    } else {
      std::vector<std::string> known = to_vector(kExpectItemKeys);
      if (!metric.empty()) known.erase(known.begin());
      fail(kat, kp, "unknown key (known: " + join(known, ", ") + ")");
    }
  }
  if (x.metric.empty()) fail_expected(at, path, "a metric: key", "none");
  if (!x.min && !x.max) fail_expected(at, path, "at least one of min, max", "neither");
  if (x.min && x.max && *x.min > *x.max) {
    fail_expected(where(path + ".max", n["max"].Mark()), path + ".max",
                  "a number >= min (" + format_number(*x.min) + ")", format_number(*x.max));
  }
  return x;
}

void Loader::read_expect(const YAML::Node& n, const std::string& at, Experiment& e) {
  e.expect.clear();
  if (n.IsNull()) return;
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i) {
      e.expect.push_back(read_expect_item(n[i], "expect[" + std::to_string(i) + "]", ""));
    }
    return;
  }
  if (!n.IsMap()) fail_expected(at, "expect", "a map from metric name to bounds, or a list of bounds", describe(n));
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string metric = key_name(it->first, "expect", where("expect", it->first.Mark()), seen);
    const std::string path = "expect." + metric;
    if (!is_known_metric(metric)) {
      fail(where(path, it->first.Mark()), path, "unknown key (known: " + join(known_expect_metrics(), ", ") + ")");
    }
    const YAML::Node v = it->second;
    if (v.IsSequence()) {  // several bounds on one metric, e.g. one per strategy
      for (size_t i = 0; i < v.size(); ++i) {
        e.expect.push_back(read_expect_item(v[i], path + "[" + std::to_string(i) + "]", metric));
      }
    } else {
      e.expect.push_back(read_expect_item(v, path, metric));
    }
  }
}

Experiment Loader::read(const YAML::Node& root) {
  Experiment e;
  std::set<std::string> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string name = key_name(it->first, "", where("", it->first.Mark()), seen);
    const std::string at = where(name, it->first.Mark());
    const YAML::Node v = it->second;
    if (const Section* s = find_section(name)) {
      read_section(*s, v, at, e);
    } else if (name == "name") {
      e.name = read_string(v, name, at);
    } else if (name == "hardware") {
      read_hardware(v, at, e);
    } else if (name == "expect") {
      read_expect(v, at, e);
    } else {
      fail(at, name, "unknown key (known: " + join(top_keys(), ", ") + ")");
    }
    origins_[name] = at;
  }
  e.workload.prompt_len_range = prompt_len_text_range || prompt_len_range_explicit.value_or(false);
  if (prompt_len_text_range && prompt_len_range_explicit == false) {
    fail_expected(prompt_len_range_where, "workload.prompt_len_range",
                  "true (workload.prompt_len is written 'LO..HI')", "false");
  }
  validate(e);
  return e;
}

// Constraints between keys, checked once every override is in; each names the key and where it was last set.
void Loader::validate(const Experiment& e) const {
  const ModelConfig& m = e.model;
  const RouterConfig& r = e.router;
  const WorkloadConfig& w = e.workload;
  const PlacementConfig& p = e.placement;
  const std::string E = std::to_string(m.experts);
  if (m.top_k > m.experts) {
    fail_expected(origin({"model.top_k", "model.experts"}), "model.top_k",
                  "an integer in [1, " + E + "] (model.experts)", std::to_string(m.top_k));
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    fail_expected(origin({"model.kv_heads", "model.heads"}), "model.kv_heads",
                  "a divisor of model.heads (" + std::to_string(m.heads) + ")", std::to_string(m.kv_heads));
  }
  if (m.experts % r.groups != 0) {
    fail_expected(origin({"router.groups", "model.experts"}), "router.groups",
                  "a divisor of model.experts (" + E + ")", std::to_string(r.groups));
  }
  if (r.topk_groups > r.groups) {
    fail_expected(origin({"router.topk_groups", "router.groups"}), "router.topk_groups",
                  "an integer in [1, " + std::to_string(r.groups) + "] (router.groups)", std::to_string(r.topk_groups));
  }
  if (r.gating == Gating::group_limited) {
    const int64_t reachable = int64_t{r.topk_groups} * (m.experts / r.groups);
    if (m.top_k > reachable) {
      fail_expected(origin({"model.top_k", "router.topk_groups", "router.gating"}), "model.top_k",
                    "an integer <= router.topk_groups * model.experts / router.groups = " + std::to_string(reachable) +
                        " for group_limited gating",
                    std::to_string(m.top_k));
    }
  }
  if ((w.source == WorkloadSource::trace || w.source == WorkloadSource::load_profile ||
       w.source == WorkloadSource::logits) &&
      w.path.empty()) {
    fail_expected(origin({"workload.path", "workload.source"}), "workload.path",
                  std::string("a file path for source ") + to_string(w.source), "''");
  }
  if (w.prompt_len_range && (w.prompt_len.size() != 2 || w.prompt_len[0] > w.prompt_len[1])) {
    fail_expected(origin({"workload.prompt_len", "workload.prompt_len_range"}), "workload.prompt_len",
                  "[LO, HI] with LO <= HI (workload.prompt_len_range is true)",
                  std::to_string(w.prompt_len.size()) + " lengths");
  }
  if (w.source == WorkloadSource::decoder && !w.prompt_len_range && w.prompt_len.size() > 1 &&
      static_cast<int64_t>(w.prompt_len.size()) != w.batch) {
    fail_expected(origin({"workload.prompt_len", "workload.batch"}), "workload.prompt_len",
                  "one length or workload.batch (" + std::to_string(w.batch) + ") lengths",
                  std::to_string(w.prompt_len.size()) + " lengths");
  }
  if (!p.map.empty()) {
    if (static_cast<int64_t>(p.map.size()) != m.experts) {
      fail_expected(origin({"placement.map", "model.experts"}), "placement.map",
                    E + " entries, one per expert (model.experts)", std::to_string(p.map.size()) + " entries");
    }
    for (size_t i = 0; i < p.map.size(); ++i) {
      if (p.map[i] >= p.devices) {
        fail_expected(origin({"placement.map", "placement.devices"}), "placement.map[" + std::to_string(i) + "]",
                      "a device in [0, " + std::to_string(p.devices - 1) + "] (placement.devices)",
                      std::to_string(p.map[i]));
      }
    }
  }
}

// ---- emitting ------------------------------------------------------------------------------------
void emit_experiment(YAML::Emitter& out, const Experiment& e) {
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << e.name;
  for (const Section& s : sections()) {
    out << YAML::Key << s.key << YAML::Value << YAML::BeginMap;
    for (const Field& f : s.fields) {
      if (!f.emit) continue;
      out << YAML::Key << f.key << YAML::Value;
      f.emit(out, e);
    }
    out << YAML::EndMap;
    if (s.key == "workload") {  // keep the section order of experiment.hpp: hardware follows workload
      out << YAML::Key << "hardware" << YAML::Value;
      if (e.hardware.inline_yaml.empty()) {
        out << e.hardware.name;
      } else {
        out << YAML::Load(e.hardware.inline_yaml);
      }
    }
  }
  out << YAML::Key << "expect" << YAML::Value;
  if (e.expect.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (const Expectation& x : e.expect) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "metric" << YAML::Value << x.metric;
    out << YAML::Key << "aggregate" << YAML::Value << x.aggregate;
    if (!x.strategy.empty()) out << YAML::Key << "strategy" << YAML::Value << x.strategy;
    if (x.min) out << YAML::Key << "min" << YAML::Value << format_double(*x.min);
    if (x.max) out << YAML::Key << "max" << YAML::Value << format_double(*x.max);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
}

}  // namespace

const std::vector<std::string>& known_expect_metrics() {
  static const std::vector<std::string> metrics = {
      "imbalance",   "demand_imbalance", "cv",           "entropy_norm",   "active_experts",
      "capacity",    "dropped",          "drop_rate",    "tokens_unrouted", "aux_loss",
      "aux_loss_switch", "aux_loss_gshard", "z_loss",    "padding_waste",  "top20_share",
      "bottom20_share",  "dead_experts",  "rank_imbalance", "batching_efficiency", "modeled_time_s",
      "critical_batch"};
  return metrics;
}

Experiment load_experiment_text(const std::string& yaml_text, const std::string& source_name,
                                const std::vector<std::string>& overrides) {
  Loader loader(source_name);
  try {
    YAML::Node root;
    try {
      const auto documents = scan_documents(yaml_text);
      if (documents.size() > 1) {
        throw ConfigError(source_name + ":" + std::to_string(documents[1].root.line + 1) +
                          ": expected one YAML document, got " + std::to_string(documents.size()));
      }
      if (!documents.empty()) root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& ex) {
      throw ConfigError(source_name + ":" + std::to_string(ex.mark.line + 1) + ": invalid YAML: " + ex.msg);
    }
    if (!root.IsMap()) {
      const std::string got = (!root.IsDefined() || root.IsNull()) ? "an empty document" : describe(root);
      const std::string line = root.Mark().line >= 0 ? ":" + std::to_string(root.Mark().line + 1) : "";
      throw ConfigError(source_name + line + ": expected a YAML map with the sections " + join(top_keys(), ", ") +
                        ", got " + got);
    }
    for (const std::string& kv : overrides) loader.apply_set(root, kv);
    Experiment e = loader.read(root);
    e.source_file = source_name;
    return e;
  } catch (const ConfigError& ex) {
    throw ConfigError(ex.what());
  } catch (const YAML::Exception& ex) {
    throw ConfigError(source_name + ": invalid YAML: " + ex.what());
  }
}

Experiment load_experiment_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": expected an experiment file, got a folder");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the experiment file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read the experiment file");
  return load_experiment_text(text.str(), path, overrides);
}

Experiment default_experiment(const std::vector<std::string>& overrides) {
  const auto& files = embedded_files();
  auto it = files.find("configs/quickstart.yaml");
  if (it == files.end()) throw ConfigError("<built-in>: configs/quickstart.yaml is not embedded in this build");
  return load_experiment_text(it->second, "<built-in>", overrides);
}

std::string experiment_to_yaml(const Experiment& e) {
  YAML::Emitter out;
  emit_experiment(out, e);
  return std::string(out.c_str()) + "\n";
}

void apply_override(Experiment& e, const std::string& key_eq_value) {
  const std::string source = e.source_file.empty() ? "<effective>" : "<effective " + e.source_file + ">";
  Experiment updated = load_experiment_text(experiment_to_yaml(e), source, {key_eq_value});
  updated.source_file = e.source_file;
  e = std::move(updated);
}

}  // namespace moesim
