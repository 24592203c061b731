// Writers of small engine load dumps for the tests: raw .npy members (integer and string dtypes) and a
// Megatron-Core "mcore_ep_load_dump_v1" member set (the members ExpertLoadRecorder writes; see
// src/workload/megatron_loads.hpp), zipped by src/workload/npz_file.hpp encode_npz. Used by
// tests/workload/megatron_loads_test.cpp and tests/cli/import_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moesim::testing::loads {

// A .npy of raw little-endian `data` with dtype `descr` and `shape` (NPY format 1.0).
inline std::string npy(const std::string& descr, const std::vector<int64_t>& shape, const std::string& data,
                bool fortran = false) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  s += shape.size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + s + ", }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

inline std::string i32(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

inline std::string unicode(const std::string& text) {  // NumPy's '<U<n>': UTF-32LE
  std::string out;
  for (char c : text) {
    const uint32_t u = static_cast<unsigned char>(c);
    out.append(reinterpret_cast<const char*>(&u), 4);
  }
  return npy("<U" + std::to_string(text.size()), {}, out);
}

inline std::string scalar_i32(int32_t v) { return npy("<i4", {}, i32({v})); }

// The members Megatron-Core's ExpertLoadRecorder writes, for loads [L, F, G].
inline std::map<std::string, std::string> dump_members(const std::vector<int32_t>& loads, int64_t L, int64_t F, int64_t G,
                                                const std::vector<int32_t>& layers,
                                                const std::vector<int32_t>& forward_counts) {
  return {{"dump_version", unicode("mcore_ep_load_dump_v1")},
          {"capture_id", unicode("20250101_000000_pid1")},
          {"loads", npy("<i4", {L, F, G}, i32(loads))},
          {"layer_numbers", npy("<i4", {L}, i32(layers))},
          {"forward_counts", npy("<i4", {L}, i32(forward_counts))},
          {"ep_group_ranks", npy("<i4", {2}, i32({0, 1}))},
          {"ep_rank", scalar_i32(0)},
          {"ep_size", scalar_i32(2)},
          {"global_rank", scalar_i32(0)},
          {"num_global_physical_experts", scalar_i32(static_cast<int32_t>(G))},
          {"num_local_physical_experts", scalar_i32(static_cast<int32_t>(G / 2))}};
}

// Two layers (3 and 7), three forward slots, four experts. Layer 3 recorded 2 forwards: its third slot holds
// unwritten buffer memory (999s) that must be skipped. Layer 7 recorded 3.
inline std::map<std::string, std::string> small_dump() {
  return dump_members({1, 2, 3, 4,  /**/ 10, 0, 5, 1, /**/ 999, 999, 999, 999,   // layer 3
                       0, 0, 8, 0,  /**/ 2, 2, 2, 2,  /**/ 1, 0, 0, 7},          // layer 7
                      2, 3, 4, {3, 7}, {2, 3});
}

}  // namespace moesim::testing::loads
