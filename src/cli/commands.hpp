// The one table of moesim's subcommands: name, argument hint, summary and handler. It feeds the
// dispatcher in main.cpp, the top-level usage text and the unknown-command message, so the three
// cannot disagree. Host only. Covered by tests/cli/cli_test.cpp (every command's --help runs).
#pragma once

#include <string>
#include <vector>

namespace moesim::cli {

struct Command {
  const char* name;      // e.g. "run"
  const char* args;      // shown after the name in the usage text, e.g. "[FILE]"
  const char* summary;   // one line
  int (*handler)(int argc, char** argv);  // argv[0] is the command name
};

// Every subcommand, in the order the usage text lists them.
const std::vector<Command>& commands();

// The command of that name; null when there is none.
const Command* find_command(const std::string& name);

// `moesim --help`: the usage line, one line per command, the common options.
std::string usage_text();

// "run, compare, ... or report": every command name, for the unknown-command message.
std::string command_names();

}  // namespace moesim::cli
