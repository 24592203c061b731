// Tests of atomic output: the target is replaced whole on success and untouched on failure, and no
// temporary file is left behind; the same for content streamed through AtomicFileWriter.
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

TEST(AtomicWrite, StreamedWriterCommitsWholeOrLeavesNothing) {
  char tmpl[] = "/tmp/moesim_atomic_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/dump.jsonl";
  write_file_atomic(path, "old\n");
  {
    AtomicFileWriter out(path);
    out.append("line 1\n");
    out.append("line 2\n");
    EXPECT_EQ(out.bytes_written(), 14);
    EXPECT_EQ(read_all(path), "old\n") << "the target changes only at commit";
    EXPECT_EQ(count_entries(dir), 2) << "the target and the temporary";
  }  // destroyed without commit: a failed run
  EXPECT_EQ(read_all(path), "old\n");
  EXPECT_EQ(count_entries(dir), 1);
  {
    AtomicFileWriter out(path);
    out.append("line 1\n");
    out.commit();
    EXPECT_THROW(out.append("late\n"), PreconditionError);
  }
  EXPECT_EQ(read_all(path), "line 1\n");
  EXPECT_EQ(count_entries(dir), 1);
  EXPECT_THROW(AtomicFileWriter("/nonexistent-folder/dump.jsonl"), InputError);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace moesim
