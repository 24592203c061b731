// The knee rule of src/sweep/knee.hpp. Host only. Covered by tests/sweep/knee_test.cpp.
#include "src/sweep/knee.hpp"

#include <cmath>

#include "src/common/error.hpp"

namespace moesim {

double batching_elasticity(int64_t n0, double time0_s, int64_t n1, double time1_s) {
  MOESIM_REQUIRE(n0 > 0 && n1 > n0, "batches must grow: " << n0 << " then " << n1);
  MOESIM_REQUIRE(time0_s > 0 && time1_s > 0, "times must be positive");
  const double tpt0 = time0_s / static_cast<double>(n0), tpt1 = time1_s / static_cast<double>(n1);
  return std::log(tpt0 / tpt1) / std::log(static_cast<double>(n1) / static_cast<double>(n0));
}

std::optional<int64_t> knee_tokens(const std::vector<int64_t>& tokens, const std::vector<double>& time_s) {
  MOESIM_REQUIRE(tokens.size() == time_s.size(), "one time per batch");
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    if (batching_elasticity(tokens[i], time_s[i], tokens[i + 1], time_s[i + 1]) < kKneeElasticity) return tokens[i];
  }
  return std::nullopt;
}

}  // namespace moesim
