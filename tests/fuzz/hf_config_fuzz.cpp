// libFuzzer entry for the Hugging Face config.json reader behind model.hf_config (src/config/hf_config.hpp).
// The checks live in fuzz_targets.hpp, shared with the FuzzRegression replay; seeds in corpus/hf_config/.
// Built with clang when MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_hf_config(data, size);
  return 0;
}
