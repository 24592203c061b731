// Request lengths (docs/serving.md "Request lengths"): the KV tokens each decoding request of a serving step attends,
// each prompt's tokens in prefill or in a serving stream, or a decoder workload's prompts (workload.prompt_len), as
//   fixed            every request the same (the caller's length);
//   uniform:LO:HI    drawn uniformly from the integers LO..HI;
//   lognormal:M:S    exp(ln M + S N(0, 1)) rounded, at least 1 (M the median, S the log-space spread);
//   file:PATH        the lengths of a file, one request a line, cycled (a CSV whose header is `tokens`).
// Draws are counter-based (src/common/counter_rng.hpp): request i's length depends only on (seed, i).
// Host only. Covered by tests/step/request_lengths_test.cpp; the file reader by the request_lengths fuzz target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moesim {

enum class LengthKind { fixed, uniform, lognormal, file };

struct RequestLengths {
  LengthKind kind = LengthKind::fixed;
  int64_t lo = 0, hi = 0;          // uniform
  double median = 0, sigma = 0;    // lognormal
  std::vector<int64_t> lengths;    // file
  std::string spec = "fixed";      // as given
  // Request i's length; `fixed` is the caller's length for kind fixed. Every draw is in [1, kMaxLength].
  int64_t draw(int64_t fixed, uint64_t seed, uint64_t i) const;
  // The mean length (fixed: `fixed`), for the reports.
  double mean(int64_t fixed) const;
};

constexpr int64_t kMaxRequestLength = int64_t{1} << 22;
constexpr int kMaxLengthsFileRequests = 1 << 20;
constexpr std::uintmax_t kMaxLengthsFileBytes = std::uintmax_t{64} << 20;

// Parses a spec; `what` names the flag, the key or the column in the error. Reads a file spec's file (relative paths
// against `base_dir` when not empty; a regular file of at most kMaxLengthsFileBytes). Errors: InputError "WHAT:
// expected ..., got 'SPEC'" (one line), or naming the file and its line.
RequestLengths parse_request_lengths(const std::string& spec, const std::string& what, const std::string& base_dir = "");

// A lengths file's text: the header `tokens`, then one integer from 1 to kMaxRequestLength a line (blank lines
// skipped). Errors: InputError "ORIGIN:LINE: tokens: expected ..., got '...'".
std::vector<int64_t> parse_lengths_file(const std::string& text, const std::string& origin);

}  // namespace moesim
