// Shared by the config tests: the one-line message a YAML text fails to load with.
#pragma once

#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"

namespace moesim::testing {

// The ConfigError message of loading `text` as "exp.yaml" with `overrides`; "" when it loads.
inline std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    load_experiment_text(text, "exp.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace moesim::testing
