// Atomic file output (see atomic_write.hpp).
#include "src/report/atomic_write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "src/common/error.hpp"

namespace moesim {

void write_file_atomic(const std::string& path, const std::string& content) {
  if (path.empty()) throw InputError("--out: expected a file path, got an empty string");
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string tmpl = dir + "/." + path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp.XXXXXX";
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) {
    throw InputError(path + ": cannot write here (" + std::strerror(errno) + "): expected a writable folder");
  }
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmpl.c_str());
      throw InputError(path + ": write failed (" + why + ")");
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  // Honour the umask for the final file (mkstemp creates 0600).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmpl.c_str());
    throw InputError(path + ": write failed (" + why + ")");
  }
  if (std::rename(tmpl.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmpl.c_str());
    throw InputError(path + ": cannot replace the file (" + why + ")");
  }
}

}  // namespace moesim
