// RecordSpool and write_run_json (see record_spool.hpp). Host only.
#include "src/report/record_spool.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "src/common/error.hpp"
#include "src/report/report.hpp"

namespace moesim {
namespace {

// Collects output into pieces of about a megabyte before handing them on.
class Chunked {
 public:
  explicit Chunked(const std::function<void(const std::string&)>& out) : out_(out) {}
  void put(const char* p, size_t n) {
    buf_.append(p, n);
    if (buf_.size() >= (1u << 20)) flush();
  }
  void put(const std::string& s) { put(s.data(), s.size()); }
  void flush() {
    if (!buf_.empty()) out_(buf_);
    buf_.clear();
  }

 private:
  const std::function<void(const std::string&)>& out_;
  std::string buf_;
};

std::string placeholder(size_t variant) { return "@moesim-spooled-records-" + std::to_string(variant) + "@"; }

}  // namespace

RecordSpool::RecordSpool() {
  // In TMPDIR (std::tmpfile would ignore it), unlinked at once: the file lives as long as the stream.
  const char* env = std::getenv("TMPDIR");
  const std::string dir = env && *env ? env : "/tmp";
  std::string path = dir + "/moesim-records-XXXXXX";
  const int fd = ::mkstemp(&path[0]);
  if (fd >= 0) {
    ::unlink(path.c_str());
    file_ = ::fdopen(fd, "w+b");
    if (!file_) ::close(fd);
  }
  if (!file_) throw ResourceError("--records: cannot make a temporary file for the records in " + dir + " (" +
                                  std::strerror(errno) + "); set TMPDIR to a writable folder");
}

RecordSpool::~RecordSpool() {
  if (file_) std::fclose(file_);
}

void RecordSpool::add(size_t variant, const nlohmann::json& record) {
  MOESIM_REQUIRE(variants_.empty() || variant + 1 >= variants_.size(), "RecordSpool::add: variants out of order");
  while (variants_.size() <= variant) variants_.push_back(Range{size_, {}});
  const std::string text = record.dump(2);
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size())
    throw ResourceError(std::string("--records: cannot write the temporary records file (") + std::strerror(errno) + ")");
  variants_[variant].bytes.push_back(static_cast<uint32_t>(text.size()));
  size_ += static_cast<int64_t>(text.size());
}

void RecordSpool::write_array(size_t variant, size_t indent, const std::function<void(const std::string&)>& out) const {
  Chunked o(out);
  if (variant >= variants_.size() || variants_[variant].bytes.empty()) {
    o.put("[]");
    o.flush();
    return;
  }
  if (std::fflush(file_) != 0 || std::fseek(file_, variants_[variant].begin, SEEK_SET) != 0)
    throw ResourceError(std::string("--records: cannot read the temporary records file (") + std::strerror(errno) + ")");
  const std::string pad(indent + 2, ' ');
  o.put("[\n");
  std::string text;
  const std::vector<uint32_t>& bytes = variants_[variant].bytes;
  for (size_t r = 0; r < bytes.size(); ++r) {
    text.resize(bytes[r]);
    if (std::fread(&text[0], 1, text.size(), file_) != text.size())
      throw ResourceError("--records: cannot read the temporary records file back");
    // Every line of the record one level deeper than the array's `[`.
    size_t line = 0;
    while (line < text.size()) {
      const size_t nl = text.find('\n', line);
      const size_t end = nl == std::string::npos ? text.size() : nl + 1;
      o.put(pad);
      o.put(text.data() + line, end - line);
      line = end;
    }
    o.put(r + 1 < bytes.size() ? ",\n" : "\n");
  }
  o.put(std::string(indent, ' ') + "]");
  o.flush();
  std::fseek(file_, 0, SEEK_END);
}

void write_run_json(const RunResult& run, const RecordSpool& spool, const std::function<void(const std::string&)>& out) {
  nlohmann::json j = run_to_json(run);
  std::vector<size_t> spooled;
  for (size_t i = 0; i < run.variants.size(); ++i) {
    if (run.variants[i].records.empty()) continue;
    j["strategies"][i]["records"] = placeholder(i);
    spooled.push_back(i);
  }
  const std::string text = j.dump(2) + "\n";
  j = nlohmann::json();
  size_t done = 0;
  for (size_t i : spooled) {
    const std::string mark = "\"" + placeholder(i) + "\"";
    const size_t at = text.find(mark, done);
    MOESIM_REQUIRE(at != std::string::npos && text.find(mark, at + 1) == std::string::npos,
                   "write_run_json: the records' placeholder of strategy " << i << " is not unique");
    const size_t line = text.rfind('\n', at) + 1;
    const size_t indent = text.find_first_not_of(' ', line) - line;
    out(text.substr(done, at - done));
    spool.write_array(i, indent, out);
    done = at + mark.size();
  }
  out(text.substr(done));
}

}  // namespace moesim
