// libFuzzer entry for Megatron-LM router traces (megatron_loads.hpp parse_megatron_router_trace: JSON Lines of
// per-token top-k expert ids, counted per decoder layer). The checks live in fuzz_targets.hpp, shared with the
// FuzzRegression replay; seeds in corpus/megatron_router_trace/ (make_seeds.py). Built with clang when
// MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_megatron_router_trace(data, size);
  return 0;
}
