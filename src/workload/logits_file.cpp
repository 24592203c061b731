// .npy and .csv logits readers (format: numpy.org/neps/nep-0001-npy-format.html). The .npy header
// dict is read by a small strict parser (keys descr, fortran_order, shape; no regex, whose recursive
// matcher overflows the stack on long headers), its length is capped, and the data size must match
// the shape before anything is allocated. Messages are one line: control characters are escaped.
#include "src/workload/logits_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "src/common/error.hpp"

namespace moesim {
namespace {

constexpr int64_t kMaxExperts = 65536;
// Routing indexes tokens with int32 (router/routing.hpp).
constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
// NumPy writes headers of a few hundred bytes; a longer one is not a logits file.
constexpr size_t kMaxNpyHeaderBytes = size_t{1} << 20;
constexpr size_t kShownChars = 64;

// A value quoted in a message, cut to a readable length.
std::string shown(const std::string& s) {
  return s.size() <= kShownChars ? s : s.substr(0, kShownChars) + "...";
}

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw InputError(name + ": " + what);
}

std::string extension(const std::string& path) {
  const auto dot = path.rfind('.');
  const auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot);
}

// Opens `path` for binary reading and returns its size; rejects folders and unreadable files.
uint64_t open_regular(const std::string& path, std::ifstream& in) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "expected a logits file, got a folder");
  in.open(path, std::ios::binary);
  if (!in) throw open_failure<InputError>(path, path + ": cannot open for reading (" + std::strerror(errno) + ")");
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (end < 0 || !in) fail(path, "cannot read: expected a regular file");
  return static_cast<uint64_t>(end);
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in;
  const uint64_t size = open_regular(path, in);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (size > 0 && !in.read(&bytes[0], static_cast<std::streamsize>(size))) fail(path, "read error");
  return bytes;
}

void check_finite(const std::vector<float>& v, int num_experts, const std::string& name) {
  check_finite_logits(v.data(), static_cast<int64_t>(v.size()) / num_experts, num_experts, name);
}

// ---- .npy ---------------------------------------------------------------------------------------
struct NpyHeader {
  size_t data_offset = 0;
  size_t elem = 0;  // bytes per element: 4 (float32) or 8 (float64)
  bool fortran = false;
  int64_t rows = 0, cols = 0;
  std::string shape_text;
  std::string descr;           // generic mode: the dtype as written
  std::vector<int64_t> dims;   // generic mode: every dimension
  uint64_t data_bytes() const { return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * elem; }
};

// The preamble: magic, version, header length. `size` bytes are available at `bytes` (at least the
// first 12 if the file has them). Returns the header length; *start is where the header begins.
size_t npy_preamble(const char* bytes, size_t size, const std::string& name, size_t* start) {
  static const char kMagic[] = "\x93NUMPY";
  if (size < 10 || std::memcmp(bytes, kMagic, 6) != 0)
    fail(name, "expected a .npy file (magic \\x93NUMPY), got something else");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t len = 0;
  if (major == 1) {
    len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    *start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) fail(name, "truncated .npy header");
    for (int i = 0; i < 4; ++i) len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    *start = 12;
  } else {
    fail(name, "unsupported .npy version " + std::to_string(major) + " (expected 1, 2 or 3)");
  }
  if (len > kMaxNpyHeaderBytes)
    fail(name, "malformed .npy header: expected at most " + std::to_string(kMaxNpyHeaderBytes) + " bytes, got " +
                   std::to_string(len));
  return len;
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
class NpyDictParser {
 public:
  // generic: any dtype and any number of dimensions (parse_npy_array checks them); otherwise the
  // logits reader's 2-D float32/float64 contract is enforced while parsing.
  NpyDictParser(const std::string& text, const std::string& name, bool generic = false)
      : t_(text), name_(name), generic_(generic) {}

