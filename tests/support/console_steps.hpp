// The ```console blocks of a page (README.md, docs/*.md) as steps to run: each `$ moesim ARGS` line with the
// output printed under it (stdout, then stderr) and the exit code of its `[exit N]` line (0 without one);
// run_console_step runs one in a folder and holds the binary to it. Shared by the tests that keep pages true
// to the binary (tests/cli/docs_examples_test.cpp, tests/cli/train_docs_test.cpp). Host only.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_cli.hpp"

namespace moesim::testing {

struct ConsoleStep {
  std::string args, output;
  int exit_code = 0;
};

inline std::vector<ConsoleStep> console_steps(const std::string& page) {
  std::vector<ConsoleStep> steps;
  std::istringstream in(page);
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

// Runs the step's command line in `dir` (a shell, so the page's quoting holds) and expects its exit code and
// its output, both streams, as printed on the page; `where` names the page or the folder in a failure.
inline void run_console_step(const std::string& dir, const ConsoleStep& step, const std::string& where) {
  const std::string cmd = "cd '" + dir + "' && '" MOESIM_BINARY "' " + step.args + " > out.txt 2> err.txt";
  const int status = std::system(cmd.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::string output = read_text(dir + "/out.txt") + read_text(dir + "/err.txt");
  EXPECT_EQ(code, step.exit_code) << where << ": $ moesim " << step.args << "\n" << output;
  EXPECT_EQ(output, step.output) << where << ": $ moesim " << step.args;
}

}  // namespace moesim::testing
