// Writes a whole file or nothing: the content goes to a temporary file in the same folder, is
// flushed, then renamed over the target, so an interrupted run never leaves a partial file and an
// existing file is replaced only on success. Host only. Covered by tests/report/atomic_write_test.cpp.
#pragma once

#include <string>

namespace moesim {

// Throws InputError naming the path when the folder is not writable or the write fails.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace moesim