  NpyHeader parse() {
    NpyHeader h;
    std::set<std::string> seen;
    if (!eat('{')) malformed("expected a dict starting with '{'");
    while (true) {
      if (eat('}')) break;
      ws();
      if (i_ >= t_.size() || (t_[i_] != '\'' && t_[i_] != '"')) malformed("expected a quoted key");
      const std::string key = quoted();
      if (!seen.insert(key).second) malformed("key '" + shown(key) + "' appears twice");
      if (!eat(':')) malformed("expected ':' after '" + shown(key) + "'");
      ws();
      if (key == "descr") {
        read_descr(h);
      } else if (key == "fortran_order") {
        if (t_.compare(i_, 4, "True") == 0) {
          h.fortran = true;
          i_ += 4;
        } else if (t_.compare(i_, 5, "False") == 0) {
          i_ += 5;
        } else {
          malformed("fortran_order: expected True or False, got " + shown(other()));
        }
      } else if (key == "shape") {
        read_shape(h);
      } else {
        malformed("unexpected key '" + shown(key) + "' (expected descr, fortran_order, shape)");
      }
      if (eat(',')) continue;
      if (eat('}')) break;
      malformed("expected ',' or '}' after '" + shown(key) + "'");
    }
    ws();
    if (i_ != t_.size()) malformed("expected only padding after the dict");
    for (const char* k : {"descr", "fortran_order", "shape"}) {
      if (!seen.count(k)) fail(name_, std::string("malformed .npy header: no '") + k + "' field");
    }
    return h;
  }

 private:
  [[noreturn]] void malformed(const std::string& what) { fail(name_, "malformed .npy header: " + what); }

  void ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  std::string quoted() {
    const char q = t_[i_++];
    const size_t end = t_.find(q, i_);
    if (end == std::string::npos) malformed("unterminated string");
    std::string s = t_.substr(i_, end - i_);
    i_ = end + 1;
    return s;
  }
  // Any other value (a list, a number): its text up to the next ',' or '}' outside brackets and quotes.
  std::string other() {
    const size_t begin = i_;
    int depth = 0;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '\'' || c == '"') {
        quoted();
        continue;
      }
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') {
        if (depth == 0) break;
        --depth;
      }
      if (c == ',' && depth == 0) break;
      ++i_;
    }
    return t_.substr(begin, i_ - begin);
  }
  void read_descr(NpyHeader& h) {
    if (i_ >= t_.size() || (t_[i_] != '\'' && t_[i_] != '"')) {
      if (generic_) malformed("descr: expected a quoted dtype, got " + shown(other()));
      fail(name_, "expected dtype float32 or float64 (little-endian), got " + shown(other()));
    }
    const std::string d = quoted();
    h.descr = d;
    if (generic_) return;
    if (d == "<f4" || d == "=f4" || d == "f4") h.elem = 4;
    else if (d == "<f8" || d == "=f8" || d == "f8") h.elem = 8;
    else fail(name_, "expected dtype float32 or float64 (little-endian), got '" + shown(d) + "'");
  }
  void read_shape(NpyHeader& h) {
    const size_t begin = i_;
    if (!eat('(')) {
      if (generic_) malformed("shape: expected a tuple, got " + shown(other()));
      fail(name_, "expected a 2-D array [tokens, experts], got shape " + shown(other()));
    }
    std::vector<int64_t> dims;
    while (!eat(')')) {
      ws();
      const size_t d0 = i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      if (i_ == d0) {
        i_ = begin;
        fail(name_, "expected shape as a tuple of non-negative integers, got " + shown(other()));
      }
      const std::string digits = t_.substr(d0, i_ - d0);
      if (digits.size() > 12) fail(name_, "shape dimension too large: " + shown(digits));
      dims.push_back(std::stoll(digits));
      if (i_ < t_.size() && t_[i_] == 'L') ++i_;  // Python 2 long literals
      if (eat(',')) continue;
      ws();
      if (i_ >= t_.size() || t_[i_] != ')') malformed("shape: expected ',' or ')'");
    }
    h.shape_text = t_.substr(begin, i_ - begin);
    h.dims = dims;
    if (generic_) return;
    if (dims.size() != 2) fail(name_, "expected a 2-D array [tokens, experts], got shape " + shown(h.shape_text));
    h.rows = dims[0];
    h.cols = dims[1];
  }

  const std::string& t_;
  const std::string& name_;
  bool generic_ = false;
  size_t i_ = 0;
};

// Validates the shape against the limits and the bytes after the header (`available`).
void check_npy_shape(const NpyHeader& h, uint64_t available, const std::string& name) {
  if (h.cols < 1 || h.cols > kMaxExperts)
    fail(name, "expected 1.." + std::to_string(kMaxExperts) + " experts (columns), got " + std::to_string(h.cols));
  if (h.rows > kMaxTokens || h.data_bytes() != available) {
    fail(name, "truncated or oversized .npy data: shape " + h.shape_text + " needs " + std::to_string(h.data_bytes()) +
                   " bytes (at most " + std::to_string(kMaxTokens) + " tokens), file holds " +
                   std::to_string(available));
  }
}

