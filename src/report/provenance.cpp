// The provenance block of every JSON result (see provenance.hpp).
#include "src/report/provenance.hpp"

#include "src/common/build_info.hpp"
#include "src/common/clock.hpp"
#include "src/common/host.hpp"

namespace moesim {
namespace {

std::string& command_slot() {
  static std::string command;
  return command;
}

}  // namespace

void set_result_command(const std::string& command) { command_slot() = command; }
const std::string& result_command() { return command_slot(); }

nlohmann::json provenance_json() {
  const int threads = openmp_max_threads();
  const std::string commit = build_commit();
  return {{"moesim_version", MOESIM_VERSION},
          {"commit", commit.empty() ? nlohmann::json(nullptr) : nlohmann::json(commit)},
          {"command", result_command()},
          {"threads", threads},
          {"date_utc", utc_now("%Y-%m-%dT%H:%M:%SZ")}};
}

bool is_run_result_command(const std::string& command) {
  return command == "run" || command == "compare" || command == "check";
}

}  // namespace moesim
