// libFuzzer entry for routing traces, JSON Lines (trace_replay.hpp parse_trace, recorded_routing, format_trace_lines).
// The checks live in fuzz_targets.hpp, shared with the FuzzRegression replay; seeds in corpus/trace/.
// Built with clang when MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_trace(data, size);
  return 0;
}
