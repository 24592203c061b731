// The published tables' cells (see table_cells.hpp).
#include "src/sweep/table_cells.hpp"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "src/common/embedded.hpp"
#include "src/config/load_config.hpp"
#include "src/sweep/published.hpp"

namespace moesim {

int64_t TableCell::integer(const char* column, const std::string& s, int64_t lo, int64_t hi, bool may_be_empty) const {
  if (s.empty() && may_be_empty) return 0;
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || v < lo || v > hi)
    fail(column, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + (may_be_empty ? " (or empty)" : ""),
         s);
  return v;
}

double TableCell::real(const char* column, const std::string& s, double lo, double hi, bool may_be_empty) const {
  if (s.empty() && may_be_empty) return 0;
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v) || v < lo || v > hi) {
    std::ostringstream range;
    range << "a number from " << lo << " to " << hi << (may_be_empty ? " (or empty)" : "");
    fail(column, range.str(), s);
  }
  return v;
}

void read_table(const std::string& text, const std::string& origin, const std::string& header, int max_rows,
                const std::function<void(const std::vector<std::string>&)>& on_header,
                const std::function<void(const TableCell&, const std::string&)>& on_row) {
  std::istringstream in(text);
  std::string line;
  int number = 0, rows = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (number == 1) {
      if (line.rfind(header, 0) != 0 || (line.size() > header.size() && line[header.size()] != ','))
        throw InputError(origin + ":1: header: expected '" + header + "' (more columns only after notes), got '" +
                         line.substr(0, 200) + "'");
      on_header(split_csv_line(line));
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const TableCell w{origin, number};
    if (++rows > max_rows) w.fail("rows", "at most " + std::to_string(max_rows) + " rows", std::to_string(rows));
    on_row(w, line);
  }
  if (number == 0) throw InputError(origin + ":1: header: expected '" + header + "', got an empty file");
}

Experiment table_model(const TableCell& c, const std::string& cell, const std::string& builtin_dir) {
  namespace fs = std::filesystem;
  static const std::string kConfigDir = "configs/";
  const auto& files = embedded_files();
  const auto it = files.find(kConfigDir + cell + ".yaml");
  if (it != files.end()) return load_experiment_text(it->second, it->first, {});
  const fs::path path(cell);
  const bool yaml = path.extension() == ".yaml" || path.extension() == ".yml";
  std::string names;
  for (const auto& [p, text] : files) {
    if (p.rfind(kConfigDir, 0) != 0 || p.find('/', kConfigDir.size()) != std::string::npos) continue;
    const std::string stem = fs::path(p).stem().string();
    if (stem == "quickstart") continue;
    names += (names.empty() ? "" : ", ") + stem;
  }
  if (!yaml || c.origin.rfind(builtin_dir, 0) == 0)
    c.fail("model", "a shipped model config (" + names + ") or a model .yaml file relative to the table", cell);
  const std::string resolved = path.is_absolute() ? cell : (fs::path(c.origin).parent_path() / path).string();
  try {
    return load_experiment_file(resolved, {});
  } catch (const ConfigError& e) {
    throw InputError(c.origin + ":" + std::to_string(c.line) + ": model: " + e.what());
  }
}

}  // namespace moesim
