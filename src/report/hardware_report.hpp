// Hardware profiles as `moesim hardware` prints them: one profile as a table or JSON, the built-in list
// as a table. Host only. Covered by tests/cli/cli_test.cpp and tests/report/report_test.cpp.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/cost/hardware_profile.hpp"

namespace moesim {

// Every figure of the profile, the peak and critical batch per dtype it has a figure for.
nlohmann::json hardware_json(const HardwareProfile& hw);

// The profile's figures and a row per dtype with a dense peak: TFLOP/s, bytes per weight, critical batch.
std::string format_hardware(const HardwareProfile& hw);

// One line per profile: fp16 and fp32 peaks, bandwidth, fp16 critical batch; "-" where a profile has no
// figure for a dtype.
std::string format_hardware_list(const std::vector<HardwareProfile>& profiles);

}  // namespace moesim
