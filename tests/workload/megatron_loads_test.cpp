// Tests of engines' recorded expert loads: the integer/string .npy reader, the .npz reader (libzip), the
// Megatron-Core "mcore_ep_load_dump_v1" reader against hand-worked sums on small dumps the test writes
// (forwards past forward_counts skipped), physical-to-logical folding (workload.expert_map), format recognition
// (workload.format), one-line errors naming the file and the member, and `moesim run` on a dump.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/megatron_loads.hpp"
#include "src/workload/npz_file.hpp"
#include "tests/support/loads_support.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using namespace moesim::testing::loads;

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  }
}

TEST(NpyArray, ReadsIntegerDtypesAndStrings) {
  const NpyArray a = parse_npy_array(npy("<i8", {2}, std::string("\x05\0\0\0\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff", 16)), "a");
  EXPECT_EQ(a.ints, (std::vector<int64_t>{5, -1}));
  const NpyArray b = parse_npy_array(npy("|u1", {3}, "\x01\x02\xff"), "b");
  EXPECT_EQ(b.ints, (std::vector<int64_t>{1, 2, 255}));
  const NpyArray c = parse_npy_array(npy("<u2", {1}, "\x34\x12"), "c");
  EXPECT_EQ(c.ints, (std::vector<int64_t>{0x1234}));
  const NpyArray s = parse_npy_array(unicode("hello"), "s");
  EXPECT_TRUE(s.is_text);
  EXPECT_EQ(s.text, "hello");
  EXPECT_TRUE(s.shape.empty());
}

