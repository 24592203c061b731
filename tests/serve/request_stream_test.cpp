// Tests src/serve/request_stream: the Azure trace's timestamps made relative by hand (out of order, fractions,
// midnight, month and year ends, a leap day), moesim's CSV, one-line errors naming the line and column, and the
// synthetic stream (rate 0, fixed lengths, the mean gap, determinism on (seed, index), prompts independent of
// outputs). Host only.
#include "src/serve/request_stream.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

const std::string kAzure = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
const std::string kMoesim = "arrival_s,prompt_tokens,output_tokens\n";

void expect_request(const Request& r, int64_t id, double arrival_s, int64_t prompt, int64_t output) {
  EXPECT_EQ(r.id, id);
  EXPECT_DOUBLE_EQ(r.arrival_s, arrival_s) << "request " << id;
  EXPECT_EQ(r.prompt_tokens, prompt) << "request " << id;
  EXPECT_EQ(r.output_tokens, output) << "request " << id;
}

// Runs `body`, which must throw an InputError of one line holding every needle.
void expect_input_error(const std::function<void()>& body, const std::vector<std::string>& needles) {
  try {
    body();
    ADD_FAILURE() << "no error; expected " << needles.front();
  } catch (const InputError& e) {
    const std::string m = e.what();
    for (const std::string& n : needles) EXPECT_NE(m.find(n), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.find('\r'), std::string::npos) << m;
  }
}

void expect_file_error(const std::string& text, const std::vector<std::string>& needles) {
  expect_input_error([&] { parse_request_file(text, "f.csv"); }, needles);
}

// The earliest row is the second; the last crosses midnight into 17 November. From 23:59:58.0:
// 23:59:59.5 is 1.5 s, and 00:00:01.25 the next day is 2 s to midnight + 1.25 s = 3.25 s.
TEST(RequestStream, AzureTraceArrivalsAreRelativeToTheEarliestRow) {
  const std::vector<Request> r = parse_request_file(kAzure +
                                                        "2023-11-16 23:59:59.5000000,374,44\n"
                                                        "2023-11-16 23:59:58,100,10\n"
                                                        "2023-11-17 00:00:01.25,2000,7\n",
                                                    "azure.csv");
  ASSERT_EQ(r.size(), 3u);
  expect_request(r[0], 0, 0.0, 100, 10);
  expect_request(r[1], 1, 1.5, 374, 44);
  expect_request(r[2], 2, 3.25, 2000, 7);
}

// Each pair is one second apart across a month, a leap day and a year; the trace's 7-digit fractions are kept to
// 100 ns (the whole seconds are subtracted before the fractions are added).
TEST(RequestStream, AzureCalendarBoundariesAndFractions) {
  const std::vector<Request> r = parse_request_file(kAzure +
                                                        "2024-02-28 23:59:59,1,1\n"
                                                        "2024-02-29 00:00:00,2,1\n"
                                                        "2024-03-01 00:00:00.0000001,3,1\n"
                                                        "2024-12-31 23:59:59.9999999,4,1\n"
                                                        "2025-01-01 00:00:00,5,1\n",
                                                    "azure.csv");
  ASSERT_EQ(r.size(), 5u);
  const double day = 86400;
  // 2024-12-31 is day 366 of 2024 and the leap day day 60: 306 days apart; the leap day starts 1 s in.
  const double dec31 = 1 + 306 * day;
  EXPECT_DOUBLE_EQ(r[1].arrival_s, 1.0);
  EXPECT_NEAR(r[2].arrival_s, 1 + day + 1e-7, 1e-9);
  EXPECT_NEAR(r[3].arrival_s, dec31 + 23 * 3600 + 59 * 60 + 59.9999999, 1e-6);
  EXPECT_DOUBLE_EQ(r[4].arrival_s, dec31 + day);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(r[static_cast<size_t>(i)].prompt_tokens, i + 1);
}

// Blank lines, blanks around cells, CRLF line ends and a byte order mark are tolerated; equal arrivals keep their
// file order (stable), and ids follow arrival order.
TEST(RequestStream, MoesimFormatSortsStablyByArrival) {
  const std::vector<Request> r = parse_request_file("\xEF\xBB\xBF" + kMoesim +
                                                        "0.5,10,2\r\n"
                                                        "\n"
                                                        " 0 , 7 , 1 \r\n"
                                                        "0.5,3,4\n"
                                                        "1e-3,4194304,9",
                                                    "m.csv");
  ASSERT_EQ(r.size(), 4u);
  expect_request(r[0], 0, 0.0, 7, 1);
  expect_request(r[1], 1, 0.001, 4194304, 9);
  expect_request(r[2], 2, 0.5, 10, 2);
  expect_request(r[3], 3, 0.5, 3, 4);
}

