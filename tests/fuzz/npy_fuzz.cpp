// libFuzzer entry for the .npy logits reader: in memory, from a file and header-only (logits_file.hpp).
// The checks live in fuzz_targets.hpp, shared with the FuzzRegression replay; seeds in corpus/npy/.
// Built with clang when MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_npy(data, size);
  return 0;
}
