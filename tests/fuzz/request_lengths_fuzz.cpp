// libFuzzer entry for the request lengths file reader (src/common/request_lengths.hpp).
// The checks live in fuzz_targets.hpp, shared with the FuzzRegression replay; seeds in corpus/request_lengths/.
// Built with clang when MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_request_lengths(data, size);
  return 0;
}
