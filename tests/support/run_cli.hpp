// Runs the built moesim binary (MOESIM_BINARY, set by CMake) with arguments and captures its exit
// code, stdout and stderr, for the CLI tests.
#pragma once

#include <string>

namespace moesim::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// `args` is appended to the binary path as shell words (quote them yourself where needed).
CliResult run_cli(const std::string& args);

// A fresh temporary folder for a test's files.
std::string make_temp_dir();

// A JSON result's text without its `provenance` blocks (the invocation's time, threads, commit):
// what must be the same byte for byte between two runs of the same inputs.
std::string without_provenance(const std::string& json_text);

std::string read_text(const std::string& path);
void write_text(const std::string& path, const std::string& text);

}  // namespace moesim::testing
