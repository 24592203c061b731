// Writes a whole file or nothing: the content goes to a temporary file in the same folder, is
// flushed, then renamed over the target, so an interrupted run never leaves a partial file and an
// existing file is replaced only on success. AtomicFileWriter does the same for content streamed in
// pieces (`run --dump-routing`), so memory does not grow with the file. Host only. Covered by
// tests/report/atomic_write_test.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace moesim {

// Throws InputError naming the path when the folder is not writable or the write fails.
void write_file_atomic(const std::string& path, const std::string& content);

// A temporary file beside `path` (created by the constructor: InputError naming the path when the folder
// is not writable), appended to piece by piece; commit() flushes it and renames it over `path`. Destroyed
// without commit (an exception on the way), the temporary file is removed and `path` is left as it was.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void append(const std::string& piece);  // InputError naming the path when the write fails
  void commit();                          // at most once; appending after it is a PreconditionError

  const std::string& path() const { return path_; }
  int64_t bytes_written() const { return bytes_; }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  int64_t bytes_ = 0;
};

}  // namespace moesim
