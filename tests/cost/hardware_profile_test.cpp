// Tests src/cost/hardware_profile: every shipped profile loads with a source note per figure, dense
// figures and units by hand, the critical batch of the founding argument, name/file/inline/base
// resolution, and ConfigError messages naming FILE:LINE and hardware.KEY. Host only.
#include "src/cost/hardware_profile.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "src/common/embedded.hpp"
#include "src/common/error.hpp"

namespace moesim {
namespace {

// The ConfigError message of parsing `text`, or "" when it parses.
std::string parse_error(const std::string& text, const std::string& source = "p.yaml") {
  try {
    parse_hardware_profile(text, source);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const char* kMinimal = "peak_tflops: {fp16: 10}\nmemory_bandwidth_gbs: 1000\nsm_count: 4\n";

HardwareProfile builtin(const std::string& name) { return load_hardware_profile(HardwareRef{name, ""}, "exp.yaml"); }

TEST(HardwareProfile, EveryShippedProfileLoadsWithSources) {
  const std::vector<std::string> names = builtin_hardware_names();
  for (const char* expected : {"a10", "a100-40gb", "a100-80gb", "b200", "h100-sxm", "h200", "l4", "mi300x", "t4",
                               "t4-founding"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected << " is not shipped";
  }
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const HardwareProfile hw = builtin(name);
    EXPECT_EQ(hw.name, name);
    EXPECT_FALSE(hw.source.empty());
    EXPECT_FALSE(hw.description.empty());
    EXPECT_GT(hw.memory_bandwidth_bytes_per_s, 0);
    EXPECT_GT(hw.memory_bytes, 0);
    EXPECT_GT(hw.sm_count, 0);
    EXPECT_GT(hw.link_bandwidth_bytes_per_s, 0);
    // Measured (cpu-local) or fitted to published tables (scripts/fit-profiles.sh): those GPUs have tables.
    const bool has_tables = name == "cpu-local" || name == "a100-40gb-pcie" || name == "a100-80gb" || name == "b200" ||
                            name == "h100-sxm" || name == "h20" || name == "h20-3e" || name == "h200";
    EXPECT_EQ(hw.calibrated, has_tables);
    // Every figure the file sets carries a note: its own key, or peak_tflops.DTYPE / peak_tflops.
    const YAML::Node root = YAML::Load(embedded_files().at("configs/hardware/" + name + ".yaml"));
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (key == "name" || key == "description" || key == "source" || key == "sources" || key == "calibrated") continue;
      if (key == "peak_tflops") {
        for (auto p = it->second.begin(); p != it->second.end(); ++p) {
          const std::string k = "peak_tflops." + p->first.Scalar();
          EXPECT_TRUE(hw.sources.count(k) || hw.sources.count("peak_tflops")) << k << " has no source";
        }
        continue;
      }
      EXPECT_TRUE(hw.sources.count(key)) << key << " has no source";
    }
  }
}

TEST(HardwareProfile, DenseFiguresAndUnitsByHand) {
  const HardwareProfile t4 = builtin("t4");
  EXPECT_DOUBLE_EQ(*t4.peak_fp16_flops_per_s, 65e12);
  EXPECT_DOUBLE_EQ(*t4.peak_fp32_flops_per_s, 8.1e12);
  EXPECT_DOUBLE_EQ(*t4.peak_int8_flops_per_s, 130e12);
  EXPECT_FALSE(t4.peak_bf16_flops_per_s.has_value());  // Turing has no bf16 tensor-core path
  EXPECT_FALSE(t4.peak_tf32_flops_per_s.has_value());
  EXPECT_FALSE(t4.peak_fp8_flops_per_s.has_value());
  EXPECT_DOUBLE_EQ(t4.memory_bandwidth_bytes_per_s, 320e9);
  EXPECT_DOUBLE_EQ(t4.memory_bytes, 16.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(t4.smem_per_sm_bytes, 64.0 * 1024);
  EXPECT_DOUBLE_EQ(t4.l2_bytes, 4.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(t4.launch_overhead_s, PooledFit::launch_overhead_us * 1e-6);  // no table: the pooled fit
  EXPECT_DOUBLE_EQ(t4.link_bandwidth_bytes_per_s, 15.75e9);
  EXPECT_EQ(t4.sm_count, 40);
  EXPECT_EQ(t4.tile_m, 128);
  EXPECT_EQ(t4.tile_n, 128);
  // Dense, never sparse: H100 fp16 989.4 (not 1,979), H200 fp8 1,978.9 (not 3,958).
  EXPECT_DOUBLE_EQ(*builtin("h100-sxm").peak_fp16_flops_per_s, 989.4e12);
  EXPECT_DOUBLE_EQ(*builtin("h200").peak_fp8_flops_per_s, 1978.9e12);
  EXPECT_DOUBLE_EQ(builtin("h200").memory_bandwidth_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(*builtin("b200").peak_bf16_flops_per_s, 2250e12);
  EXPECT_DOUBLE_EQ(builtin("a100-80gb").memory_bandwidth_bytes_per_s, 2039e9);
  EXPECT_DOUBLE_EQ(builtin("a100-40gb").memory_bandwidth_bytes_per_s, 1555e9);
  // docs/hardware.md's "(unverified)" marks travel into the notes.
  EXPECT_NE(builtin("a100-40gb").sources.at("l2_mib").find("(unverified)"), std::string::npos);
  EXPECT_NE(builtin("mi300x").sources.at("peak_tflops.fp16").find("(unverified)"), std::string::npos);
  EXPECT_NE(builtin("h100-sxm").sources.at("smem_per_sm_kib").find("(unverified)"), std::string::npos);
  EXPECT_NE(builtin("a10").sources.at("peak_tflops.bf16").find("(unverified)"), std::string::npos);
}

TEST(HardwareProfile, CriticalBatchOfTheFoundingArgument) {
  // t4-founding fp16: 65e12 * 2 / (2 * 300e9) = 216.67.
  EXPECT_NEAR(critical_batch(builtin("t4-founding"), Dtype::fp16), 216.6666666666667, 1e-9);
  // t4 fp16 at NVIDIA's 320 GB/s: 65e12 * 2 / (2 * 320e9) = 203.125 (docs/hardware.md's ridge 203).
  EXPECT_NEAR(critical_batch(builtin("t4"), Dtype::fp16), 203.125, 1e-9);
  // t4 fp32: 8.1e12 * 4 / (2 * 320e9) = 50.625.
  EXPECT_NEAR(critical_batch(builtin("t4"), Dtype::fp32), 50.625, 1e-9);
  // h100-sxm bf16: 989.4e12 * 2 / (2 * 3.35e12) = 295.34.
  EXPECT_NEAR(critical_batch(builtin("h100-sxm"), Dtype::bf16), 989.4e12 / 3.35e12, 1e-9);
  // No peak, no critical batch.
  EXPECT_EQ(critical_batch(builtin("t4"), Dtype::bf16), 0.0);
}

TEST(HardwareProfile, MissingDtypeNamesModelDtype) {
  const HardwareProfile t4 = builtin("t4");
  EXPECT_DOUBLE_EQ(require_peak_flops_per_s(t4, Dtype::fp16), 65e12);
  try {
    require_peak_flops_per_s(t4, Dtype::bf16);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.dtype"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fp32, fp16, int8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'bf16'"), std::string::npos) << msg;
  }
}

TEST(HardwareProfile, DefaultsForKeysLeftOut) {
  const HardwareProfile hw = parse_hardware_profile(kMinimal, "p.yaml");
  EXPECT_DOUBLE_EQ(*hw.peak_fp16_flops_per_s, 10e12);
  EXPECT_DOUBLE_EQ(hw.memory_bandwidth_bytes_per_s, 1e12);
  EXPECT_EQ(hw.tile_m, 128);
  // The kernel model's fitted figures: the pooled fit, with its note.
  EXPECT_DOUBLE_EQ(hw.launch_overhead_s, PooledFit::launch_overhead_us * 1e-6);
  EXPECT_DOUBLE_EQ(hw.efficiency_flops, PooledFit::efficiency_flops);
  EXPECT_DOUBLE_EQ(hw.efficiency_bw, PooledFit::efficiency_bw);
  EXPECT_DOUBLE_EQ(hw.k_step_s, PooledFit::k_step_us * 1e-6);
  EXPECT_EQ(hw.sources.at("k_step_us"), kPooledFitNote);
  EXPECT_DOUBLE_EQ(hw.link_bandwidth_bytes_per_s, 0.0);
  EXPECT_EQ(hw.devices_per_node, 0);
}

TEST(HardwareProfile, BadProfilesNameTheKey) {
  const std::string base = kMinimal;
  struct Case {
    std::string text, expect;
  };
  const Case cases[] = {
      {base + "warp_size: 32\n", "p.yaml:4: hardware.warp_size: expected a known key"},
      {"peak_tflops: {fp16: 10}\nmemory_bandwidth_gbs: -3\nsm_count: 4\n",
       "p.yaml:2: hardware.memory_bandwidth_gbs: expected a positive number, got '-3'"},
      {"peak_tflops: {fp16: 0}\nmemory_bandwidth_gbs: 1\nsm_count: 4\n",
       "p.yaml:1: hardware.peak_tflops.fp16: expected a positive number, got '0'"},
      {"peak_tflops: {fp4: 10}\nmemory_bandwidth_gbs: 1\nsm_count: 4\n", "hardware.peak_tflops.fp4: expected a dtype"},
      {"peak_tflops: {}\nmemory_bandwidth_gbs: 1\nsm_count: 4\n", "p.yaml:1: hardware.peak_tflops: expected a map"},
      {"peak_tflops: 10\nmemory_bandwidth_gbs: 1\nsm_count: 4\n", "hardware.peak_tflops: expected a map"},
      {"memory_bandwidth_gbs: 1\nsm_count: 4\n", "hardware.peak_tflops: expected a map of dense peaks"},
      {"peak_tflops: {fp16: 10}\nsm_count: 4\n", "hardware.memory_bandwidth_gbs: expected a positive number, got nothing"},
      {"peak_tflops: {fp16: 10}\nmemory_bandwidth_gbs: 1\n", "hardware.sm_count: expected a positive integer, got nothing"},
      {"peak_tflops: {fp16: 10}\nmemory_bandwidth_gbs: 1\nsm_count: 1.5\n",
       "p.yaml:3: hardware.sm_count: expected a positive integer, got '1.5'"},
      {base + "efficiency_flops: 1.5\n", "p.yaml:4: hardware.efficiency_flops: expected a number in (0, 1], got '1.5'"},
      {base + "efficiency_bw: 0\n", "hardware.efficiency_bw: expected a number in (0, 1]"},
      {base + "launch_overhead_us: -1\n", "hardware.launch_overhead_us: expected a number >= 0, got '-1'"},
      {base + "link_bandwidth_gbs: fast\n", "hardware.link_bandwidth_gbs: expected a positive number, got 'fast'"},
      {base + "tile_m: 0\n", "hardware.tile_m: expected a positive integer, got '0'"},
      {base + "memory_gib: .nan\n", "hardware.memory_gib: expected a positive number"},
      {base + "calibrated: maybe\n", "hardware.calibrated: expected true or false, got 'maybe'"},
      {base + "sources: {warp_size: x}\n", "hardware.sources.warp_size: expected a figure key"},
      {base + "sm_count: 8\n", "p.yaml:4: hardware.sm_count: expected each key once"},
      {base + "name: [a, b]\n", "hardware.name: expected a string, got a list"},
      {"- 1\n- 2\n", "p.yaml:1: hardware: expected a map of profile keys"},
      {"peak_tflops: {fp16: 10\n", "p.yaml:2: hardware: invalid YAML"},
      {base + "base: h100-sxm\n", ""},  // a base is fine in a file of its own
      {base + "base: h999\n", "hardware.base: expected a built-in profile"},
  };
  for (const Case& c : cases) {
    const std::string msg = parse_error(c.text);
    if (c.expect.empty()) {
      EXPECT_EQ(msg, "") << c.text;
    } else {
      EXPECT_NE(msg.find(c.expect), std::string::npos) << "profile:\n" << c.text << "message: " << msg;
    }
  }
}

TEST(HardwareProfile, InlineTableWithBase) {
  HardwareRef ref;
  ref.name.clear();
  ref.inline_yaml = "base: h100-sxm\nefficiency_flops: 0.5\npeak_tflops: {fp16: 900}\n";
  const HardwareProfile hw = load_hardware_profile(ref, "exp.yaml");
  EXPECT_EQ(hw.name, "h100-sxm");  // the base's name, unless the table sets one
  EXPECT_DOUBLE_EQ(hw.efficiency_flops, 0.5);
  EXPECT_DOUBLE_EQ(*hw.peak_fp16_flops_per_s, 900e12);
  EXPECT_DOUBLE_EQ(*hw.peak_bf16_flops_per_s, 989.4e12);  // kept from the base
  EXPECT_DOUBLE_EQ(hw.memory_bandwidth_bytes_per_s, 3.35e12);
  EXPECT_EQ(hw.sources.at("efficiency_flops"), "set in exp.yaml");
  EXPECT_EQ(hw.sources.at("peak_tflops.fp16"), "set in exp.yaml");
  EXPECT_NE(hw.sources.at("peak_tflops.bf16").find("glennklockwood"), std::string::npos);

  // Inline errors name the experiment file without a line (the table was re-emitted).
  ref.inline_yaml = "base: h100-sxm\ntile_m: -4\n";
  try {
    load_hardware_profile(ref, "exp.yaml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "exp.yaml: hardware.tile_m: expected a positive integer, got '-4'");
  }
  ref.inline_yaml = "peak_tflops: {fp16: 1}\nmemory_bandwidth_gbs: 2\nsm_count: 3\n";
  EXPECT_EQ(load_hardware_profile(ref, "exp.yaml").name, "inline");
}

TEST(HardwareProfile, LoadsFromAFileBesideTheExperiment) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("moesim_hw_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "mine.yaml") << "description: lab box\n" << kMinimal;
    std::ofstream(dir / "bad.yaml") << kMinimal << "tile_n: x\n";
  }
  const HardwareProfile by_path = load_hardware_profile(HardwareRef{(dir / "mine.yaml").string(), ""}, "x.yaml");
  EXPECT_EQ(by_path.name, "mine");  // the file stem when the file has no name
  EXPECT_EQ(by_path.description, "lab box");
  const std::string exp = (dir / "exp.yaml").string();
  EXPECT_EQ(load_hardware_profile(HardwareRef{"mine.yaml", ""}, exp).name, "mine");
  try {
    load_hardware_profile(HardwareRef{"bad.yaml", ""}, exp);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:4: hardware.tile_n"), std::string::npos) << e.what();
  }
  try {
    load_hardware_profile(HardwareRef{"h999", ""}, "exp.yaml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("exp.yaml: hardware: expected a built-in profile (a10,", 0), 0u) << msg;
    EXPECT_NE(msg.find("got 'h999'"), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// The digest follows every value the cost model reads and ignores the notes.
TEST(HardwareProfile, DigestFollowsValuesNotNotes) {
  const std::string base = "name: x\npeak_tflops: {fp16: 100}\nmemory_bandwidth_gbs: 1000\nsm_count: 10\n";
  const std::string d = hardware_digest(parse_hardware_profile(base, "a.yaml"));
  EXPECT_EQ(d.rfind("fnv1a64:", 0), 0u) << d;
  EXPECT_EQ(hardware_digest(parse_hardware_profile(base + "description: another note\nsource: somewhere\n", "b.yaml")), d);
  for (const std::string& change : {std::string("efficiency_bw: 0.9\n"), std::string("tile_m: 64\n"),
                                    std::string("launch_overhead_us: 5\n"), std::string("memory_compute_overlap: 0.5\n"),
                                    std::string("calibrated: true\n")})
    EXPECT_NE(hardware_digest(parse_hardware_profile(base + change, "c.yaml")), d) << change;
  EXPECT_NE(hardware_digest(parse_hardware_profile(
                "name: x\npeak_tflops: {fp16: 100, fp8: 200}\nmemory_bandwidth_gbs: 1000\nsm_count: 10\n", "d.yaml")),
            d);
}

}  // namespace
}  // namespace moesim
