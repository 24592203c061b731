// Atomic file output (see atomic_write.hpp).
#include "src/report/atomic_write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "src/common/error.hpp"

namespace moesim {

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  if (path.empty()) throw InputError("--out: expected a file path, got an empty string");
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  tmp_ = dir + "/." + path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp.XXXXXX";
  fd_ = mkstemp(tmp_.data());
  if (fd_ < 0) {
    throw InputError(path + ": cannot write here (" + std::strerror(errno) + "): expected a writable folder");
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::append(const std::string& piece) {
  MOESIM_REQUIRE(fd_ >= 0, "AtomicFileWriter::append after commit: " << path_);
  const char* p = piece.data();
  size_t left = piece.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw InputError(path_ + ": write failed (" + std::strerror(errno) + ")");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  bytes_ += static_cast<int64_t>(piece.size());
}

void AtomicFileWriter::commit() {
  MOESIM_REQUIRE(fd_ >= 0, "AtomicFileWriter::commit twice: " << path_);
  // Honour the umask for the final file (mkstemp creates 0600).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp_.c_str());
    throw InputError(path_ + ": write failed (" + why + ")");
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp_.c_str());
    throw InputError(path_ + ": cannot replace the file (" + why + ")");
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFileWriter out(path);
  out.append(content);
  out.commit();
}

}  // namespace moesim
