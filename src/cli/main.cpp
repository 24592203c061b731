// moesim: the command-line entry. Dispatches to one subcommand of the table in commands.hpp; turns
// every moesim::Error into one line on stderr and its exit code (docs/design.md "Exit codes and
// errors"); never lets an exception escape.
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "src/cli/cli_common.hpp"
#include "src/cli/commands.hpp"
#include "src/common/allocator.hpp"
#include "src/common/build_info.hpp"
#include "src/common/error.hpp"
#include "src/report/provenance.hpp"

int main(int argc, char** argv) {
  using namespace moesim;
  configure_host_allocator();
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::cout << cli::usage_text();
    return argc < 2 ? kExitBadInput : kExitOk;
  }
  if (!std::strcmp(argv[1], "--version")) {
    const std::string commit = build_commit();
    std::cout << "moesim " << MOESIM_VERSION << (commit.empty() ? "" : " (commit " + commit + ")") << "\n";
    return kExitOk;
  }
  const std::string cmd = argv[1];
  set_result_command(cmd);
  try {
    if (const cli::Command* c = cli::find_command(cmd)) return c->handler(argc - 1, argv + 1);
    std::cerr << "moesim: unknown command '" << cmd << "'; expected " << cli::command_names() << "\n";
    return kExitBadInput;
  } catch (const Error& e) {
    // One insertion, one write: under mpirun the launcher's own lines cannot split it.
    std::cerr << "moesim " + cmd + ": " + e.what() + "\n";
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::cerr << "moesim " << cmd << ": out of memory; lower the sizes or set --memory-limit\n";
    return kExitResource;
  } catch (const std::exception& e) {
    std::cerr << "moesim " << cmd << ": internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}
