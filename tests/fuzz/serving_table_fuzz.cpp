// libFuzzer entry for the serving tables reader (src/sweep/published_serve.hpp).
// The checks live in fuzz_targets.hpp, shared with the FuzzRegression replay; seeds in corpus/serving_table/.
// Built with clang when MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_serving_table(data, size);
  return 0;
}
