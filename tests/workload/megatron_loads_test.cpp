// Tests of engines' recorded expert loads: the integer/string .npy reader, the .npz reader (libzip), the
// Megatron-Core "mcore_ep_load_dump_v1" reader against hand-worked sums on small dumps the test writes
// (forwards past forward_counts skipped), physical-to-logical folding (workload.expert_map), format recognition
// (workload.format), one-line errors naming the file and the member, and `moesim run` on a dump; Megatron-LM's
// router traces (router_trace_rank{R}.jsonl) counted per decoder layer against sums worked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
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

// A router trace as router_trace.py writes it: two steps of layers 1 and 4, three tokens each, top-2 of 4
// experts, and an mtp line sharing layer 1 (left out). Tokens per expert, by hand:
//   layer 1: [0,1] [1,2] [1,3] + [2,3] [0,2] [3,0] -> expert 0: 3, 1: 3, 2: 3, 3: 3
//   layer 4: [3,2] [3,0] [1,3] + [0,1] [0,3] [2,1] -> expert 0: 3, 1: 3, 2: 2, 3: 4
std::string router_trace_text() {
  return R"({"step": 0, "stage": "pre_dispatch", "block": "decoder", "layer": 1, "rank": 0, "num_tokens": 3, "topk": 2, "top_indices": [[0, 1], [1, 2], [1, 3]]}
{"step": 0, "stage": "pre_dispatch", "block": "decoder", "layer": 4, "rank": 0, "num_tokens": 3, "topk": 2, "top_indices": [[3, 2], [3, 0], [1, 3]]}
{"step": 0, "stage": "pre_dispatch", "block": "mtp", "layer": 1, "rank": 0, "num_tokens": 1, "topk": 2, "top_indices": [[0, 1]], "mtp_idx": 0}

{"step": 1, "stage": "pre_dispatch", "block": "decoder", "layer": 1, "rank": 0, "num_tokens": 3, "topk": 2, "top_indices": [[2, 3], [0, 2], [3, 0]], "logit_offset": 0, "logit_bytes": 24, "logit_shape": [3, 4]}
{"step": 1, "stage": "pre_dispatch", "block": "decoder", "layer": 4, "rank": 0, "num_tokens": 3, "topk": 2, "top_indices": [[0, 1], [0, 3], [2, 1]]}
)";
}

MegatronLoads parse_trace_text(const std::string& text, int experts, int top_k) {
  std::istringstream in(text);
  return parse_megatron_router_trace(in, "t.jsonl", experts, top_k);
}

