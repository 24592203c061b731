// The error types of moesim and the exit code each maps to (docs/design.md "Exit codes and errors").
// Library code throws; only main() turns an exception into a message and an exit code.
// Host only. Covered by tests/cli (exit codes) and every test that expects a throw.
#pragma once

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>

namespace moesim {

// An error message is one line whatever it quotes: a control character from a file name, a key or a
// cell (a newline or carriage return inside a quoted YAML key, say) is written as \xNN.
inline std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

// Exit codes of the moesim binary.
constexpr int kExitOk = 0;
constexpr int kExitCheckFailed = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitResource = 3;
// An exception that is not a moesim::Error reached main: a bug in moesim, reported with its message.
constexpr int kExitInternal = 4;

struct Error : std::runtime_error {
  explicit Error(const std::string& message) : std::runtime_error(one_line(message)) {}
  virtual int exit_code() const { return kExitBadInput; }
  // The file that does not exist, where that is the error (open_failure); empty otherwise.
  std::string missing_file;
};

// A config file or --set override is wrong: the message names the file, key path and what was expected.
struct ConfigError : Error {
  using Error::Error;
};

// A data file (logits, trace, profile, baseline) or a command-line argument is wrong.
struct InputError : Error {
  using Error::Error;
};

// A resource limit: the memory estimate is over the limit, or no CUDA device for --backend cuda.
struct ResourceError : Error {
  using Error::Error;
  int exit_code() const override { return kExitResource; }
};

// A backend call failed (CUDA, cuBLAS, BLAS). Carries the call text, file and line.
struct BackendError : Error {
  using Error::Error;
  int exit_code() const override { return 4; }
};

// A precondition of a public entry point does not hold: a bug in the caller.
struct PreconditionError : Error {
  using Error::Error;
};

// A file that cannot be opened: `E` with `message`, marked missing_file when `path` does not exist, so that a
// caller that tells the two apart can (the Python module raises FileNotFoundError); the CLI prints it as any
// other error of its kind.
template <class E>
E open_failure(const std::string& path, const std::string& message) {
  E e(message);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) e.missing_file = path;
  return e;
}

}  // namespace moesim

// Checks a precondition once at a public entry point; throws PreconditionError with the location.
#define MOESIM_REQUIRE(cond, message)                                                          \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::ostringstream moesim_require_os_;                                                   \
      moesim_require_os_ << __FILE__ << ":" << __LINE__ << ": requirement failed: " << message; \
      throw ::moesim::PreconditionError(moesim_require_os_.str());                             \
    }                                                                                          \
  } while (0)
