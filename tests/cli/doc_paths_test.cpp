// Every path README.md, docs/*.md and configs/**/*.yaml cite exists in the repository: a path under one of
// the repository's own top-level folders (configs/, docs/, src/, ...; globs and {a,b} lists expanded), and a
// bare document name such as HARDWARE.md anywhere in the tree. Paths of other projects that share a folder
// name (transformers' src/transformers/...), build outputs (build/, build-demo/), placeholders (<model>),
// files a command writes (--out FILE) and the reader's own (my-router.yaml) are not this repository's. Reads files only; host only.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace moesim {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = MOESIM_SOURCE_DIR;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The files whose citations are checked.
std::vector<fs::path> citing_files() {
  std::vector<fs::path> out = {kRoot / "README.md"};
  for (const auto& e : fs::directory_iterator(kRoot / "docs"))
    if (e.path().extension() == ".md") out.push_back(e.path());
  for (const auto& e : fs::recursive_directory_iterator(kRoot / "configs"))
    if (e.path().extension() == ".yaml") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Every file and folder of the tree (relative, generic form), build outputs and .git left out.
const std::set<std::string>& tree() {
  static const std::set<std::string> t = [] {
    std::set<std::string> s;
    for (auto it = fs::recursive_directory_iterator(kRoot); it != fs::recursive_directory_iterator(); ++it) {
      const std::string rel = fs::relative(it->path(), kRoot).generic_string();
      if (rel.rfind("build", 0) == 0 || rel.rfind(".git", 0) == 0) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      s.insert(rel);
    }
    return s;
  }();
  return t;
}

// "a/{b,c}/d" -> "a/b/d", "a/c/d" (one level of braces at a time, recursively).
std::vector<std::string> expand_braces(const std::string& p) {
  const size_t open = p.find('{');
  const size_t close = open == std::string::npos ? open : p.find('}', open);
  if (close == std::string::npos) return {p};
  std::vector<std::string> out;
  std::stringstream alts(p.substr(open + 1, close - open - 1));
  for (std::string a; std::getline(alts, a, ',');)
    for (const std::string& x : expand_braces(p.substr(0, open) + a + p.substr(close + 1))) out.push_back(x);
  return out;
}

// Whether `pattern` (a path, perhaps with * and ?) names something in the tree.
bool exists_in_tree(std::string pattern) {
  while (!pattern.empty() && (pattern.back() == '/' || pattern.back() == '.')) pattern.pop_back();
  if (pattern.find_first_of("*?") == std::string::npos) return tree().count(pattern) > 0;
  std::string re;
  for (char c : pattern) {
    if (c == '*') re += "[^/]*";
    else if (c == '?') re += "[^/]";
    else if (std::string(".+()[]^$|\\").find(c) != std::string::npos) re += std::string("\\") + c;
    else re += c;
  }
  const std::regex r(re);
  for (const std::string& f : tree())
    if (std::regex_match(f, r)) return true;
  return false;
}

// A bare document name (SOURCE.md) exists when some file of the tree has that name.
bool name_in_tree(const std::string& name) {
  for (const std::string& f : tree())
    if (fs::path(f).filename() == name) return true;
  return false;
}

struct Citation {
  std::string file, path;
};

std::vector<Citation> citations() {
  // A path under one of the repository's top-level folders, or a bare NAME.md.
  static const std::regex path_re(
      R"((^|[^A-Za-z0-9_./-])((?:configs|docs|src|tests|scripts|data|router|kernels|cmake)/[A-Za-z0-9_.*?{},/+-]*))");
  static const std::regex doc_re(R"((^|[^A-Za-z0-9_./-])([A-Z][A-Z0-9_-]*\.md)\b)");
  // Other projects' files under a folder name this repository also has.
  static const std::vector<std::string> foreign = {"src/transformers", "src/sglang", "src/vllm", "src/megatron",
                                                   "tests/unit_tests", "scripts/ci", "docs/source" /* NVIDIA/TensorRT-LLM's */,
                                                   "scripts/run_routing_analysis.py" /* allenai/OLMoE's */};
  std::vector<Citation> out;
  for (const fs::path& file : citing_files()) {
    const std::string text = read_all(file);
    const std::string name = fs::relative(file, kRoot).generic_string();
    for (auto it = std::sregex_iterator(text.begin(), text.end(), path_re); it != std::sregex_iterator(); ++it) {
      std::string p = (*it)[2].str();
      while (!p.empty() && std::string(",.").find(p.back()) != std::string::npos) p.pop_back();
      if (p.find('<') != std::string::npos) continue;
      // A file a command writes (`--out FILE`), or the reader's own (my-router.yaml, the add-a-router steps'
      // my_gating.hpp), is not the repository's.
      const size_t at = static_cast<size_t>(it->position(2));
      if (at >= 6 && text.compare(at - 6, 6, "--out ") == 0) continue;
      const std::string base = fs::path(p).filename().string();
      if (base.rfind("my-", 0) == 0 || base.rfind("my_", 0) == 0) continue;
      if (std::any_of(foreign.begin(), foreign.end(), [&](const std::string& f) { return p.rfind(f, 0) == 0; }))
        continue;
      out.push_back({name, p});
    }
    for (auto it = std::sregex_iterator(text.begin(), text.end(), doc_re); it != std::sregex_iterator(); ++it)
      out.push_back({name, (*it)[2].str()});
  }
  return out;
}

TEST(DocPaths, EveryCitedPathExists) {
  const std::vector<Citation> cited = citations();
  // The walk sees the citations it is meant to: the README's own, and the profiles' source notes.
  ASSERT_GT(cited.size(), 200u);
  size_t checked = 0;
  for (const Citation& c : cited) {
    const bool bare = c.path.find('/') == std::string::npos;
    bool found = false;
    if (bare) {
      found = name_in_tree(c.path);
    } else {
      for (const std::string& p : expand_braces(c.path)) found = found || exists_in_tree(p);
    }
    ++checked;
    EXPECT_TRUE(found) << c.file << " cites " << c.path << ", which is not in the repository";
  }
  EXPECT_EQ(checked, cited.size());
}

TEST(DocPaths, TheWalkFindsAMissingFile) {
  // The checks themselves: a stale name and a stale path are not found, real ones are.
  EXPECT_FALSE(name_in_tree("HARDWARE.md"));
  EXPECT_FALSE(name_in_tree("DESIGN.md"));
  EXPECT_TRUE(name_in_tree("SOURCE.md"));
  EXPECT_FALSE(exists_in_tree("configs/no-such.yaml"));
  EXPECT_TRUE(exists_in_tree("configs/regression/*.yaml"));
  EXPECT_TRUE(exists_in_tree("docs/img/"));
  const std::vector<std::string> b = expand_braces("src/{cli,report}/x");
  EXPECT_EQ(b, (std::vector<std::string>{"src/cli/x", "src/report/x"}));
}

}  // namespace
}  // namespace moesim