TEST(RequestStream, HeaderErrorsNameBothFormats) {
  expect_file_error("time,a,b\n0,1,1\n", {"f.csv:1: header: expected 'TIMESTAMP,ContextTokens,GeneratedTokens' "
                                          "(the Azure LLM inference trace) or 'arrival_s,prompt_tokens,output_tokens', "
                                          "got 'time,a,b'"});
  expect_file_error(std::string(300, 'x') + "\n", {"f.csv:1: header:", "got '" + std::string(200, 'x') + "...'"});
  expect_file_error("", {"f.csv: expected at least one request, got an empty file"});
  expect_file_error(" \r\n\n", {"f.csv: expected at least one request"});
  expect_file_error(kAzure, {"f.csv: expected at least one request after the header"});
  expect_file_error(kMoesim + "\n\n", {"f.csv: expected at least one request after the header"});
}

TEST(RequestStream, AzureRowErrorsNameTheLineAndColumn) {
  const std::string ok = "2023-11-16 18:15:46.6805900,374,44\n";
  const std::string date = "TIMESTAMP: expected a date and time YYYY-MM-DD HH:MM:SS[.fraction], got ";
  for (const std::string bad : {"2023-02-29 00:00:00", "2023-13-01 00:00:00", "2023-04-31 00:00:00",
                                "2023-01-00 00:00:00", "2023-01-01 24:00:00", "2023-01-01 00:60:00",
                                "2023-01-01 00:00:60", "2023-01-01 00:00:00.", "2023-01-01 00:00:00.5x",
                                "2023-01-01T00:00:00", "2023-1-01 00:00:00", "0000-01-01 00:00:00", ""})
    expect_file_error(kAzure + ok + bad + ",1,1\n", {"f.csv:3: " + date + "'" + bad + "'"});
  expect_file_error(kAzure + ok + "2023-11-16 18:15:46,0,44\n",
                    {"f.csv:3: ContextTokens: expected an integer from 1 to 4194304 (a prompt of at least one token), "
                     "got '0'"});
  expect_file_error(kAzure + "\n" + ok + "2023-11-16 18:15:46,3,0\n",
                    {"f.csv:4: GeneratedTokens: expected an integer from 1 to 4194304 (a request decodes at least "
                     "one token), got '0'"});
  expect_file_error(kAzure + "2023-11-16 18:15:46,3,4,5\n",
                    {"f.csv:2: columns: expected 3 cells (TIMESTAMP,ContextTokens,GeneratedTokens), got "
                     "'2023-11-16 18:15:46,3,4,5'"});
  expect_file_error(kAzure + "2023-11-16 18:15:46,3\n", {"f.csv:2: columns: expected 3 cells"});
}

TEST(RequestStream, MoesimRowErrorsNameTheLineAndColumn) {
  const std::string arrival = "arrival_s: expected a finite number of seconds >= 0, got ";
  for (const std::string bad : {"-1", "nan", "inf", "-inf", "1e400", "abc", "0x10", "+1", "1 2", ""})
    expect_file_error(kMoesim + bad + ",1,1\n", {"f.csv:2: " + arrival + "'" + bad + "'"});
  for (const std::string bad : {"0", "-5", "4194305", "99999999999999999999999", "1.5", "7a"})
    expect_file_error(kMoesim + "0," + bad + ",1\n",
                      {"f.csv:2: prompt_tokens: expected an integer from 1 to", "'" + bad + "'"});
  expect_file_error(kMoesim + "0,1,0\n", {"f.csv:2: output_tokens:", "(a request decodes at least one token)"});
  expect_file_error(kMoesim + "0,1,1\n0,5\r,3\n", {"f.csv:3: prompt_tokens:", "got '5\\x0d'"});
  expect_file_error(kMoesim + "0,1,1,\n",
                    {"f.csv:2: columns: expected 3 cells (arrival_s,prompt_tokens,output_tokens)"});
}

TEST(RequestStream, AtMostTheMostRequestsAFileHolds) {
  std::string text = kMoesim;
  for (int64_t i = 0; i < kMaxStreamRequests; ++i) text += "0,1,1\n";
  EXPECT_EQ(parse_request_file(text, "f.csv").size(), static_cast<size_t>(kMaxStreamRequests));
  text += "0,1,1\n";
  const std::string line = std::to_string(kMaxStreamRequests + 2);  // after the header and 2^20 rows
  expect_file_error(text, {"f.csv:" + line + ": rows: expected at most 1048576 requests"});
}

TEST(RequestStream, LoadsAFileAndNamesAPathItCannotRead) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/r.csv", kMoesim + "2,5,6\n1,3,4\n");
  const std::vector<Request> r = load_request_file(dir + "/r.csv");
  ASSERT_EQ(r.size(), 2u);
  expect_request(r[0], 0, 1.0, 3, 4);
  expect_request(r[1], 1, 2.0, 5, 6);
  expect_input_error([&] { load_request_file(dir + "/none.csv"); },
                     {dir + "/none.csv: expected a readable request file, got no such file"});
  expect_input_error([&] { load_request_file(dir); }, {dir + ": expected a readable request file, got a directory"});
  testing::write_text(dir + "/bad.csv", kMoesim + "0,1,0\n");
  expect_input_error([&] { load_request_file(dir + "/bad.csv"); }, {dir + "/bad.csv:2: output_tokens:"});
}

