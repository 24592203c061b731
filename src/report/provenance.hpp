// Where a JSON result came from: the `provenance` block every result carries (run, compare, check,
// sweep, validate, route and the expert-parallel run under mpirun), docs/json-schema.md. It holds what
// is a property of the invocation rather than of the inputs: moesim's version and commit, the command,
// the thread count and the UTC time. Everything outside it is a function of the inputs and the build,
// so two results compare byte for byte once `provenance` is removed. Host only.
// Covered by tests/report/provenance_test.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moesim {

// The command whose results are written ("run", "compare", ...); main sets it once. "" in a library
// use, where no command ran.
void set_result_command(const std::string& command);
const std::string& result_command();

// {"moesim_version", "commit" (null outside a git checkout), "command", "threads", "date_utc"}.
// threads: the OpenMP team size a parallel region gets (1 without OpenMP); date_utc: ISO 8601, seconds.
nlohmann::json provenance_json();

// The commands whose JSON is a run result that `check --baseline` accepts.
bool is_run_result_command(const std::string& command);

}  // namespace moesim
