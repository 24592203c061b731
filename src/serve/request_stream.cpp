// A serving run's requests (see request_stream.hpp): a synthetic Poisson stream drawn on counters, or a request file
// (the Azure LLM inference trace or moesim's CSV) parsed into requests sorted by arrival. Every bad input ends in one
// InputError line naming the origin, its line and its column. Host only.
// Covered by tests/serve/request_stream_test.cpp and the request_stream fuzz target (tests/fuzz/fuzz_targets.hpp).
#include "src/serve/request_stream.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <system_error>

#include "src/common/counter_rng.hpp"
#include "src/common/error.hpp"

namespace moesim {

namespace {

// ---- synthetic -------------------------------------------------------------------------------------------------

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void check_stream(const SyntheticStream& s) {
  if (s.requests < 1 || s.requests > kMaxStreamRequests)
    throw InputError("requests: expected 1 to " + std::to_string(kMaxStreamRequests) + ", got '" +
                     std::to_string(s.requests) + "'");
  if (!std::isfinite(s.rate_per_s) || s.rate_per_s < 0)
    throw InputError("rate: expected a finite number of requests/s >= 0, got '" + number_text(s.rate_per_s) + "'");
  // A file spec always holds a length (parse_request_lengths refuses an empty file); draw cycles through it.
  MOESIM_REQUIRE(s.prompt.kind != LengthKind::file || !s.prompt.lengths.empty(),
                 "a prompt lengths file without lengths");
  MOESIM_REQUIRE(s.output.kind != LengthKind::file || !s.output.lengths.empty(),
                 "an output lengths file without lengths");
}

// Request i's gap after request i - 1 (after time 0 for request 0): exponential with mean 1 / rate, by inversion.
// 1 - u lies in (0, 1], so the logarithm is finite.
double arrival_gap_s(uint64_t seed, uint64_t i, double rate_per_s) {
  const double u = counter_uniform(seed, kStreamRequestArrival, i);
  return -std::log1p(-u) / rate_per_s;
}

// ---- request files ---------------------------------------------------------------------------------------------

constexpr std::size_t kQuotedChars = 200;  // the most of a value an error quotes
constexpr std::size_t kMaxRequestFileBytes = std::size_t{256} << 20;
constexpr const char* kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";
constexpr const char* kMoesimHeader = "arrival_s,prompt_tokens,output_tokens";

enum class FileFormat { azure, moesim };

// The columns of a format, in file order.
struct Columns {
  const char* header;
  const char* arrival;
  const char* prompt;
  const char* output;
};

Columns columns_of(FileFormat f) {
  if (f == FileFormat::azure) return {kAzureHeader, "TIMESTAMP", "ContextTokens", "GeneratedTokens"};
  return {kMoesimHeader, "arrival_s", "prompt_tokens", "output_tokens"};
}

std::string quoted(std::string_view value) {
  std::string q = "'" + std::string(value.substr(0, kQuotedChars));
  if (value.size() > kQuotedChars) q += "...";
  return q + "'";
}

// Where a line sits, for its errors.
struct LineAt {
  const std::string& origin;
  int64_t line;
};

[[noreturn]] void cell_error(const LineAt& at, const std::string& column, const std::string& expected,
                             std::string_view value) {
  throw InputError(at.origin + ":" + std::to_string(at.line) + ": " + column + ": expected " + expected + ", got " +
                   quoted(value));
}

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_cells(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    const std::size_t length = comma == std::string_view::npos ? std::string_view::npos : comma - start;
    cells.push_back(trimmed(line.substr(start, length)));
    if (comma == std::string_view::npos) return cells;
    start = comma + 1;
  }
}

// A whole cell as an integer (no sign, no blanks inside; false on overflow).
bool parse_count(std::string_view s, int64_t& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// A whole cell as a finite number (from_chars: no locale, no exceptions).
bool parse_finite(std::string_view s, double& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(v);
}

// ---- Azure timestamps: "YYYY-MM-DD HH:MM:SS[.fraction]" ---------------------------------------------------------

// Whole seconds and the fraction apart: the whole seconds since year 1 (~6.4e10 today) would leave a double about
// 1e-5 s of resolution, less than the trace's 100 ns; subtracting the whole parts first keeps the fraction exact.
struct Timestamp {
  int64_t whole_s = 0;
  double fraction_s = 0;  // [0, 1)
};

bool operator<(const Timestamp& a, const Timestamp& b) {
  return a.whole_s != b.whole_s ? a.whole_s < b.whole_s : a.fraction_s < b.fraction_s;
}

// Exactly `n` ASCII digits of `s` from `pos`.
bool read_digits(std::string_view s, std::size_t pos, std::size_t n, int& v) {
  v = 0;
  for (std::size_t k = pos; k < pos + n; ++k) {
    if (s[k] < '0' || s[k] > '9') return false;
    v = v * 10 + (s[k] - '0');
  }
  return true;
}

bool is_leap_year(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int days_in_month(int64_t year, int month) {
  static const int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && is_leap_year(year) ? 29 : kDays[month - 1];
}

// Days from 0001-01-01 (proleptic Gregorian) to the date.
int64_t days_since_year_one(int64_t year, int month, int day) {
  const int64_t past = year - 1;
  int64_t days = 365 * past + past / 4 - past / 100 + past / 400;
  for (int m = 1; m < month; ++m) days += days_in_month(year, m);
  return days + day - 1;
}

// The fraction's digits after the point, any number of them; digits past the 15th are below a double's resolution.
bool read_fraction(std::string_view digits, double& fraction) {
  if (digits.empty()) return false;
  int64_t scaled = 0;
  double scale = 1;
  for (std::size_t k = 0; k < digits.size(); ++k) {
    if (digits[k] < '0' || digits[k] > '9') return false;
    if (k < 15) {
      scaled = scaled * 10 + (digits[k] - '0');
      scale *= 10;
    }
  }
  fraction = static_cast<double>(scaled) / scale;
  return true;
}

bool parse_timestamp(std::string_view s, Timestamp& t) {
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':') return false;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!read_digits(s, 0, 4, year) || !read_digits(s, 5, 2, month) || !read_digits(s, 8, 2, day) ||
      !read_digits(s, 11, 2, hour) || !read_digits(s, 14, 2, minute) || !read_digits(s, 17, 2, second))
    return false;
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 ||
      minute > 59 || second > 59)
    return false;
  t.fraction_s = 0;
  if (s.size() > 19 && (s[19] != '.' || !read_fraction(s.substr(20), t.fraction_s))) return false;
  t.whole_s = days_since_year_one(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
  return true;
}

// ---- rows ------------------------------------------------------------------------------------------------------

struct Row {
  Timestamp stamp;       // azure
  double arrival_s = 0;  // moesim; azure once its stamps are made relative
  int64_t prompt_tokens = 0, output_tokens = 0;
};

FileFormat header_format(std::string_view line, const std::string& origin) {
  std::string joined;
  for (std::string_view cell : split_cells(line)) joined += std::string(cell) + ",";
  if (!joined.empty()) joined.pop_back();
  if (joined == kAzureHeader) return FileFormat::azure;
  if (joined == kMoesimHeader) return FileFormat::moesim;
  throw InputError(origin + ":1: header: expected '" + kAzureHeader + "' (the Azure LLM inference trace) or '" +
                   kMoesimHeader + "', got " + quoted(line));
}

int64_t parse_length(std::string_view cell, const char* column, const char* why, const LineAt& at) {
  int64_t v = 0;
  if (!parse_count(cell, v) || v < 1 || v > kMaxRequestLength)
    cell_error(at, column, "an integer from 1 to " + std::to_string(kMaxRequestLength) + " (" + why + ")", cell);
  return v;
}

Row parse_row(std::string_view line, FileFormat format, const LineAt& at) {
  const Columns c = columns_of(format);
  const std::vector<std::string_view> cells = split_cells(line);
  if (cells.size() != 3) cell_error(at, "columns", std::string("3 cells (") + c.header + ")", line);
  Row r;
  if (format == FileFormat::azure) {
    if (!parse_timestamp(cells[0], r.stamp))
      cell_error(at, c.arrival, "a date and time YYYY-MM-DD HH:MM:SS[.fraction]", cells[0]);
  } else {
    if (!parse_finite(cells[0], r.arrival_s) || r.arrival_s < 0)
      cell_error(at, c.arrival, "a finite number of seconds >= 0", cells[0]);
    r.arrival_s += 0.0;  // "-0" reads as 0
  }
  r.prompt_tokens = parse_length(cells[1], c.prompt, "a prompt of at least one token", at);
  r.output_tokens = parse_length(cells[2], c.output, "a request decodes at least one token", at);
  return r;
}

// Azure arrivals relative to the earliest timestamp, whole seconds subtracted apart from the fractions.
void make_relative(std::vector<Row>& rows) {
  Timestamp first = rows.front().stamp;
  for (const Row& r : rows) first = std::min(first, r.stamp);
  for (Row& r : rows)
    r.arrival_s = static_cast<double>(r.stamp.whole_s - first.whole_s) + (r.stamp.fraction_s - first.fraction_s);
}

std::vector<Request> in_arrival_order(std::vector<Row>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.arrival_s < b.arrival_s; });
  std::vector<Request> out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i)
    out[i] = Request{static_cast<int64_t>(i), rows[i].arrival_s, rows[i].prompt_tokens, rows[i].output_tokens};
  return out;
}