TEST(MegatronRouterTrace, CountsTokensPerExpertPerDecoderLayer) {
  const MegatronLoads m = parse_trace_text(router_trace_text(), 4, 2);
  EXPECT_EQ(m.layers, (std::vector<int>{1, 4}));
  EXPECT_EQ(m.forward_counts, (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(m.counts.size(), 2u);
  EXPECT_EQ(m.counts[0], (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(m.counts[1], (std::vector<int64_t>{3, 3, 2, 4}));
  EXPECT_EQ(m.num_physical_experts, 4);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(parse_trace_text(router_trace_text(), 4, 0).counts, m.counts) << "top_k 0: not checked";
  // Two ranks of one EP group add up, as the .npz dumps do.
  const MegatronLoads both = combine_megatron_loads({m, m}, {"rank0", "rank1"});
  EXPECT_EQ(both.counts[1], (std::vector<int64_t>{6, 6, 4, 8}));
}

TEST(MegatronRouterTrace, RejectsWhatItCannotCount) {
  const std::string head = R"({"step": 0, "layer": 1, "num_tokens": 2, "topk": 2, "top_indices": )";
  expect_error([&] { parse_trace_text(router_trace_text(), 4, 3); }, {"t.jsonl:1", "topk", "model.top_k = 3", "got 2"});
  expect_error([&] { parse_trace_text(router_trace_text(), 3, 2); }, {"t.jsonl:1", "top_indices[2]", "[0, 2]", "got 3"});
  expect_error([&] { parse_trace_text(head + "[[0, 1], [2]]}", 4, 0); }, {"t.jsonl:1", "top_indices[1]", "topk = 2", "got 1"});
  expect_error([&] { parse_trace_text(head + "[[0, 1], [2, 2]]}", 4, 0); }, {"t.jsonl:1", "top_indices[1]", "distinct"});
  expect_error([&] { parse_trace_text(head + "[[0, 1]]}", 4, 0); }, {"t.jsonl:1", "top_indices", "num_tokens = 2", "1 entries"});
  expect_error([&] { parse_trace_text(head + "[[0, 1], [1, -1]]}", 4, 0); }, {"t.jsonl:1", "expert ids", "got -1"});
  expect_error([&] { parse_trace_text(head + "[[0, 1], [1, 0.5]]}", 4, 0); }, {"t.jsonl:1", "expert ids", "got 0.5"});
  expect_error([&] { parse_trace_text(R"({"step": 0, "layer": 1, "num_tokens": 0, "topk": 2})", 4, 0); },
               {"t.jsonl:1", "top_indices", "got none"});
  expect_error([&] { parse_trace_text(R"({"step": 0, "layer": -1, "num_tokens": 0, "topk": 2, "top_indices": []})", 4, 0); },
               {"t.jsonl:1", "layer", "got -1"});
  expect_error([&] { parse_trace_text(R"({"layer": 1, "num_tokens": 0, "topk": 2, "top_indices": []})", 4, 0); },
               {"t.jsonl:1", "step", "got none"});
  expect_error([&] { parse_trace_text(R"({"step": 0, "layer": 1, "num_tokens": 0, "topk": 0, "top_indices": []})", 4, 0); },
               {"t.jsonl:1", "topk", "got 0"});
  expect_error([&] { parse_trace_text(R"({"step": 0, "block": "encoder", "layer": 1, "num_tokens": 0, "topk": 2, "top_indices": []})", 4, 0); },
               {"t.jsonl:1", "block", "\"encoder\""});
  expect_error([&] { parse_trace_text(router_trace_text() + R"({"step": 2, "layer": 1, "num_tokens": 0, "topk": 3, "top_indices": []})", 4, 0); },
               {"t.jsonl:7", "topk", "expected 2", "got 3"});
  expect_error([&] { parse_trace_text(router_trace_text() + "not json\n", 4, 0); }, {"t.jsonl:7", "JSON object"});
  expect_error([&] { parse_trace_text("\n\n", 4, 0); }, {"t.jsonl", "at least one decoder line", "got none"});
  expect_error([&] {
    parse_trace_text(R"({"step": 0, "block": "mtp", "layer": 1, "num_tokens": 1, "topk": 2, "top_indices": [[0, 1]]})", 4, 0);
  }, {"t.jsonl", "at least one decoder line"});
  const std::string dir = testing::make_temp_dir();
  expect_error([&] { read_megatron_router_trace(dir, 4, 2); }, {dir, "cannot read a directory"});
  expect_error([&] { read_megatron_router_trace(dir + "/none.jsonl", 4, 2); }, {dir + "/none.jsonl", "cannot open"});
}

TEST(MegatronRouterTrace, RecognisedByContentAndReadAsAProfile) {
  EXPECT_EQ(detect_load_format(router_trace_text(), "f"), LoadFormat::megatron_router_trace);
  EXPECT_EQ(detect_load_format("{\n \"p\": {\"0\": [1, 2]}\n}\n", "f"), LoadFormat::moesim_json);
  EXPECT_EQ(detect_load_format(R"({"top_indices_of": {"0": [1, 2]}})", "f"), LoadFormat::moesim_json);
  const std::string dir = testing::make_temp_dir();
  const std::string path = dir + "/router_trace_rank0.jsonl";
  testing::write_text(path, "\n" + router_trace_text());
  EXPECT_EQ(detect_load_format_of_file(path), LoadFormat::megatron_router_trace);
  const LoadProfile p = read_load_profile_file(path, LoadFormat::detect, "", 4, {}, 2);
  EXPECT_EQ(p.format, LoadFormat::megatron_router_trace);
  EXPECT_FALSE(p.format_forced);
  EXPECT_EQ(p.layers, (std::vector<int>{1, 4}));
  EXPECT_EQ(p.counts[1], (std::vector<int64_t>{3, 3, 2, 4}));
  // The ids as physical slots: slot 3 replicates expert 0.
  const LoadProfile f = read_load_profile_file(path, LoadFormat::megatron_router_trace, "", 3, {0, 1, 2, 0}, 2);
  EXPECT_TRUE(f.format_forced);
  EXPECT_EQ(f.counts[1], (std::vector<int64_t>{7, 3, 2}));
  expect_error([&] { read_load_profile_file(path, LoadFormat::detect, "some/key", 4, {}, 2); },
               {path, "workload.profile_key"});
  expect_error([&] { read_load_profile_file(path, LoadFormat::detect, "", 4, {}, 8); }, {path + ":2", "model.top_k = 8"});
}

TEST(MegatronRouterTrace, RunAndImportReadIt) {
  const std::string dir = testing::make_temp_dir();
  const std::string rank0 = dir + "/router_trace_rank0.jsonl", rank1 = dir + "/router_trace_rank1.jsonl";
  testing::write_text(rank0, router_trace_text());
  testing::write_text(rank1, router_trace_text());
  const std::string cfg = std::string(MOESIM_SOURCE_DIR) + "/configs/olmoe-profile.yaml";
  const auto r = testing::run_cli("run " + cfg + " --format json --set workload.path=" + rank0 +
                                  " --set workload.profile_key= --set model.experts=4 --set model.top_k=2 --set expect=[]");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["workload"]["profile_format"], "megatron_router_trace");
  EXPECT_EQ(j["workload"]["profile_format_from"], "content");
  const nlohmann::json& layers = j["strategies"][0]["per_layer"];
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[1]["layer"], 4);
  EXPECT_EQ(layers[1]["load"], (std::vector<int64_t>{3, 3, 2, 4}));
  const auto k3 = testing::run_cli("run " + cfg + " --set workload.path=" + rank0 +
                                   " --set workload.profile_key= --set model.experts=4 --set model.top_k=3 --set expect=[]");
  EXPECT_EQ(k3.exit_code, 2) << k3.err;
  EXPECT_NE(k3.err.find("model.top_k = 3"), std::string::npos) << k3.err;

  const auto imp = testing::run_cli("import " + rank0 + " " + rank1 + " --experts 4 --out " + dir + "/p.json");
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  const nlohmann::json p = nlohmann::json::parse(testing::read_text(dir + "/p.json"));
  EXPECT_EQ(p["router_trace_rank0"]["4"], (std::vector<int64_t>{6, 6, 4, 8}));
  const auto no_experts = testing::run_cli("import " + rank0 + " --out " + dir + "/q.json");
  EXPECT_EQ(no_experts.exit_code, 2) << no_experts.err;
  EXPECT_NE(no_experts.err.find("--experts"), std::string::npos) << no_experts.err;
  testing::write_text(dir + "/p2.json", R"({"p": {"0": [1, 2, 3, 4]}})");
  const auto mixed = testing::run_cli("import " + rank0 + " " + dir + "/p2.json --experts 4 --out " + dir + "/q.json");
  EXPECT_EQ(mixed.exit_code, 2) << mixed.err;
  EXPECT_NE(mixed.err.find("expected the same format"), std::string::npos) << mixed.err;
}

// The same decisions as moesim trace lines (weights 1/topk, as a router trace is replayed): one line per token.
std::string as_moesim_trace(const std::string& router_trace) {
  std::istringstream in(router_trace);
  RouterTraceReader reader(in, "t.jsonl", 4, 2);
  RouterTraceLine line;
  std::ostringstream out;
  while (reader.next(line)) {
    if (!line.decoder) continue;
    for (int64_t t = 0; t < line.num_tokens; ++t) {
      out << "{\"step\": " << line.step << ", \"layer\": " << line.layer << ", \"token\": " << t << ", \"experts\": ["
          << line.experts[2 * t] << ", " << line.experts[2 * t + 1] << "], \"weights\": [0.5, 0.5]}\n";
    }
  }
  return out.str();
}

TEST(MegatronRouterTrace, ReplaysAsATraceStepByStep) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/router_trace_rank0.jsonl", router_trace_text());
  testing::write_text(dir + "/same.jsonl", as_moesim_trace(router_trace_text()));
  for (const char* capacity : {"0", "1"}) {
    SCOPED_TRACE(std::string("capacity_factor ") + capacity);
    const std::vector<std::string> sets = {"workload.source=trace", "model.experts=4", "model.top_k=2",
                                           "placement.kind=single", std::string("router.capacity_factor=") + capacity};
    auto with_path = [&](const std::string& file) {
      std::vector<std::string> o = sets;
      o.push_back("workload.path=" + dir + "/" + file);
      return default_experiment(o);
    };
    RunOptions keep;
    keep.records = true;
    keep.execute = false;
    const Experiment megatron = with_path("router_trace_rank0.jsonl");
    const RunResult r = run_experiment(megatron, own_variant(megatron), keep);
    const Experiment same = with_path("same.jsonl");
    const RunResult w = run_experiment(same, own_variant(same), keep);
    EXPECT_TRUE(r.trace_replayed);
    const VariantResult& v = r.variants.at(0);
    const VariantResult& x = w.variants.at(0);
    // Four decoder lines, four (step, layer) batches of three tokens, in file order; the mtp line left out.
    ASSERT_EQ(v.records.size(), 4u);
    ASSERT_EQ(x.records.size(), 4u);
    const std::vector<std::pair<int, int>> step_layer = {{0, 1}, {0, 4}, {1, 1}, {1, 4}};
    // Loads by hand, dropless: [0,1] [1,2] [1,3] -> [1,3,1,1]; [3,2] [3,0] [1,3] -> [1,1,1,3];
    // [2,3] [0,2] [3,0] -> [2,0,2,2]; [0,1] [0,3] [2,1] -> [2,2,1,1].
    const std::vector<std::vector<int64_t>> demand = {{1, 3, 1, 1}, {1, 1, 1, 3}, {2, 0, 2, 2}, {2, 2, 1, 1}};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(v.records[i].step, step_layer[i].first) << i;
      EXPECT_EQ(v.records[i].layer, step_layer[i].second) << i;
      EXPECT_EQ(v.records[i].num_tokens, 3) << i;
      EXPECT_EQ(v.per_batch[i].demand, demand[i]) << i;
      // The same decisions as moesim trace lines replay to the same loads, drops and cost.
      EXPECT_EQ(v.per_batch[i].load, x.per_batch[i].load) << i;
      EXPECT_EQ(v.per_batch[i].dropped, x.per_batch[i].dropped) << i;
      EXPECT_EQ(v.records[i].modeled_layer_s, x.records[i].modeled_layer_s) << i;
    }
    // Capacity 1: C = ceil(3 x 2 / 4) = 2 per expert, so batch 0 keeps 2 of expert 1's 3 and batch 1 2 of
    // expert 3's 3 (position order): 2 dropped of 24 assignments.
    int64_t dropped = 0;
    for (const BalanceMetrics& m : v.per_batch) dropped += m.dropped;
    EXPECT_EQ(dropped, std::string(capacity) == "1" ? 2 : 0);
  }
  const std::string cfg = "run --no-execute --format json --set workload.source=trace --set model.experts=4 "
                          "--set model.top_k=2 --set placement.kind=single --set workload.path=" + dir +
                          "/router_trace_rank0.jsonl";
  const auto score = testing::run_cli(cfg + " --set router.capacity_factor=1 --set router.drop_policy=score");
  EXPECT_EQ(score.exit_code, 2) << score.err;
  EXPECT_NE(score.err.find("router.drop_policy"), std::string::npos) << score.err;
  EXPECT_NE(score.err.find("no routing weights"), std::string::npos) << score.err;
  EXPECT_EQ(std::count(score.err.begin(), score.err.end(), '\n'), 1) << score.err;
  const auto k3 = testing::run_cli(cfg + " --set model.top_k=3");
  EXPECT_EQ(k3.exit_code, 2) << k3.err;
  EXPECT_NE(k3.err.find("model.top_k = 3"), std::string::npos) << k3.err;
  // It records no logits: naming strategies asks for re-routing, refused naming "logits" and the file.
  const std::string sets = cfg.substr(cfg.find(" --set "));
  const auto gating = testing::run_cli("compare --no-execute --gating all" + sets);
  EXPECT_EQ(gating.exit_code, 2) << gating.err;
  EXPECT_NE(gating.err.find("router_trace_rank0.jsonl: \"logits\""), std::string::npos) << gating.err;
  const auto vary = testing::run_cli("sweep --vary router.gating=token_choice,sinkhorn" + sets);
  EXPECT_EQ(vary.exit_code, 2) << vary.err;
  EXPECT_NE(vary.err.find("router_trace_rank0.jsonl: \"logits\""), std::string::npos) << vary.err;
  // Out through --dump-routing (weights 1/topk), back in as moesim's trace: the same report.
  const auto dumped = testing::run_cli(cfg + " --dump-routing " + dir + "/out.jsonl --out " + dir + "/a.json");
  ASSERT_EQ(dumped.exit_code, 0) << dumped.err;
  const auto again = testing::run_cli("run --no-execute --format json --set workload.source=trace --set model.experts=4 "
                                      "--set model.top_k=2 --set placement.kind=single --set workload.path=" + dir +
                                      "/out.jsonl --out " + dir + "/b.json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  nlohmann::json a = nlohmann::json::parse(testing::read_text(dir + "/a.json"));
  nlohmann::json b = nlohmann::json::parse(testing::read_text(dir + "/b.json"));
  EXPECT_EQ(a["strategies"], b["strategies"]);
}

}  // namespace
}  // namespace moesim
