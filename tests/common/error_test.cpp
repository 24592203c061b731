// Error messages stay one line whatever they quote (src/common/error.hpp), and each error type maps to
// its documented exit code.
#include "src/common/error.hpp"

#include <gtest/gtest.h>

namespace moesim {
namespace {

TEST(Error, ControlCharactersAreEscapedIntoOneLine) {
  const ConfigError e(std::string("cfg.yaml: hardware.ba\rmin\n: unknown key\t") + '\x7f' + "x");
  EXPECT_STREQ(e.what(), "cfg.yaml: hardware.ba\\x0dmin\\x0a: unknown key\\x09\\x7fx");
  const InputError nul(std::string("a\0b", 3));
  EXPECT_EQ(std::string(nul.what()), "a\\x00b");
  // Printable bytes, UTF-8 included, pass unchanged.
  EXPECT_STREQ(InputError("t.csv: row 3: 'µs' is not a number").what(), "t.csv: row 3: 'µs' is not a number");
}

TEST(Error, ExitCodes) {
  EXPECT_EQ(ConfigError("x").exit_code(), kExitBadInput);
  EXPECT_EQ(InputError("x").exit_code(), kExitBadInput);
  EXPECT_EQ(ResourceError("x").exit_code(), kExitResource);
  EXPECT_EQ(BackendError("x").exit_code(), 4);
}

}  // namespace
}  // namespace moesim
