// Readers for a user's router logits: NumPy .npy (float32 or float64, 2-D, C or Fortran order,
// little-endian) and .csv (one token per line, one number per expert, commas). Output is a
// row-major float32 matrix [num_tokens, num_experts]. Every malformed input raises InputError with
// one line naming the file and what was expected; NaN/Inf values are rejected. Host only.
// Covered by tests/workload/logits_file_test.cpp, tests/cli/bad_input_test.cpp and tests/fuzz (npy, csv).
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

// What a logits file holds, learnt without reading its data (so that a caller can check a memory
// estimate before allocating): the exact shape of a .npy (header only, size checked against the
// shape), and only the byte size of a .csv (its shape is known after parsing).
struct LogitsFileInfo {
  bool is_npy = false;
  uint64_t file_bytes = 0;
  int64_t num_tokens = -1;  // -1: unknown before parsing (.csv)
  int num_experts = -1;
};
LogitsFileInfo inspect_logits_file(const std::string& path);

// Chooses the reader by extension (.npy or .csv). A .npy is read straight into the matrix (no copy
// of the file in memory); a .csv is read whole, then parsed.
LogitsMatrix read_logits_file(const std::string& path);

// InputError "NAME: expected finite logits, got V at row R, column C" at the first NaN or infinity of
// logits [num_tokens, num_experts]: what read_logits_file checks, for logits that come from elsewhere.
void check_finite_logits(const float* logits, int64_t num_tokens, int num_experts, const std::string& name);
// Parses in-memory contents; `name` is used in messages. Exposed for tests and fuzzers.
LogitsMatrix parse_npy(const std::string& bytes, const std::string& name);
LogitsMatrix parse_csv(const std::string& text, const std::string& name);

// Any integer or string .npy, as the members of an engine's .npz dump hold them (npz_file.hpp): dtypes
// i1/i2/i4/i8/u1/u2/u4/u8 (little-endian or one byte), C or Fortran order, any number of dimensions, read
// into int64 in C order; or a 0-d string, U<n> (UTF-32LE) or S<n>, read into `text` (non-ASCII as '?').
// The shape is checked against the bytes present before anything is allocated.
struct NpyArray {
  std::vector<int64_t> shape;  // () for a scalar
  std::vector<int64_t> ints;   // [product of shape], C order; empty for a string
  bool is_text = false;
  std::string text;
};
NpyArray parse_npy_array(const std::string& bytes, const std::string& name);

// Writes a float32 .npy (used by tests and by users who want the synthetic logits).
std::string encode_npy_f32(const std::vector<float>& values, int64_t rows, int64_t cols);

}  // namespace moesim
