// libFuzzer entry for the request file reader (src/serve/request_stream.hpp: the Azure trace and moesim's CSV).
// The checks live in fuzz_targets.hpp, shared with the FuzzRegression replay; seeds in corpus/request_stream/.
// Built with clang when MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_request_stream(data, size);
  return 0;
}
