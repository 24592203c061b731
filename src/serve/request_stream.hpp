// The requests a serving run schedules (docs/serve.md "Requests"): each an arrival time, a prompt and an output
// length, in arrival order.
//   Synthetic: a count of requests arriving as a Poisson process at a rate (requests/s; 0: all at time 0, the
//     fixed-concurrency case), prompt and output lengths from RequestLengths specs (fixed, uniform, lognormal,
//     file). Draws are counter-based (src/common/counter_rng.hpp) on the seed: request i's arrival gap, prompt and
//     output depend only on (seed, i). Gap i is -ln(1 - u) / rate, u from stream kStreamRequestArrival; request 0
//     arrives after its own gap (not at 0), so the stream is a Poisson process started at time 0. Prompts draw on
//     the seed; outputs on counter_hash(seed, kStreamRequestOutput, 0), so that the two are independent although
//     RequestLengths draws on one fixed stream.
//   From a file, one request a line, in either format:
//     the Azure LLM inference trace's CSV as published (header TIMESTAMP,ContextTokens,GeneratedTokens; a
//       timestamp "YYYY-MM-DD HH:MM:SS[.fraction]"), arrivals taken relative to the first request
//       (the earliest timestamp, wherever its row);
//     moesim's CSV (header arrival_s,prompt_tokens,output_tokens; seconds >= 0 from the stream's start, as given).
//   Rows are sorted by arrival (stable), then numbered; a request with 0 output tokens is refused (it never
//   decodes). Cells are separated by commas (no quoting), blanks around a cell and blank lines are ignored, a
//   trailing '\r' and a leading UTF-8 byte order mark are dropped.
// Host only. Covered by tests/serve/request_stream_test.cpp; the file reader by the request_stream fuzz target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/common/request_lengths.hpp"

namespace moesim {

struct Request {
  int64_t id = 0;           // its index in arrival order
  double arrival_s = 0;     // from the stream's start
  int64_t prompt_tokens = 1, output_tokens = 1;
};

struct SyntheticStream {
  int64_t requests = 1;
  double rate_per_s = 0;          // Poisson arrivals; 0: every request at time 0
  RequestLengths prompt, output;  // kind fixed takes prompt_tokens / output_tokens
  int64_t prompt_tokens = 1024, output_tokens = 256;
  uint64_t seed = 0;
};

// The most requests a stream holds (a file's rows or a synthetic count).
constexpr int64_t kMaxStreamRequests = int64_t{1} << 20;

// Draws a synthetic stream. Errors: InputError when requests is outside [1, kMaxStreamRequests] or the rate is
// negative or not finite.
std::vector<Request> synthetic_requests(const SyntheticStream& s);

// Parses a request file's text (either header). Errors: InputError "ORIGIN:LINE: COLUMN: expected WHAT, got 'VALUE'"
// (one line); lengths in [1, kMaxRequestLength]; at most kMaxStreamRequests rows; at least one.
std::vector<Request> parse_request_file(const std::string& text, const std::string& origin);
// Reads and parses a file (InputError naming the path when it cannot be read).
std::vector<Request> load_request_file(const std::string& path);

}  // namespace moesim
