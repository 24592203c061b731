// libFuzzer entry for per-expert load profiles, JSON (load_profile.hpp parse_load_profile, scale_loads).
// The checks live in fuzz_targets.hpp, shared with the FuzzRegression replay; seeds in corpus/load_profile/.
// Built with clang when MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_load_profile(data, size);
  return 0;
}