SyntheticStream stream(int64_t requests, double rate_per_s, uint64_t seed) {
  SyntheticStream s;
  s.requests = requests;
  s.rate_per_s = rate_per_s;
  s.seed = seed;
  return s;
}

TEST(RequestStream, RateZeroPutsEveryRequestAtTimeZeroWithFixedLengths) {
  SyntheticStream s = stream(50, 0, 3);
  s.prompt_tokens = 1000;
  s.output_tokens = 200;
  const std::vector<Request> r = synthetic_requests(s);
  ASSERT_EQ(r.size(), 50u);
  for (size_t i = 0; i < r.size(); ++i) expect_request(r[i], static_cast<int64_t>(i), 0.0, 1000, 200);
}

// The mean of 20000 exponential gaps has a relative standard deviation of 1 / sqrt(20000) = 0.7 %; 3 % is over 4
// of them. Request 0 arrives after its own gap, so the last arrival over the count is the mean gap.
TEST(RequestStream, PoissonGapsAverageOneOverTheRate) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    const std::vector<Request> r = synthetic_requests(stream(20000, 4.0, seed));
    EXPECT_GT(r[0].arrival_s, 0.0) << "seed " << seed;
    for (size_t i = 1; i < r.size(); ++i) ASSERT_GE(r[i].arrival_s, r[i - 1].arrival_s) << "seed " << seed;
    EXPECT_NEAR(r.back().arrival_s / 20000, 0.25, 0.03 * 0.25) << "seed " << seed;
  }
}

TEST(RequestStream, DrawsDependOnlyOnSeedAndIndex) {
  SyntheticStream s = stream(100, 10.0, 42);
  s.prompt = parse_request_lengths("lognormal:500:1", "--prompt");
  s.output = parse_request_lengths("uniform:1:300", "--output");
  const std::vector<Request> a = synthetic_requests(s), b = synthetic_requests(s);
  s.requests = 10;
  const std::vector<Request> prefix = synthetic_requests(s);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);  // bit for bit: the same draws
    EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    EXPECT_EQ(a[i].output_tokens, b[i].output_tokens);
  }
  for (size_t i = 0; i < prefix.size(); ++i) {
    EXPECT_EQ(prefix[i].arrival_s, a[i].arrival_s);
    EXPECT_EQ(prefix[i].output_tokens, a[i].output_tokens);
  }
  s.requests = 100;
  s.seed = 43;
  const std::vector<Request> other = synthetic_requests(s);
  int same_arrival = 0, same_prompt = 0, same_output = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same_arrival += other[i].arrival_s == a[i].arrival_s;
    same_prompt += other[i].prompt_tokens == a[i].prompt_tokens;
    same_output += other[i].output_tokens == a[i].output_tokens;
  }
  EXPECT_EQ(same_arrival, 0);
  EXPECT_LT(same_prompt, 20);
  EXPECT_LT(same_output, 20);
}

// With the same spec on both sides, prompts and outputs drawn on one stream would be equal; drawn on separate
// streams their sample correlation over 5000 requests has a standard deviation of 1 / sqrt(5000) = 0.014.
TEST(RequestStream, PromptsAndOutputsAreIndependent) {
  SyntheticStream s = stream(5000, 1.0, 9);
  s.prompt = s.output = parse_request_lengths("uniform:1:1000", "--lengths");
  const std::vector<Request> r = synthetic_requests(s);
  double sp = 0, so = 0, spp = 0, soo = 0, spo = 0;
  for (const Request& q : r) {
    const double p = static_cast<double>(q.prompt_tokens), o = static_cast<double>(q.output_tokens);
    sp += p;
    so += o;
    spp += p * p;
    soo += o * o;
    spo += p * o;
  }
  const double n = static_cast<double>(r.size());
  const double cov = spo / n - (sp / n) * (so / n);
  const double corr = cov / std::sqrt((spp / n - (sp / n) * (sp / n)) * (soo / n - (so / n) * (so / n)));
  EXPECT_LT(std::fabs(corr), 0.05);
}

TEST(RequestStream, SyntheticErrorsNameTheSetting) {
  expect_input_error([] { synthetic_requests(stream(0, 1, 0)); }, {"requests: expected 1 to 1048576, got '0'"});
  expect_input_error([] { synthetic_requests(stream(kMaxStreamRequests + 1, 1, 0)); },
                     {"requests: expected 1 to 1048576, got '1048577'"});
  for (const double bad : {-1.0, std::nan(""), double{INFINITY}})
    expect_input_error([&] { synthetic_requests(stream(5, bad, 0)); },
                       {"rate: expected a finite number of requests/s >= 0"});
  // A rate so small that the first gap overflows a double.
  expect_input_error([] { synthetic_requests(stream(5, 5e-324, 0)); },
                     {"rate: expected a rate whose arrivals stay finite"});
}

}  // namespace
}  // namespace moesim
