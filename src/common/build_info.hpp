// What this binary was built from: the version (CMake's project version) and the git commit of the
// source tree, written at build time by cmake/build_commit.cmake. Host only.
#pragma once

namespace moesim {

// The full commit hash, with "-dirty" when tracked files differed from it; "" when the source was not
// a git checkout (an unpacked archive).
const char* build_commit();

}  // namespace moesim