// The header from the first bytes of a file (`prefix` holds at least data_offset bytes when the
// file has them); returns it with data_offset set.
NpyHeader parse_npy_header(const char* bytes, size_t size, const std::string& name) {
  size_t start = 0;
  const size_t len = npy_preamble(bytes, size, name, &start);
  if (start + len > size) fail(name, "truncated .npy header");
  const std::string text(bytes + start, len);
  NpyHeader h = NpyDictParser(text, name).parse();
  h.data_offset = start + len;
  return h;
}

// Elements [first, first + n) of the file's data order, converted into the row-major matrix `out`.
void convert_npy(const char* data, uint64_t first, uint64_t n, const NpyHeader& h, float* out) {
  const uint64_t rows = static_cast<uint64_t>(h.rows), cols = static_cast<uint64_t>(h.cols);
  for (uint64_t j = 0; j < n; ++j) {
    const uint64_t i = first + j;
    // Fortran order stores column-major: element (r, c) at c * rows + r.
    const uint64_t r = h.fortran ? i % rows : i / cols;
    const uint64_t c = h.fortran ? i / rows : i % cols;
    double v;
    if (h.elem == 4) {
      float f;
      std::memcpy(&f, data + j * 4, 4);
      v = f;
    } else {
      std::memcpy(&v, data + j * 8, 8);
    }
    out[r * cols + c] = static_cast<float>(v);
  }
}

LogitsMatrix read_npy_file(const std::string& path) {
  std::ifstream in;
  const uint64_t size = open_regular(path, in);
  std::string head(static_cast<size_t>(std::min<uint64_t>(size, 12)), '\0');
  in.read(&head[0], static_cast<std::streamsize>(head.size()));
  size_t start = 0;
  const size_t len = npy_preamble(head.data(), head.size(), path, &start);
  if (start + len > size) fail(path, "truncated .npy header");
  head.resize(start + len);
  in.seekg(0);
  if (!in.read(&head[0], static_cast<std::streamsize>(head.size()))) fail(path, "read error");
  const NpyHeader h = parse_npy_header(head.data(), head.size(), path);
  check_npy_shape(h, size - h.data_offset, path);

  LogitsMatrix m;
  m.num_tokens = h.rows;
  m.num_experts = static_cast<int>(h.cols);
  const uint64_t count = static_cast<uint64_t>(h.rows) * static_cast<uint64_t>(h.cols);
  m.values.resize(count);
  if (h.elem == 4 && !h.fortran) {
    if (count > 0 && !in.read(reinterpret_cast<char*>(m.values.data()), static_cast<std::streamsize>(count * 4)))
      fail(path, "read error");
  } else {
    constexpr uint64_t kChunk = uint64_t{1} << 17;  // elements per read
    std::vector<char> buf(kChunk * h.elem);
    for (uint64_t first = 0; first < count; first += kChunk) {
      const uint64_t n = std::min(kChunk, count - first);
      if (!in.read(buf.data(), static_cast<std::streamsize>(n * h.elem))) fail(path, "read error");
      convert_npy(buf.data(), first, n, h, m.values.data());
    }
  }
  check_finite(m.values, m.num_experts, path);
  return m;
}

}  // namespace

LogitsMatrix parse_npy(const std::string& bytes, const std::string& name) {
  const NpyHeader h = parse_npy_header(bytes.data(), bytes.size(), name);
  check_npy_shape(h, bytes.size() - h.data_offset, name);
  LogitsMatrix m;
  m.num_tokens = h.rows;
  m.num_experts = static_cast<int>(h.cols);
  const uint64_t count = static_cast<uint64_t>(h.rows) * static_cast<uint64_t>(h.cols);
  m.values.resize(count);
  convert_npy(bytes.data() + h.data_offset, 0, count, h, m.values.data());
  check_finite(m.values, m.num_experts, name);
  return m;
}