TEST(NpyArray, FortranOrderIsReadIntoCOrder) {
  // [[1, 2, 3], [4, 5, 6]] stored column-major: 1 4 2 5 3 6.
  const NpyArray a = parse_npy_array(npy("<i4", {2, 3}, i32({1, 4, 2, 5, 3, 6}), true), "f");
  EXPECT_EQ(a.ints, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(NpyArray, RejectsWhatItCannotRead) {
  expect_error([] { parse_npy_array(npy(">i4", {1}, i32({1})), "x.npy"); }, {"x.npy", "little-endian"});
  expect_error([] { parse_npy_array(npy("<f4", {1}, i32({1})), "x.npy"); }, {"x.npy", "integer or string dtype"});
  expect_error([] { parse_npy_array(npy("<i3", {1}, "abc"), "x.npy"); }, {"x.npy", "1, 2, 4 or 8 bytes"});
  expect_error([] { parse_npy_array(npy("<u8", {1}, std::string(8, '\xff')), "x.npy"); }, {"x.npy", "below 2^63"});
  // A shape of 2^30 x 2^30 over 4 bytes of data: refused before any allocation; 2^41 is refused as a number.
  expect_error([] { parse_npy_array(npy("<i4", {int64_t{1} << 30, int64_t{1} << 30}, i32({1})), "x.npy"); },
               {"x.npy", "does not match"});
  expect_error([] { parse_npy_array(npy("<i4", {int64_t{1} << 41}, i32({1})), "x.npy"); }, {"x.npy", "too large"});
  expect_error([] { parse_npy_array(npy("<i4", {3}, i32({1, 2})), "x.npy"); }, {"x.npy", "does not match"});
}

TEST(Npz, RoundTripsMembersAndRefusesBrokenArchives) {
  const std::string z = encode_npz({{"a", npy("<i4", {2}, i32({7, 8}))}, {"b", unicode("x")}});
  EXPECT_TRUE(looks_like_zip(z));
  const auto m = parse_npz(z, "t.npz");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("a").ints, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(m.at("b").text, "x");
  expect_error([&] { parse_npz(z.substr(0, 20), "t.npz"); }, {"t.npz"});
  expect_error([&] { parse_npz(z.substr(0, z.size() / 2), "t.npz"); }, {"t.npz"});
  expect_error([] { parse_npz("PK\x03\x04 not really a zip", "t.npz"); }, {"t.npz", "zip"});
  expect_error([] { parse_npz("{}", "t.npz"); }, {"t.npz", "PK"});
  expect_error([] { parse_npz(encode_npz({{"a", "not an npy"}}), "t.npz"); }, {"t.npz: a:", ".npy"});
}

TEST(MegatronLoads, SumsValidForwardsPerLayer) {
  const MegatronLoads m = parse_megatron_npz(encode_npz(small_dump()), "d.npz");
  EXPECT_EQ(m.layers, (std::vector<int>{3, 7}));
  EXPECT_EQ(m.forward_counts, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(m.num_physical_experts, 4);
  EXPECT_EQ(m.ep_rank, 0);
  EXPECT_EQ(m.ep_size, 2);
  ASSERT_EQ(m.counts.size(), 2u);
  EXPECT_EQ(m.counts[0], (std::vector<int64_t>{11, 2, 8, 5}));  // 1+10, 2+0, 3+5, 4+1; the 999s skipped
  EXPECT_EQ(m.counts[1], (std::vector<int64_t>{3, 2, 10, 9}));   // 0+2+1, 0+2+0, 8+2+0, 0+2+7
}

TEST(MegatronLoads, ReadsZipsAsPythonWritesThem) {
  // The same dump written by Python's zipfile: stored, deflated, and with ZIP64 headers as numpy.savez writes
  // its members (tests/fuzz/make_seeds.py).
  for (const char* seed : {"two-layers.npz", "two-layers-deflated.npz", "two-layers-zip64.npz", "int64-loads.npz"}) {
    const MegatronLoads m =
        read_megatron_npz(std::string(MOESIM_SOURCE_DIR) + "/tests/fuzz/corpus/megatron_npz/" + seed);
    EXPECT_EQ(m.counts, (std::vector<std::vector<int64_t>>{{11, 2, 8, 5}, {3, 2, 10, 9}})) << seed;
  }
}

TEST(MegatronLoads, RanksOfOneGroupAreSummed) {
  const MegatronLoads a = parse_megatron_npz(encode_npz(small_dump()), "r0.npz");
  const MegatronLoads b = parse_megatron_npz(encode_npz(small_dump()), "r1.npz");
  const MegatronLoads sum = combine_megatron_loads({a, b}, {"r0.npz", "r1.npz"});
  EXPECT_EQ(sum.num_ranks, 2);
  EXPECT_EQ(sum.counts[0], (std::vector<int64_t>{22, 4, 16, 10}));
  auto other = small_dump();
  other["layer_numbers"] = npy("<i4", {2}, i32({3, 8}));
  const MegatronLoads c = parse_megatron_npz(encode_npz(other), "r2.npz");
  expect_error([&] { combine_megatron_loads({a, c}, {"r0.npz", "r2.npz"}); }, {"r2.npz", "layer_numbers"});
}

TEST(MegatronLoads, ErrorsNameTheFileAndTheMember) {
  auto bad = [](const std::string& member, const std::string& npy_bytes, const std::vector<std::string>& parts) {
    auto d = small_dump();
    if (npy_bytes.empty()) d.erase(member);
    else d[member] = npy_bytes;
    const std::string z = encode_npz(d);
    std::vector<std::string> want = {"d.npz: " + member};
    want.insert(want.end(), parts.begin(), parts.end());
    expect_error([&] { parse_megatron_npz(z, "d.npz"); }, want);
  };
  bad("dump_version", unicode("mcore_ep_load_dump_v2"), {"mcore_ep_load_dump_v1", "v2"});
  bad("loads", "", {"expected this member"});
  bad("loads", npy("<i4", {2, 12}, i32(std::vector<int32_t>(24, 1))), {"3 dimension"});
  bad("forward_counts", npy("<i4", {2}, i32({2, 4})), {"forward_counts[1]", "0..3"});
  bad("num_global_physical_experts", scalar_i32(5), {"equal to the last dimension"});
  bad("layer_numbers", npy("<i4", {2}, i32({7, 3})), {"layer_numbers[1]", "ascending"});
  bad("ep_size", scalar_i32(3), {"divisor"});
  auto neg = small_dump();
  neg["loads"] = npy("<i4", {2, 3, 4}, i32({1, 2, 3, -4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  expect_error([&] { parse_megatron_npz(encode_npz(neg), "d.npz"); }, {"d.npz: loads[0, 0, 3]", "-4"});
}

TEST(ExpertMap, FoldsPhysicalSlotsIntoLogicalExperts) {
  // Six physical slots over four logical experts: experts 0 and 1 have a replica each (slots 4 and 5).
  EXPECT_EQ(fold_expert_map({5, 1, 2, 3, 7, 4}, {0, 1, 2, 3, 0, 1}, 4, "f"), (std::vector<int64_t>{12, 5, 2, 3}));
  expect_error([] { fold_expert_map({1, 2, 3}, {0, 1}, 2, "f"); }, {"f", "workload.expert_map", "(3)"});
  expect_error([] { fold_expert_map({1, 2}, {0, 0}, 2, "f"); }, {"f", "workload.expert_map", "expert 1"});
  expect_error([] { fold_expert_map({1, 2}, {0, 2}, 2, "f"); }, {"f", "workload.expert_map[1]"});
}

TEST(LoadFormat, RecognisedByContentOrForced) {
  EXPECT_EQ(detect_load_format(encode_npz(small_dump()), "f"), LoadFormat::megatron_npz);
  EXPECT_EQ(detect_load_format(" \n{\"a\": {}}", "f"), LoadFormat::moesim_json);
  expect_error([] { detect_load_format("\x93NUMPY", "f.bin"); }, {"f.bin", "workload.format"});

  const std::string dir = testing::make_temp_dir();
  const std::string dump = dir + "/rank0.npz";
  testing::write_text(dump, encode_npz(small_dump()));
  const LoadProfile p = read_load_profile_file(dump, LoadFormat::detect, "", 4, {});
  EXPECT_EQ(p.format, LoadFormat::megatron_npz);
  EXPECT_FALSE(p.format_forced);
  EXPECT_EQ(p.layers, (std::vector<int>{3, 7}));
  EXPECT_EQ(p.counts[1], (std::vector<int64_t>{3, 2, 10, 9}));
  // Four physical slots folded into three logical experts: slot 3 replicates expert 0.
  const LoadProfile f = read_load_profile_file(dump, LoadFormat::megatron_npz, "", 3, {0, 1, 2, 0});
  EXPECT_TRUE(f.format_forced);
  EXPECT_EQ(f.counts[0], (std::vector<int64_t>{16, 2, 8}));
  EXPECT_EQ(f.counts[1], (std::vector<int64_t>{12, 2, 10}));
  expect_error([&] { read_load_profile_file(dump, LoadFormat::detect, "", 3, {}); },
               {dump, "num_global_physical_experts", "workload.expert_map"});
  expect_error([&] { read_load_profile_file(dump, LoadFormat::detect, "some/key", 4, {}); },
               {dump, "workload.profile_key"});
  expect_error([&] { read_load_profile_file(dump, LoadFormat::moesim_json, "", 4, {}); }, {dump, "JSON"});
  // A moesim JSON profile with six physical slots per layer, folded the same way.
  const std::string json_path = dir + "/p.json";
  testing::write_text(json_path, R"({"p": {"0": [5, 1, 2, 3, 7, 4]}})");
  const LoadProfile j = read_load_profile_file(json_path, LoadFormat::detect, "", 4, {0, 1, 2, 3, 0, 1});
  EXPECT_EQ(j.format, LoadFormat::moesim_json);
  EXPECT_EQ(j.counts[0], (std::vector<int64_t>{12, 5, 2, 3}));
  expect_error([&] { read_load_profile_file(json_path, LoadFormat::megatron_npz, "", 6, {}); }, {json_path, "PK"});
}

TEST(MegatronLoads, RunReadsADumpAndReportsItsFormat) {
  const std::string dir = testing::make_temp_dir();
  const std::string dump = dir + "/rank0.npz";
  testing::write_text(dump, encode_npz(small_dump()));
  const std::string cfg = std::string(MOESIM_SOURCE_DIR) + "/configs/olmoe-profile.yaml";
  const std::string base = "run " + cfg + " --format json --set workload.path=" + dump +
                           " --set workload.profile_key= --set model.experts=4 --set model.top_k=2";
  const auto r = testing::run_cli(base + " --set expect=[]");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const std::string text = j.dump();
  EXPECT_NE(text.find("\"profile_format\":\"megatron_npz\""), std::string::npos) << text.substr(0, 2000);
  EXPECT_NE(text.find("\"profile_format_from\":\"content\""), std::string::npos);
  const auto keyed = testing::run_cli("run " + cfg + " --set workload.path=" + dump +
                                      " --set model.experts=4 --set model.top_k=2 --set expect=[]");
  EXPECT_EQ(keyed.exit_code, 2) << keyed.err;
  EXPECT_NE(keyed.err.find("workload.profile_key"), std::string::npos) << keyed.err;
  const auto unmapped = testing::run_cli(base + " --set model.experts=3 --set expect=[]");
  EXPECT_EQ(unmapped.exit_code, 2) << unmapped.err;
  EXPECT_NE(unmapped.err.find("workload.expert_map"), std::string::npos) << unmapped.err;
  const auto mapped = testing::run_cli(base + " --set model.experts=3 --set 'workload.expert_map=[0,1,2,0]' --set expect=[]");
  EXPECT_EQ(mapped.exit_code, 0) << mapped.err;
}

}  // namespace
}  // namespace moesim
