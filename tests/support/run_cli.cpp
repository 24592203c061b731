// Runs the moesim binary for the CLI tests (see run_cli.hpp).
#include "tests/support/run_cli.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace moesim::testing {

std::string without_provenance(const std::string& json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text);
  j.erase("provenance");
  if (j.contains("runs") && j["runs"].is_array())
    for (nlohmann::json& r : j["runs"]) r.erase("provenance");
  return j.dump(2);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string make_temp_dir() {
  char tmpl[] = "/tmp/moesim_test_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) throw std::runtime_error("mkdtemp failed");
  return dir;
}

CliResult run_cli(const std::string& args) {
  const std::string dir = make_temp_dir();
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const std::string cmd = std::string(MOESIM_BINARY) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  rmdir(dir.c_str());
  return r;
}

}  // namespace moesim::testing