NpyArray parse_npy_array(const std::string& bytes, const std::string& name) {
  size_t start = 0;
  const size_t len = npy_preamble(bytes.data(), bytes.size(), name, &start);
  if (start + len > bytes.size()) fail(name, "truncated .npy header");
  const std::string text(bytes.data() + start, len);
  const NpyHeader h = NpyDictParser(text, name, /*generic=*/true).parse();
  const uint64_t available = bytes.size() - (start + len);
  const char* data = bytes.data() + start + len;
  // The dtype: byte order, kind, size ("<i4", "|u1", "<U21").
  std::string d = h.descr;
  const char order = d.empty() ? '?' : d[0];
  if (order == '<' || order == '|' || order == '=') d = d.substr(1);
  else if (order == '>') fail(name, "expected a little-endian dtype, got '" + shown(h.descr) + "'");
  const char kind = d.empty() ? '?' : d[0];
  const std::string width = d.size() > 1 ? d.substr(1) : "";
  if (width.empty() || width.size() > 6 || width.find_first_not_of("0123456789") != std::string::npos ||
      (kind != 'i' && kind != 'u' && kind != 'U' && kind != 'S'))
    fail(name, "expected an integer or string dtype (i1..i8, u1..u8, U<n>, S<n>), got '" + shown(h.descr) + "'");
  const uint64_t w = std::stoull(width);
  uint64_t elem = w;
  if (kind == 'U') elem = 4 * w;
  if ((kind == 'i' || kind == 'u') && w != 1 && w != 2 && w != 4 && w != 8)
    fail(name, "expected an integer dtype of 1, 2, 4 or 8 bytes, got '" + shown(h.descr) + "'");
  if (kind == 'U' || kind == 'S') {
    if (!h.dims.empty()) fail(name, "expected a string scalar (shape ()), got shape " + shown(h.shape_text));
    if (elem != available)
      fail(name, "truncated or oversized .npy data: dtype '" + shown(h.descr) + "' needs " + std::to_string(elem) +
                     " bytes, the member holds " + std::to_string(available));
    NpyArray a;
    a.is_text = true;
    for (uint64_t i = 0; i < w; ++i) {
      uint32_t c = 0;
      if (kind == 'U') std::memcpy(&c, data + 4 * i, 4);
      else c = static_cast<unsigned char>(data[i]);
      if (c == 0) break;  // NumPy pads short strings with NULs
      a.text.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
    }
    return a;
  }
  // Count the elements without overflow: each dimension is below 2^40 and the product may not pass the bytes
  // present (a dimension of 0 makes an empty array).
  uint64_t count = 1;
  for (int64_t dim : h.dims) {
    if (dim > (int64_t{1} << 40)) fail(name, "shape dimension too large in " + shown(h.shape_text));
    if (dim == 0) count = 0;
    else if (count != 0 && count > available / static_cast<uint64_t>(dim)) count = available + 1;
    else count *= static_cast<uint64_t>(dim);
  }
  if (count > available / elem || count * elem != available)
    fail(name, "truncated or oversized .npy data: shape " + shown(h.shape_text) + " of '" + shown(h.descr) +
                   "' does not match the " + std::to_string(available) + " bytes present");
  NpyArray a;
  a.shape = h.dims;
  a.ints.resize(count);
  for (uint64_t j = 0; j < count; ++j) {
    const char* p = data + j * elem;
    int64_t v = 0;
    if (kind == 'i') {
      if (w == 1) { int8_t x; std::memcpy(&x, p, 1); v = x; }
      else if (w == 2) { int16_t x; std::memcpy(&x, p, 2); v = x; }
      else if (w == 4) { int32_t x; std::memcpy(&x, p, 4); v = x; }
      else { std::memcpy(&v, p, 8); }
    } else {
      uint64_t x = 0;
      std::memcpy(&x, p, w);  // little-endian host
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(name, "expected values below 2^63, got " + std::to_string(x) + " at element " + std::to_string(j));
      v = static_cast<int64_t>(x);
    }
    // Fortran order stores the first index fastest: map the file's j to the C-order position.
    uint64_t c_index = j;
    if (h.fortran && h.dims.size() > 1) {
      uint64_t rest = j, stride = 1;
      c_index = 0;
      std::vector<uint64_t> idx(h.dims.size());
      for (size_t k = 0; k < h.dims.size(); ++k) {
        idx[k] = rest % static_cast<uint64_t>(h.dims[k]);
        rest /= static_cast<uint64_t>(h.dims[k]);
      }
      for (size_t k = h.dims.size(); k-- > 0;) {
        c_index += idx[k] * stride;
        stride *= static_cast<uint64_t>(h.dims[k]);
      }
    }
    a.ints[c_index] = v;
  }
  return a;
}

