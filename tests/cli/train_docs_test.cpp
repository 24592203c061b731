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

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

const std::string kRoot = MOESIM_SOURCE_DIR;

struct Step {
  std::string args, output;
  int exit_code = 0;
};

// The console blocks' steps of `text` (the same reading as tests/cli/docs_examples_test.cpp's).
std::vector<Step> steps_of(const std::string& text) {
  std::vector<Step> steps;
  std::istringstream in(text);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("```", 0) == 0) {
      inside = !inside && line == "```console";
      continue;
    }
    if (!inside) continue;
    if (line.rfind("$ moesim ", 0) == 0) {
      steps.push_back({line.substr(9), "", 0});
    } else if (!steps.empty() && std::regex_match(line, std::regex("\\[exit [0-9]+\\]"))) {
      steps.back().exit_code = std::stoi(line.substr(6));
    } else if (!steps.empty()) {
      steps.back().output += line + "\n";
    }
  }
  return steps;
}

void run_steps(const std::vector<Step>& steps, const std::string& page) {
  const std::string dir = testing::make_temp_dir();
  std::filesystem::create_directory_symlink(kRoot + "/configs", dir + "/configs");
  std::filesystem::create_directory_symlink(kRoot + "/data", dir + "/data");
  for (const Step& step : steps) {
    const std::string cmd = "cd '" + dir + "' && '" MOESIM_BINARY "' " + step.args + " > out.txt 2> err.txt";
    const int status = std::system(cmd.c_str());
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const std::string output = testing::read_text(dir + "/out.txt") + testing::read_text(dir + "/err.txt");
    EXPECT_EQ(code, step.exit_code) << page << ": $ moesim " << step.args << "\n" << output;
    EXPECT_EQ(output, step.output) << page << ": $ moesim " << step.args;
  }
}

TEST(TrainDocs, TrainingPageRunsAsWritten) {
  const std::vector<Step> steps = steps_of(testing::read_text(kRoot + "/docs/training.md"));
  ASSERT_GE(steps.size(), 3u);
  run_steps(steps, "docs/training.md");
}

TEST(TrainDocs, ReadmeTrainingSectionRunsAsWritten) {
  const std::string readme = testing::read_text(kRoot + "/README.md");
  const size_t at = readme.find("### Training: what the real router costs");
  ASSERT_NE(at, std::string::npos);
  const std::vector<Step> steps = steps_of(readme.substr(at, readme.find("\n### ", at + 4) - at));
  ASSERT_EQ(steps.size(), 1u);
  run_steps(steps, "README.md");
}

}  // namespace
}  // namespace moesim
