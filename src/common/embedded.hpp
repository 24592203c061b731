// Files compiled into the binary (cmake/embed_files.cmake): the built-in default experiment
// (configs/quickstart.yaml), the hardware profiles (configs/hardware/*.yaml) and the published kernel
// measurements (data/validation/*.csv), keyed by their
// path relative to the repository root. Host only.
#pragma once

#include <map>
#include <string>

namespace moesim {
const std::map<std::string, std::string>& embedded_files();
}  // namespace moesim
