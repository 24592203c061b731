// Tests of `moesim import`: two ranks' Megatron-Core dumps summed and folded through --expert-map into
// moesim's load-profile JSON (hand-worked counts), the profile then read by `moesim run`; a JSON profile
// re-keyed; one-line errors with exit 2 for missing --out, an unreadable input and a wrong map.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "src/workload/npz_file.hpp"
#include "tests/support/loads_support.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using namespace moesim::testing::loads;

TEST(Import, SumsRanksAndFoldsReplicas) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/rank0.npz", encode_npz(small_dump()));
  testing::write_text(dir + "/rank1.npz", encode_npz(small_dump()));
  const auto r = testing::run_cli("import " + dir + "/rank0.npz " + dir + "/rank1.npz --expert-map 0,1,2,0 --out " +
                                  dir + "/p.json --name group");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(testing::read_text(dir + "/p.json"));
  // Per rank: layer 3 [11, 2, 8, 5], layer 7 [3, 2, 10, 9]; two ranks doubled; slot 3 folded into expert 0.
  EXPECT_EQ(j.at("group").at("3"), nlohmann::json({32, 4, 16}));
  EXPECT_EQ(j.at("group").at("7"), nlohmann::json({24, 4, 20}));
  const std::string cfg = std::string(MOESIM_SOURCE_DIR) + "/configs/olmoe-profile.yaml";
  const auto run = testing::run_cli("run " + cfg + " --set workload.path=" + dir +
                                    "/p.json --set workload.profile_key= --set model.experts=3 --set model.top_k=2"
                                    " --set expect=[] --format json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string compact = nlohmann::json::parse(run.out).dump();
  EXPECT_NE(compact.find("\"profile_format\":\"moesim_json\""), std::string::npos) << compact.substr(0, 1500);
}

TEST(Import, ReadsAJsonProfileWithAKey) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/in.json", R"({"a": {"0": [1, 2]}, "b": {"1": [5, 7, 1]}})");
  const auto r = testing::run_cli("import " + dir + "/in.json --key b --experts 2 --expert-map 0,1,0 --out " + dir +
                                  "/p.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(testing::read_text(dir + "/p.json"));
  EXPECT_EQ(j.at("in").at("1"), nlohmann::json({6, 7}));
}

TEST(Import, BadInputIsOneLineAndExitTwo) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/rank0.npz", encode_npz(small_dump()));
  testing::write_text(dir + "/junk.bin", "\x01\x02\x03");
  struct Case {
    std::string args, needle;
  };
  for (const Case& c : {Case{"import " + dir + "/rank0.npz", "--out"},
                        Case{"import " + dir + "/junk.bin --out " + dir + "/o.json", dir + "/junk.bin"},
                        Case{"import " + dir + "/rank0.npz --expert-map 0,1 --out " + dir + "/o.json", "workload.expert_map"},
                        Case{"import " + dir + "/rank0.npz --experts 3 --out " + dir + "/o.json", "num_global_physical_experts"},
                        Case{"import " + dir + "/rank0.npz --format moesim_json --experts 4 --out " + dir + "/o.json",
                             dir + "/rank0.npz"}}) {
    const auto r = testing::run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_FALSE(std::ifstream(dir + "/o.json").good()) << "no partial output";
}

}  // namespace
}  // namespace moesim
