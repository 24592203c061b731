// Tests src/step/request_lengths: each spec's draws (fixed, uniform within its bounds and near its mean, lognormal
// around its median, a file cycled), determinism on (seed, index), and one-line errors naming the flag or the file's
// line. Host only.
#include "src/common/request_lengths.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "src/common/error.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

TEST(RequestLengths, FixedIsTheCallersLength) {
  const RequestLengths r = parse_request_lengths("fixed", "--lengths");
  EXPECT_EQ(r.draw(2000, 7, 0), 2000);
  EXPECT_EQ(r.draw(2000, 7, 99), 2000);
  EXPECT_DOUBLE_EQ(r.mean(2000), 2000);
}

TEST(RequestLengths, UniformStaysInItsBoundsAndAveragesItsMidpoint) {
  const RequestLengths r = parse_request_lengths("uniform:6554:8192", "--lengths");
  double sum = 0;
  bool lo = false, hi = false;
  for (uint64_t i = 0; i < 20000; ++i) {
    const int64_t v = r.draw(0, 7, i);
    ASSERT_GE(v, 6554);
    ASSERT_LE(v, 8192);
    lo |= v < 6600;
    hi |= v > 8150;
    sum += static_cast<double>(v);
  }
  EXPECT_TRUE(lo && hi);
  EXPECT_NEAR(sum / 20000, 7373.0, 30.0);  // (6554 + 8192) / 2
  EXPECT_DOUBLE_EQ(r.mean(0), 7373.0);
  EXPECT_EQ(r.draw(0, 7, 5), r.draw(0, 7, 5));  // a pure function of (seed, index)
  EXPECT_NE(r.draw(0, 7, 5) + r.draw(0, 7, 6) + r.draw(0, 7, 7), r.draw(0, 8, 5) + r.draw(0, 8, 6) + r.draw(0, 8, 7));
}

TEST(RequestLengths, LognormalCentresOnItsMedian) {
  const RequestLengths r = parse_request_lengths("lognormal:1000:0.5", "--lengths");
  int below = 0;
  for (uint64_t i = 0; i < 10000; ++i) below += r.draw(0, 3, i) < 1000;
  EXPECT_NEAR(below / 10000.0, 0.5, 0.03);
  EXPECT_NEAR(r.mean(0), 1000 * std::exp(0.125), 1e-9);
}

TEST(RequestLengths, AFileIsCycled) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/l.csv", "tokens\n10\n\n20\r\n30\n");
  const RequestLengths r = parse_request_lengths("file:l.csv", "--lengths", dir);
  EXPECT_EQ(r.draw(0, 1, 0), 10);
  EXPECT_EQ(r.draw(0, 1, 2), 30);
  EXPECT_EQ(r.draw(0, 1, 4), 20);
  EXPECT_DOUBLE_EQ(r.mean(0), 20.0);
}

void expect_error(const std::string& spec, const std::string& needle) {
  try {
    parse_request_lengths(spec, "--lengths");
    ADD_FAILURE() << spec;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(needle), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(RequestLengths, BadSpecsAndFilesSayWhatWasExpected) {
  expect_error("uniform:10:5", "--lengths: expected");
  expect_error("uniform:0:5", "--lengths: expected");
  expect_error("lognormal:100:-1", "--lengths: expected");
  expect_error("zipf:1:2", "--lengths: expected");
  expect_error("file:/nonexistent/l.csv", "cannot open");
  EXPECT_THROW(parse_lengths_file("length\n10\n", "l.csv"), InputError);
  try {
    parse_lengths_file("tokens\n10\nten\n", "l.csv");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("l.csv:3: tokens: expected an integer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_lengths_file("tokens\n", "l.csv"), InputError);
}

}  // namespace
}  // namespace moesim
