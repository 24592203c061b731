// Tests src/report/hardware_report: the list and the single-profile table print a dtype's figures only
// where the profile has them ("-" in the list, no row in the table), and the JSON carries the critical
// batch F x bytes / (2 BW) worked by hand. Host only.
#include "src/report/hardware_report.hpp"

#include <gtest/gtest.h>

#include <string>

namespace moesim {
namespace {

// fp32 only: 2 TFLOP/s, 100 GB/s; B*(fp32) = 2e12 x 4 / (2 x 1e11) = 40.
HardwareProfile fp32_only() {
  return parse_hardware_profile("name: cpu-like\npeak_tflops: {fp32: 2}\nmemory_bandwidth_gbs: 100\nsm_count: 2\n"
                                "tile_m: 16\ntile_n: 16\nlaunch_overhead_us: 1\n",
                                "cpu-like.yaml");
}

TEST(HardwareReport, ListShowsADashWhereAProfileHasNoFigure) {
  const std::string list = format_hardware_list({fp32_only()});
  const std::string row = list.substr(list.find("cpu-like"));
  EXPECT_NE(row.find(" - "), std::string::npos) << row;   // no fp16 peak
  EXPECT_NE(row.find("2.0"), std::string::npos) << row;   // fp32 TFLOP/s
  EXPECT_EQ(row.find("0.0"), std::string::npos) << row;   // never 0.0 for a missing figure
  EXPECT_EQ(row.back(), '\n');
  EXPECT_EQ(row.substr(row.size() - 2), "-\n") << row;    // fp16 critical batch
}

TEST(HardwareReport, TableAndJsonListOnlyTheDtypesWithAPeak) {
  const HardwareProfile hw = fp32_only();
  const std::string table = format_hardware(hw);
  EXPECT_NE(table.find("  fp32 "), std::string::npos) << table;
  EXPECT_EQ(table.find("  fp16 "), std::string::npos) << table;
  const nlohmann::json j = hardware_json(hw);
  EXPECT_DOUBLE_EQ(j["critical_batch"]["fp32"].get<double>(), 40.0);
  EXPECT_FALSE(j["peak_flops_per_s"].contains("fp16"));
}

}  // namespace
}  // namespace moesim
