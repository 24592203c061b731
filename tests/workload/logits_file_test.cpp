// Tests of the .npy and .csv logits readers: round trips, Fortran order, float64, and every malformed
// input raising InputError with the file name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "src/common/error.hpp"
#include "src/workload/logits_file.hpp"

namespace moesim {
namespace {

std::string npy_with_header(const std::string& dict, const std::string& data) {
  std::string header = dict;
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

TEST(LogitsFile, NpyRoundTrip) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const LogitsMatrix m = parse_npy(encode_npy_f32(v, 2, 3), "x.npy");
  EXPECT_EQ(m.num_tokens, 2);
  EXPECT_EQ(m.num_experts, 3);
  EXPECT_EQ(m.values, v);
}

TEST(LogitsFile, NpyFloat64AndFortranOrder) {
  // Column-major [[1, 2, 3], [4, 5, 6]] is stored as 1 4 2 5 3 6.
  const std::vector<double> col_major = {1, 4, 2, 5, 3, 6};
  const LogitsMatrix m = parse_npy(
      npy_with_header("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", raw(col_major)), "x.npy");
  EXPECT_EQ(m.values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(LogitsFile, NpyZeroRows) {
  const LogitsMatrix m = parse_npy(encode_npy_f32({}, 0, 4), "x.npy");
  EXPECT_EQ(m.num_tokens, 0);
  EXPECT_EQ(m.num_experts, 4);
}

TEST(LogitsFile, MalformedNpyIsInputError) {
  const std::vector<float> four = {1, 2, 3, 4};
  const std::string good = encode_npy_f32(four, 2, 2);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "magic"},
      {"garbage that is not numpy", "magic"},
      {good.substr(0, good.size() - 3), "truncated"},
      {good.substr(0, 20), "truncated"},
      {npy_with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", raw(four)), "dtype"},
      {npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", raw(four)), "dtype"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", raw(four)), "2-D"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 2), }", raw(four)), "2-D"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0), }", ""), "experts"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, }", raw(four)), "shape"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 2), }", raw(four)), "truncated"},
  };
  for (const auto& [bytes, expected] : cases) {
    try {
      parse_npy(bytes, "bad.npy");
      ADD_FAILURE() << "no error for a case expecting '" << expected << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.npy"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST(LogitsFile, NonFiniteValuesAreRejected) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {std::nanf(""), inf, -inf}) {
    const std::vector<float> v = {0, 1, bad, 3};
    EXPECT_THROW(parse_npy(encode_npy_f32(v, 2, 2), "x.npy"), InputError);
  }
  EXPECT_THROW(parse_csv("1,2\nnan,3\n", "x.csv"), InputError);
  EXPECT_THROW(parse_csv("1,inf\n", "x.csv"), InputError);
  EXPECT_THROW(parse_csv("1,1e300\n", "x.csv"), InputError);
}

TEST(LogitsFile, Csv) {
  const LogitsMatrix m = parse_csv("0.5, -1,2\r\n\n3,4e-1,5\n", "x.csv");
  EXPECT_EQ(m.num_tokens, 2);
  EXPECT_EQ(m.num_experts, 3);
  EXPECT_EQ(m.values, (std::vector<float>{0.5f, -1, 2, 3, 0.4f, 5}));
  EXPECT_THROW(parse_csv("", "x.csv"), InputError);
  EXPECT_THROW(parse_csv("1,2\n3\n", "x.csv"), InputError);
  EXPECT_THROW(parse_csv("1,abc\n", "x.csv"), InputError);
  EXPECT_THROW(parse_csv("1,,2\n", "x.csv"), InputError);
  EXPECT_THROW(read_logits_file("/nonexistent/x.npy"), InputError);
  EXPECT_THROW(read_logits_file("x.txt"), InputError);
}

}  // namespace
}  // namespace moesim
