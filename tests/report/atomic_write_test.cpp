// Tests of atomic output: the target is replaced whole on success and untouched on failure, and no
// temporary file is left behind.
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "src/common/error.hpp"
#include "src/report/atomic_write.hpp"

namespace moesim {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count_entries(const std::string& dir) {
  int n = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
  closedir(d);
  return n;
}

TEST(AtomicWrite, ReplacesWholeFileAndLeavesNoTemporary) {
  char tmpl[] = "/tmp/moesim_atomic_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/out.json";
  write_file_atomic(path, "first");
  EXPECT_EQ(read_all(path), "first");
  write_file_atomic(path, "second, longer content");
  EXPECT_EQ(read_all(path), "second, longer content");
  EXPECT_EQ(count_entries(dir), 1);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST(AtomicWrite, UnwritableFolderIsInputErrorAndNothingWritten) {
  EXPECT_THROW(write_file_atomic("/nonexistent-folder/out.json", "x"), InputError);
  EXPECT_THROW(write_file_atomic("", "x"), InputError);
}

}  // namespace
}  // namespace moesim
