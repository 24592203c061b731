// NumPy .npz archives (a zip of .npy members, numpy.savez / savez_compressed) read from memory with libzip:
// member name without ".npy" -> its decoded array (logits_file.hpp parse_npy_array). Stored and deflated
// members are read in chunks, never by the size a header claims, and capped at kMaxNpzMemberBytes each and
// the archive's total at kMaxNpzTotalBytes. Errors: InputError "FILE: MEMBER: what was expected", one line.
// Host only, deterministic. Covered by tests/workload/megatron_loads_test.cpp and tests/fuzz (megatron_npz).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "src/workload/logits_file.hpp"

namespace moesim {

constexpr uint64_t kMaxNpzMemberBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxNpzTotalBytes = uint64_t{1} << 32;

// True when `bytes` starts with a zip local-file header ("PK\x03\x04").
bool looks_like_zip(const std::string& bytes);

// Every member of the archive, decoded; `name` (the file) is used in messages.
std::map<std::string, NpyArray> parse_npz(const std::string& bytes, const std::string& name);

// Writes an uncompressed .npz of the given raw .npy members (tests and fuzz seeds).
std::string encode_npz(const std::map<std::string, std::string>& npy_members);

}  // namespace moesim
