// Format checks of the published fused-MoE measurements in data/validation/*.csv (see its README.md):
// the exact header (16 columns, or 17 with ep), that many fields a row, positive numeric fields, a GPU with a
// configs/hardware profile, a known scope and routing, a source on every row, no duplicate shape rows
// within a file, and the coverage the set promises (at least 18 files over at least 5 GPU kinds).
// Host only; reads files, no randomness.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "src/sweep/published.hpp"

namespace {

namespace fs = std::filesystem;

constexpr const char* kHeader =
    "gpu,dtype,experts,n,k,top_k,tp,batch,measured_us,source,date,tool,kernel_config,routing,notes,scope";
constexpr std::size_t kMinFiles = 18;
constexpr std::size_t kMinGpuKinds = 5;

fs::path validation_dir() { return fs::path(MOESIM_SOURCE_DIR) / "data" / "validation"; }

using moesim::split_csv_line;

std::vector<fs::path> csv_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(validation_dir()))
    if (entry.path().extension() == ".csv") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool is_profile(const std::string& gpu) {
  return fs::exists(fs::path(MOESIM_SOURCE_DIR) / "configs" / "hardware" / (gpu + ".yaml"));
}

bool parses_positive(const std::string& text) {
  if (text.empty()) return false;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && value > 0.0;
}

TEST(ValidationData, EveryFileIsWellFormed) {
  const auto files = csv_files();
  ASSERT_FALSE(files.empty()) << "no CSV in " << validation_dir();
  // The numeric columns: experts, n, k, top_k, tp, batch, measured_us.
  const std::vector<std::size_t> numeric = {2, 3, 4, 5, 6, 7, 8};
  for (const auto& file : files) {
    SCOPED_TRACE(file.filename().string());
    std::ifstream in(file);
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    // Communication tables (*-a2a.csv) have their own columns: tests/sweep/published_comm_test.cpp reads them.
    if (line.rfind("phase,", 0) == 0) {
      EXPECT_NE(file.filename().string().find("-a2a.csv"), std::string::npos) << "a communication table is named *-a2a.csv";
      continue;
    }
    EXPECT_TRUE(line == kHeader || line == std::string(kHeader) + ",ep" || line == std::string(kHeader) + ",ep,gated" ||
                line == std::string(kHeader) + ",ep,gated,fitted")
        << line;
    const std::size_t fields = split_csv_line(line).size();
    std::set<std::tuple<std::string, std::string, std::string, std::string, std::string, std::string,
                        std::string, std::string, std::string>>
        keys;
    int rows = 0;
    int line_no = 1;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      ++rows;
      const auto f = split_csv_line(line);
      ASSERT_EQ(f.size(), fields) << "line " << line_no;
      if (fields > 16) EXPECT_TRUE(parses_positive(f[16])) << "line " << line_no << ": ep '" << f[16] << "'";
      if (fields > 17) EXPECT_TRUE(f[17] == "0" || f[17] == "1") << "line " << line_no << ": gated '" << f[17] << "'";
      if (fields > 18) EXPECT_TRUE(f[18] == "0" || f[18] == "1") << "line " << line_no << ": fitted '" << f[18] << "'";
      for (const auto col : numeric)
        EXPECT_TRUE(parses_positive(f[col])) << "line " << line_no << " column " << col << " = '" << f[col] << "'";
      EXPECT_TRUE(is_profile(f[0])) << "line " << line_no << ": gpu '" << f[0] << "' has no configs/hardware profile";
      EXPECT_TRUE(f[15] == "layer" || f[15] == "experts" || f[15] == "up_gemm" || f[15] == "down_gemm")
          << "line " << line_no << ": scope '" << f[15] << "'";
      EXPECT_FALSE(f[9].empty()) << "line " << line_no << ": empty source";
      // One row per shape, batch and routing (a power-law row sits beside its balanced row).
      EXPECT_TRUE(keys.emplace(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[13]).second)
          << "line " << line_no << ": duplicate (gpu,dtype,E,n,k,top_k,tp,batch,routing)";
    }
    EXPECT_GT(rows, 0);
  }
}

TEST(ValidationData, CoversEnoughTablesAndGpus) {
  const auto files = csv_files();
  std::set<std::string> gpus;
  for (const auto& file : files) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    const std::size_t gpu = line.rfind("phase,", 0) == 0 ? 1 : 0;  // a communication table's gpu is its 2nd column
    while (std::getline(in, line))
      if (!line.empty()) gpus.insert(split_csv_line(line)[gpu]);
  }
  EXPECT_GE(files.size(), kMinFiles);
  EXPECT_GE(gpus.size(), kMinGpuKinds);
}

TEST(ValidationData, ReadmeListsEveryFile) {
  std::ifstream in(validation_dir() / "README.md");
  std::stringstream readme;
  readme << in.rdbuf();
  for (const auto& file : csv_files())
    EXPECT_NE(readme.str().find(file.filename().string()), std::string::npos) << file.filename();
}

}  // namespace