LogitsMatrix parse_csv(const std::string& text, const std::string& name) {
  LogitsMatrix m;
  int64_t line_no = 0;
  std::string cell;
  size_t line_begin = 0;
  while (line_begin < text.size()) {
    size_t line_end = text.find('\n', line_begin);
    if (line_end == std::string::npos) line_end = text.size();
    const size_t next = line_end + 1;
    ++line_no;
    if (line_end > line_begin && text[line_end - 1] == '\r') --line_end;
    const size_t first = text.find_first_not_of(" \t", line_begin);
    if (first == std::string::npos || first >= line_end) {
      line_begin = next;
      continue;
    }
    int64_t columns = 0;
    size_t pos = line_begin;
    while (true) {
      size_t comma = text.find(',', pos);
      if (comma == std::string::npos || comma > line_end) comma = line_end;
      cell.assign(text, pos, comma - pos);
      const char* begin = cell.c_str();
      const char* const stop = cell.c_str() + cell.size();
      while (*begin == ' ' || *begin == '\t') ++begin;
      char* end = nullptr;
      const double v = std::strtod(begin, &end);
      while (end < stop && (*end == ' ' || *end == '\t')) ++end;
      // `end != stop` also catches a NUL byte inside the cell.
      if (end == begin || end != stop)
        fail(name, "line " + std::to_string(line_no) + ": expected a number, got '" + shown(cell) + "'");
      if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max())
        fail(name, "line " + std::to_string(line_no) + ": expected a finite number, got '" + shown(cell) + "'");
      ++columns;
      if (m.num_experts == 0 && columns > kMaxExperts)
        fail(name, "line " + std::to_string(line_no) + ": expected at most " + std::to_string(kMaxExperts) +
                       " values (one per expert), got more");
      if (m.num_experts != 0 && columns > m.num_experts) break;
      m.values.push_back(static_cast<float>(v));
      if (comma == line_end) break;
      pos = comma + 1;
    }
    if (m.num_experts == 0) {
      m.num_experts = static_cast<int>(columns);
      // Reserve the whole matrix once (no growth by doubling): at most one row per remaining line, and
      // at most one value per two bytes (a digit and a separator).
      const size_t lines = static_cast<size_t>(std::count(text.begin() + static_cast<std::ptrdiff_t>(line_end),
                                                          text.end(), '\n')) + 1;
      m.values.reserve(std::min(lines * static_cast<size_t>(m.num_experts), text.size() / 2 + m.values.size()));
    } else if (columns != m.num_experts) {
      fail(name, "line " + std::to_string(line_no) + ": expected " + std::to_string(m.num_experts) +
                     " values (one per expert), got " + (columns > m.num_experts ? "more" : std::to_string(columns)));
    }
    ++m.num_tokens;
    if (m.num_tokens > kMaxTokens)
      fail(name, "expected at most " + std::to_string(kMaxTokens) + " rows (tokens), got more");
    line_begin = next;
  }
  if (m.num_tokens == 0) fail(name, "expected at least one row of logits, got an empty file");
  return m;
}

LogitsFileInfo inspect_logits_file(const std::string& path) {
  const std::string ext = extension(path);
  if (ext != ".npy" && ext != ".csv") fail(path, "expected a .npy or .csv file");
  LogitsFileInfo info;
  std::ifstream in;
  info.file_bytes = open_regular(path, in);
  info.is_npy = ext == ".npy";
  if (!info.is_npy) return info;
  std::string head(static_cast<size_t>(std::min<uint64_t>(info.file_bytes, 12)), '\0');
  in.read(&head[0], static_cast<std::streamsize>(head.size()));
  size_t start = 0;
  const size_t len = npy_preamble(head.data(), head.size(), path, &start);
  if (start + len > info.file_bytes) fail(path, "truncated .npy header");
  head.resize(start + len);
  in.seekg(0);
  if (!in.read(&head[0], static_cast<std::streamsize>(head.size()))) fail(path, "read error");
  const NpyHeader h = parse_npy_header(head.data(), head.size(), path);
  check_npy_shape(h, info.file_bytes - h.data_offset, path);
  info.num_tokens = h.rows;
  info.num_experts = static_cast<int>(h.cols);
  return info;
}

LogitsMatrix read_logits_file(const std::string& path) {
  const std::string ext = extension(path);
  if (ext != ".npy" && ext != ".csv") fail(path, "expected a .npy or .csv file");
  if (ext == ".npy") return read_npy_file(path);
  return parse_csv(read_file_bytes(path), path);
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

void check_finite_logits(const float* logits, int64_t num_tokens, int num_experts, const std::string& name) {
  const int64_t n = num_tokens * num_experts;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(logits[i])) {
      throw InputError(name + ": expected finite logits, got " + std::to_string(logits[i]) + " at row " +
                       std::to_string(i / num_experts) + ", column " + std::to_string(i % num_experts));
    }
  }
}

}  // namespace moesim
