// YAML helpers of the config stage: strict scalar text -> value (YAML 1.2 core spellings), the shortest
// round-trip text of a double, the document scan that stands in for YAML::LoadAll, and the typed readers
// that throw ConfigError "WHERE: KEY.PATH: expected WHAT, got VALUE". Deterministic, host only. Declared
// in src/config/load_config_internal.hpp; covered by tests/config/load_config_test.cpp.
#include "src/config/load_config_internal.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "src/common/error.hpp"

namespace moesim {
namespace config_detail {
namespace {

// A value quoted in a message, cut to a readable length.
std::string shown(const std::string& s) {
  constexpr size_t kShownChars = 120;
  return s.size() <= kShownChars ? s : s.substr(0, kShownChars) + "...";
}

// yaml-cpp's event parser run once over a stream, noting where each document and its root node start.
// It replaces YAML::LoadAll, which in yaml-cpp 0.7 (Debian 12) never returns on a stream whose next
// token starts no node, e.g. a lone ",": every call yields another empty document at the same place,
// allocating until memory runs out (jbeder/yaml-cpp#1040, fixed upstream by #1319). Here a document
// that starts where the previous one started is reported as invalid YAML.
class DocumentScan : public YAML::EventHandler {
 public:
  using Document = YamlDocument;
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

std::string int_what(int64_t lo, int64_t hi) {
  if (hi == kInt64Max) return "an integer >= " + std::to_string(lo);
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

}  // namespace

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours, each 1.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string nearest_names(const std::string& word, const std::vector<std::string>& names, const std::string& prefix,
                          const std::string& every) {
  // Names the word is a part of, or that are a part of it (capacity -> capacity_factor), else the nearest
  // spellings within a third of the word (at least 2 edits).
  std::vector<std::string> near;
  if (word.size() >= 3) {
    for (const std::string& n : names)
      if (n.find(word) != std::string::npos || (n.size() >= 3 && word.find(n) != std::string::npos)) near.push_back(n);
  }
  if (near.empty() && !word.empty() && word.size() <= 64) {
    size_t best = std::max<size_t>(2, word.size() / 3) + 1;
    for (const std::string& n : names) {
      const size_t d = edit_distance(word, n);
      if (d < best) {
        best = d;
        near.clear();
      }
      if (d == best) near.push_back(n);
    }
  }
  if (!near.empty() && near.size() <= 5) {
    std::string out = "did you mean ";
    for (size_t i = 0; i < near.size(); ++i) out += (i == 0 ? "" : i + 1 == near.size() ? " or " : ", ") + prefix + near[i];
    return out + "?";
  }
  if (names.size() <= 8) return "known: " + join(names, ", ");
  return every;
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

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return "'" + shown(n.Scalar()) + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Null: return "null";
    default: return "nothing";
  }
}

// The documents of `text`. Throws YAML::ParserException for a syntax error, and for the stuck stream above.
std::vector<YamlDocument> scan_documents(const std::string& text) {
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
  // A control character (a carriage return at the end of a file, say) would not survive moesim config's
  // re-emission: YAML reads it back as a line break. No name, path or key of an experiment holds one.
  for (unsigned char c : n.Scalar())
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c);
      fail_expected(where, path, "a string without control characters", std::string("one (byte ") + code + ")");
    }
  return n.Scalar();
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

// A map key must be a plain name, and appear once.
std::string key_name(const YAML::Node& key, const std::string& parent, const std::string& where,
                     std::set<std::string>& seen) {
  const std::string at = parent.empty() ? "" : parent + ".";
  if (!key.IsScalar()) fail_expected(where, parent.empty() ? "(top level)" : parent, "a key name", describe(key));
  const std::string name = key.Scalar();
  if (!seen.insert(name).second) fail(where, at + name, "duplicate key");
  return name;
}

}  // namespace config_detail
}  // namespace moesim
