// docs/training.md and README.md's training section run as written: every `$ moesim ...` line of their console
// blocks prints what the page shows under it (stdout, then stderr) with its exit code ([exit N], 0 without), from a
// scratch folder where configs/ and data/ resolve. Runs the built binary. Host only.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/console_steps.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

const std::string kRoot = MOESIM_SOURCE_DIR;

using Step = testing::ConsoleStep;

void run_steps(const std::vector<Step>& steps, const std::string& page) {
  const std::string dir = testing::make_temp_dir();
  std::filesystem::create_directory_symlink(kRoot + "/configs", dir + "/configs");
  std::filesystem::create_directory_symlink(kRoot + "/data", dir + "/data");
  for (const Step& step : steps) testing::run_console_step(dir, step, page);
}

TEST(TrainDocs, TrainingPageRunsAsWritten) {
  const std::vector<Step> steps = testing::console_steps(testing::read_text(kRoot + "/docs/training.md"));
  ASSERT_GE(steps.size(), 3u);
  run_steps(steps, "docs/training.md");
}

TEST(TrainDocs, ReadmeTrainingSectionRunsAsWritten) {
  const std::string readme = testing::read_text(kRoot + "/README.md");
  const size_t at = readme.find("### Training: what the real router costs");
  ASSERT_NE(at, std::string::npos);
  const std::vector<Step> steps = testing::console_steps(readme.substr(at, readme.find("\n### ", at + 4) - at));
  ASSERT_EQ(steps.size(), 1u);
  run_steps(steps, "README.md");
}

}  // namespace
}  // namespace moesim
