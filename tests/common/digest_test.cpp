// Tests of the tensor digest (common/digest.hpp): FNV-1a 64 against the published test vectors, the
// float bytes taken little-endian, -0 and NaN canonical, and any changed bit changing the digest.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/common/digest.hpp"

namespace moesim {
namespace {

// Test vectors of the FNV reference (draft-eastlake-fnv, section 8): "" and "a" and "foobar".
TEST(Digest, Fnv1a64TestVectors) {
  EXPECT_EQ(fnv1a64(nullptr, 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64(reinterpret_cast<const unsigned char*>("a"), 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64(reinterpret_cast<const unsigned char*>("foobar"), 6), 0x85944171f73967e8ULL);
}

// 1.0f is 0x3f800000: bytes 00 00 80 3f, the digest of those four bytes.
TEST(Digest, FloatsAreHashedAsLittleEndianBytes) {
  const float one = 1.0f;
  const unsigned char bytes[4] = {0x00, 0x00, 0x80, 0x3f};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(bytes, 4)));
  EXPECT_EQ(float_digest(&one, 1), std::string("fnv1a64:") + hex);
  EXPECT_EQ(float_digest(nullptr, 0), "fnv1a64:cbf29ce484222325");
}

TEST(Digest, EqualValuesOneDigestAndAnyBitChangesIt) {
  const std::vector<float> pos = {0.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> neg = {-0.0f, 1.5f, -std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(float_digest(pos.data(), pos.size()), float_digest(neg.data(), neg.size()));
  std::vector<float> v = {0.25f, -3.0f, 7.0f};
  const std::string d = float_digest(v.data(), v.size());
  v[1] = std::nextafter(v[1], 0.0f);
  EXPECT_NE(float_digest(v.data(), v.size()), d);
  std::vector<float> swapped = {-3.0f, 0.25f, 7.0f};
  EXPECT_NE(float_digest(swapped.data(), swapped.size()), d);
}

}  // namespace
}  // namespace moesim
