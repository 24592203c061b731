// The digest of a float tensor (or of bytes: a file, a canonical text), for comparing two runs, two
// machines or two backends by one string:
// "fnv1a64:" and 16 hex digits, the 64-bit FNV-1a hash (Fowler, Noll, Vo; the IETF draft
// draft-eastlake-fnv) of the float32 values' little-endian bytes in index order, with -0 hashed as +0 and
// every NaN as the quiet NaN 0x7fc00000 (values that compare equal, and any NaN, give one digest).
// Header only; host. Covered by tests/common/digest_test.cpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace moesim {

constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnv1a64Prime = 0x100000001b3ULL;

// FNV-1a 64 of n bytes, continuing from h.
inline uint64_t fnv1a64(const unsigned char* bytes, size_t n, uint64_t h = kFnv1a64Offset) {
  for (size_t i = 0; i < n; ++i) {
    h ^= bytes[i];
    h *= kFnv1a64Prime;
  }
  return h;
}

// "fnv1a64:" and 16 hex digits of a 64-bit FNV-1a hash.
inline std::string fnv1a64_text(uint64_t h) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return std::string("fnv1a64:") + out;
}

// The digest of values[0, n).
inline std::string float_digest(const float* values, size_t n) {
  uint64_t h = kFnv1a64Offset;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof bits);
    if (bits == 0x80000000u) bits = 0;                                       // -0 -> +0
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) bits = 0x7fc00000u;  // NaN
    const unsigned char b[4] = {static_cast<unsigned char>(bits), static_cast<unsigned char>(bits >> 8),
                                static_cast<unsigned char>(bits >> 16), static_cast<unsigned char>(bits >> 24)};
    h = fnv1a64(b, 4, h);
  }
  return fnv1a64_text(h);
}

// The digest of a string's bytes.
inline std::string bytes_digest(const std::string& bytes) {
  return fnv1a64_text(fnv1a64(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()));
}

// The digest of a file's bytes, read in blocks; "" when it cannot be read.
inline std::string file_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  uint64_t h = kFnv1a64Offset;
  char block[1 << 16];
  while (in) {
    in.read(block, sizeof block);
    h = fnv1a64(reinterpret_cast<const unsigned char*>(block), static_cast<size_t>(in.gcount()), h);
  }
  return in.bad() ? "" : fnv1a64_text(h);
}

}  // namespace moesim