// The next line of `text` from `pos` (advanced past its newline), without a trailing '\r'.
std::string_view next_line(std::string_view text, std::size_t& pos) {
  const std::size_t end = std::min(text.find('\n', pos), text.size());
  std::string_view line = text.substr(pos, end - pos);
  pos = end + 1;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

std::vector<Request> synthetic_requests(const SyntheticStream& s) {
  check_stream(s);
  const uint64_t output_seed = counter_hash(s.seed, kStreamRequestOutput, 0);
  std::vector<Request> out(static_cast<std::size_t>(s.requests));
  double t = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (s.rate_per_s > 0) t += arrival_gap_s(s.seed, i, s.rate_per_s);
    if (!std::isfinite(t))
      throw InputError("rate: expected a rate whose arrivals stay finite, got '" + number_text(s.rate_per_s) + "'");
    out[i] = Request{static_cast<int64_t>(i), t, s.prompt.draw(s.prompt_tokens, s.seed, i),
                     s.output.draw(s.output_tokens, output_seed, i)};
  }
  return out;
}

std::vector<Request> parse_request_file(const std::string& text, const std::string& origin) {
  std::string_view rest(text);
  if (rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);
  if (rest.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw InputError(origin + ": expected at least one request, got an empty file");
  std::size_t pos = 0;
  const FileFormat format = header_format(next_line(rest, pos), origin);
  std::vector<Row> rows;
  for (int64_t number = 2; pos <= rest.size(); ++number) {
    const std::string_view line = next_line(rest, pos);
    if (trimmed(line).empty()) continue;
    const LineAt at{origin, number};
    if (static_cast<int64_t>(rows.size()) >= kMaxStreamRequests)
      cell_error(at, "rows", "at most " + std::to_string(kMaxStreamRequests) + " requests", line);
    rows.push_back(parse_row(line, format, at));
  }
  if (rows.empty()) throw InputError(origin + ": expected at least one request after the header, got none");
  if (format == FileFormat::azure) make_relative(rows);
  return in_arrival_order(rows);
}

std::vector<Request> load_request_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(path + ": expected a readable request file, got a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const bool exists = std::filesystem::exists(path, ec);
    throw open_failure<InputError>(path, path + ": expected a readable request file, got " +
                                             (exists ? "one that cannot be opened" : "no such file"));
  }
  std::string text;
  char buffer[1 << 16];
  while (f.read(buffer, sizeof buffer) || f.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(f.gcount()));
    if (text.size() > kMaxRequestFileBytes)
      throw InputError(path + ": expected a request file of at most " + std::to_string(kMaxRequestFileBytes >> 20) +
                       " MiB, got a larger one");
  }
  if (f.bad()) throw InputError(path + ": expected a readable request file, got a read error");
  return parse_request_file(text, path);
}

}  // namespace moesim
