// .npy and .csv logits readers (format: numpy.org/neps/nep-0001-npy-format.html).
#include "workload/logits_file.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "common/error.hpp"

namespace moesim {
namespace {

constexpr int64_t kMaxExperts = 65536;

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw InputError(name + ": " + what);
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open for reading (") + std::strerror(errno) + ")");
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) fail(path, "read error");
  return os.str();
}

void check_finite(const std::vector<float>& v, int num_experts, const std::string& name) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      fail(name, "expected finite logits, got " + std::to_string(v[i]) + " at row " +
                     std::to_string(i / num_experts) + ", column " + std::to_string(i % num_experts));
    }
  }
}

// Finds `'key': value` in the .npy header dict and returns the raw value text.
std::string header_field(const std::string& header, const std::string& key, const std::string& name) {
  const std::regex re("['\"]" + key + "['\"]\\s*:\\s*('[^']*'|\"[^\"]*\"|True|False|\\([^)]*\\))");
  std::smatch m;
  if (!std::regex_search(header, m, re)) fail(name, "malformed .npy header: no '" + key + "' field");
  return m[1].str();
}

}  // namespace

LogitsMatrix parse_npy(const std::string& bytes, const std::string& name) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0)
    fail(name, "expected a .npy file (magic \\x93NUMPY), got something else");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(name, "truncated .npy header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    fail(name, "unsupported .npy version " + std::to_string(major));
  }
  if (header_start + header_len > bytes.size()) fail(name, "truncated .npy header");
  const std::string header = bytes.substr(header_start, header_len);

  std::string descr = header_field(header, "descr", name);
  descr = descr.substr(1, descr.size() - 2);
  size_t elem = 0;
  if (descr == "<f4" || descr == "=f4" || descr == "f4") elem = 4;
  else if (descr == "<f8" || descr == "=f8" || descr == "f8") elem = 8;
  else fail(name, "expected dtype float32 or float64 (little-endian), got '" + descr + "'");
  const bool fortran = header_field(header, "fortran_order", name) == "True";

  const std::string shape_text = header_field(header, "shape", name);
  std::vector<int64_t> shape;
  {
    const std::regex num("\\d+");
    for (auto it = std::sregex_iterator(shape_text.begin(), shape_text.end(), num); it != std::sregex_iterator(); ++it) {
      const std::string d = it->str();
      if (d.size() > 12) fail(name, "shape dimension too large: " + d);
      shape.push_back(std::stoll(d));
    }
  }
  if (shape.size() != 2)
    fail(name, "expected a 2-D array [tokens, experts], got shape " + shape_text);
  const int64_t rows = shape[0], cols = shape[1];
  if (cols < 1 || cols > kMaxExperts)
    fail(name, "expected 1.." + std::to_string(kMaxExperts) + " experts (columns), got " + std::to_string(cols));
  const size_t data_start = header_start + header_len;
  const uint64_t count = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  if (rows > std::numeric_limits<int64_t>::max() / cols / 8 || count * elem != bytes.size() - data_start) {
    fail(name, "truncated or oversized .npy data: shape " + shape_text + " needs " +
                   std::to_string(count * elem) + " bytes, file holds " + std::to_string(bytes.size() - data_start));
  }

  LogitsMatrix m;
  m.num_tokens = rows;
  m.num_experts = static_cast<int>(cols);
  m.values.resize(count);
  const char* data = bytes.data() + data_start;
  for (uint64_t i = 0; i < count; ++i) {
    // Fortran order stores column-major: element (r, c) at c * rows + r.
    const uint64_t r = fortran ? i % rows : i / cols;
    const uint64_t c = fortran ? i / rows : i % cols;
    double v;
    if (elem == 4) {
      float f;
      std::memcpy(&f, data + i * 4, 4);
      v = f;
    } else {
      std::memcpy(&v, data + i * 8, 8);
    }
    m.values[r * cols + c] = static_cast<float>(v);
  }
  check_finite(m.values, m.num_experts, name);
  return m;
}

LogitsMatrix parse_csv(const std::string& text, const std::string& name) {
  LogitsMatrix m;
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::vector<float> row;
    size_t pos = 0;
    while (true) {
      const size_t comma = line.find(',', pos);
      const std::string cell = line.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      const char* begin = cell.c_str();
      while (*begin == ' ' || *begin == '\t') ++begin;
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(begin, &end);
      while (end && (*end == ' ' || *end == '\t')) ++end;
      if (end == begin || *end != '\0')
        fail(name, "line " + std::to_string(line_no) + ": expected a number, got '" + cell + "'");
      if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
        fail(name, "line " + std::to_string(line_no) + ": expected a finite number, got '" + cell + "'");
      row.push_back(static_cast<float>(v));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    if (m.num_experts == 0) {
      if (static_cast<int64_t>(row.size()) > kMaxExperts) fail(name, "line 1: too many columns");
      m.num_experts = static_cast<int>(row.size());
    } else if (static_cast<int>(row.size()) != m.num_experts) {
      fail(name, "line " + std::to_string(line_no) + ": expected " + std::to_string(m.num_experts) +
                     " values (one per expert), got " + std::to_string(row.size()));
    }
    m.values.insert(m.values.end(), row.begin(), row.end());
    ++m.num_tokens;
  }
  if (m.num_tokens == 0) fail(name, "expected at least one row of logits, got an empty file");
  return m;
}

LogitsMatrix read_logits_file(const std::string& path) {
  const auto dot = path.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : path.substr(dot);
  if (ext != ".npy" && ext != ".csv") fail(path, "expected a .npy or .csv file");
  const std::string bytes = read_file_bytes(path);
  return ext == ".npy" ? parse_npy(bytes, path) : parse_csv(bytes, path);
}

std::string encode_npy_f32(const std::vector<float>& values, int64_t rows, int64_t cols) {
  MOESIM_REQUIRE(static_cast<int64_t>(values.size()) == rows * cols, "values size does not match shape");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  // Pad so that the data starts on a 64-byte boundary, ending the header with '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return out;
}

}  // namespace moesim
