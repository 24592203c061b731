// Request lengths (see request_lengths.hpp).
#include "src/common/request_lengths.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/common/counter_rng.hpp"
#include "src/common/error.hpp"

namespace moesim {

namespace {

bool parse_int(const std::string& s, int64_t& v) {
  std::size_t used = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size() && !s.empty();
}

bool parse_real(const std::string& s, double& v) {
  std::size_t used = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == s.size() && !s.empty() && std::isfinite(v);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

}  // namespace

int64_t RequestLengths::draw(int64_t fixed, uint64_t seed, uint64_t i) const {
  int64_t v = fixed;
  switch (kind) {
    case LengthKind::fixed: break;
    case LengthKind::uniform: {
      const double u = counter_uniform(seed, kStreamRequestLength, i);
      v = lo + std::min<int64_t>(hi - lo, static_cast<int64_t>(u * static_cast<double>(hi - lo + 1)));
      break;
    }
    case LengthKind::lognormal: {
      const double x = std::exp(std::log(median) + sigma * counter_normal(seed, kStreamRequestLength, i));
      v = static_cast<int64_t>(std::llround(std::min(x, static_cast<double>(kMaxRequestLength))));
      break;
    }
    case LengthKind::file: v = lengths[static_cast<std::size_t>(i % lengths.size())]; break;
  }
  return std::clamp<int64_t>(v, 1, kMaxRequestLength);
}

double RequestLengths::mean(int64_t fixed) const {
  switch (kind) {
    case LengthKind::fixed: return static_cast<double>(fixed);
    case LengthKind::uniform: return 0.5 * static_cast<double>(lo + hi);
    case LengthKind::lognormal: return median * std::exp(0.5 * sigma * sigma);
    case LengthKind::file: {
      double sum = 0;
      for (int64_t l : lengths) sum += static_cast<double>(l);
      return sum / static_cast<double>(lengths.size());
    }
  }
  return static_cast<double>(fixed);
}

std::vector<int64_t> parse_lengths_file(const std::string& text, const std::string& origin) {
  std::vector<int64_t> out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (number == 1) {
      if (line != "tokens")
        throw InputError(origin + ":1: header: expected 'tokens', got '" + line.substr(0, 80) + "'");
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    int64_t v = 0;
    if (!parse_int(line, v) || v < 1 || v > kMaxRequestLength)
      throw InputError(origin + ":" + std::to_string(number) + ": tokens: expected an integer from 1 to " +
                       std::to_string(kMaxRequestLength) + ", got '" + line.substr(0, 80) + "'");
    if (static_cast<int>(out.size()) >= kMaxLengthsFileRequests)
      throw InputError(origin + ":" + std::to_string(number) + ": tokens: expected at most " +
                       std::to_string(kMaxLengthsFileRequests) + " requests, got more");
    out.push_back(v);
  }
  if (number == 0) throw InputError(origin + ":1: header: expected 'tokens', got an empty file");
  if (out.empty()) throw InputError(origin + ": expected at least one request after the header, got none");
  return out;
}

RequestLengths parse_request_lengths(const std::string& spec, const std::string& what, const std::string& base_dir) {
  RequestLengths r;
  r.spec = spec.empty() ? "fixed" : spec;
  const auto fail = [&]() {
    throw InputError(what + ": expected fixed, uniform:LO:HI (1 <= LO <= HI <= " + std::to_string(kMaxRequestLength) +
                     "), lognormal:MEDIAN:SIGMA (MEDIAN >= 1, SIGMA in [0, 4]) or file:PATH, got '" + spec + "'");
  };
  if (spec.empty() || spec == "fixed") return r;
  if (spec.rfind("file:", 0) == 0) {
    std::string path = spec.substr(5);
    if (path.empty()) fail();
    if (!base_dir.empty() && !std::filesystem::path(path).is_absolute())
      path = (std::filesystem::path(base_dir) / path).string();
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(st)) throw InputError(what + ": " + path + ": cannot open the lengths file");
    if (!std::filesystem::is_regular_file(st))
      throw InputError(what + ": " + path + ": expected a regular file of lengths, got another kind of file");
    const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
    if (ec || bytes > kMaxLengthsFileBytes)
      throw InputError(what + ": " + path + ": expected a lengths file of at most " +
                       std::to_string(kMaxLengthsFileBytes >> 20) + " MiB");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw InputError(what + ": " + path + ": cannot open the lengths file");
    std::ostringstream text;
    text << f.rdbuf();
    r.kind = LengthKind::file;
    r.lengths = parse_lengths_file(text.str(), path);
    return r;
  }
  const std::vector<std::string> p = split(spec, ':');
  if (p.size() != 3) fail();
  if (p[0] == "uniform") {
    if (!parse_int(p[1], r.lo) || !parse_int(p[2], r.hi) || r.lo < 1 || r.hi < r.lo || r.hi > kMaxRequestLength) fail();
    r.kind = LengthKind::uniform;
    return r;
  }
  if (p[0] == "lognormal") {
    if (!parse_real(p[1], r.median) || !parse_real(p[2], r.sigma) || r.median < 1 ||
        r.median > static_cast<double>(kMaxRequestLength) || r.sigma < 0 || r.sigma > 4)
      fail();
    r.kind = LengthKind::lognormal;
    return r;
  }
  fail();
  return r;
}

}  // namespace moesim
