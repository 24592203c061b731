// Readers for a user's router logits: NumPy .npy (float32 or float64, 2-D, C or Fortran order,
// little-endian) and .csv (one token per line, one number per expert, commas). Output is a
// row-major float32 matrix [num_tokens, num_experts]. Every malformed input raises InputError with
// one line naming the file and what was expected; NaN/Inf values are rejected. Host only.
// Covered by tests/workload/logits_file_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moesim {

struct LogitsMatrix {
  int64_t num_tokens = 0;
  int num_experts = 0;
  std::vector<float> values;  // [num_tokens, num_experts]
};

// Chooses the reader by extension (.npy or .csv).
LogitsMatrix read_logits_file(const std::string& path);
// Parses in-memory contents; `name` is used in messages. Exposed for tests and fuzzers.
LogitsMatrix parse_npy(const std::string& bytes, const std::string& name);
LogitsMatrix parse_csv(const std::string& text, const std::string& name);

// Writes a float32 .npy (used by tests and by users who want the synthetic logits).
std::string encode_npy_f32(const std::vector<float>& values, int64_t rows, int64_t cols);

}  // namespace moesim
