// libFuzzer entry for Megatron-Core expert-load dumps (megatron_loads.hpp parse_megatron_npz: libzip, the
// integer .npy reader, the dump's consistency checks; load_profile.hpp fold_expert_map). The checks live in
// fuzz_targets.hpp, shared with the FuzzRegression replay; seeds in corpus/megatron_npz/ (make_seeds.py).
// Built with clang when MOESIM_BUILD_FUZZERS=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moesim::fuzz::fuzz_megatron_npz(data, size);
  return 0;
}
