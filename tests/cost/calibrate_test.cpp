// Tests src/cost/calibrate and `moesim calibrate`: the profile text of a given result loads back with
// every figure (exact up to the printed digits) and a source note per key; memory_compute_overlap
// combines the kernel model's terms (hand-worked); a quick calibration of this
// machine writes, atomically, a profile that loads, is marked calibrated, and whose efficiencies are
// in (0, 1]; the shipped cpu-local profile loads. Measured values are machine-dependent and only
// range-checked. Host only; the quick mode keeps the run to about a second.
#include "src/cost/calibrate.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <utility>
#include <vector>

#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/roofline.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

CalibrationResult sample_result() {
  CalibrationResult r;
  r.cpu_model = "Test CPU \"quoted\" name";
  r.blas = "OpenBLAS test";
  r.threads = 4;
  r.machine = {"Test CPU \"quoted\" name", 8, "Haswell", 4};
  r.simd_fp32_lanes = 8;
  r.memory_bytes = 16.0 * (1 << 30);
  r.llc_bytes = 32.0 * (1 << 20);
  r.copy_bytes = 256.0 * (1 << 20);
  r.copy_bandwidth_bytes_per_s = 20e9;
  r.stream_bandwidth_bytes_per_s = 15e9;
  r.gemm = {{1, 1024, 1024, 1e-4, 2.097152e10}, {256, 1024, 1024, 2e-3, 2.68435456e11}};
  r.peak_fp32_flops_per_s = 2.68435456e11;
  r.efficiency_flops = 0.8;
  r.efficiency_bw = 0.75;
  r.launch_overhead_s = 2.5e-6;
  r.memory_compute_overlap = 0.25;
  r.seconds = 12;
  return r;
}

TEST(Calibrate, ProfileTextLoadsWithEveryFigure) {
  const std::string yaml = calibration_profile_yaml(sample_result(), "cpu-test", "measured on a quiet test box");
  const HardwareProfile hw = parse_hardware_profile(yaml, "cpu-test.yaml");
  EXPECT_EQ(hw.name, "cpu-test");
  EXPECT_NE(hw.source.find("; measured on a quiet test box"), std::string::npos) << hw.source;
  EXPECT_NE(hw.description.find("Test CPU \"quoted\" name"), std::string::npos);
  ASSERT_TRUE(hw.peak_fp32_flops_per_s.has_value());
  // Printed with 5 significant digits: 0.26844 TFLOP/s.
  EXPECT_NEAR(*hw.peak_fp32_flops_per_s, 2.68435456e11, 1e-4 * 2.68435456e11);
  EXPECT_FALSE(hw.peak_fp16_flops_per_s.has_value());  // the CPU backend runs fp32 only
  EXPECT_DOUBLE_EQ(hw.memory_bandwidth_bytes_per_s, 20e9);
  EXPECT_DOUBLE_EQ(hw.link_bandwidth_bytes_per_s, 10e9);  // memcpy payload: half of read + written
  EXPECT_EQ(hw.sm_count, 4);
  EXPECT_EQ(hw.tile_m, 1);
  EXPECT_EQ(hw.tile_n, 8);
  EXPECT_DOUBLE_EQ(hw.l2_bytes, 32.0 * (1 << 20));
  EXPECT_NEAR(hw.launch_overhead_s, 2.5e-6, 1e-15);
  EXPECT_DOUBLE_EQ(hw.efficiency_flops, 0.8);
  EXPECT_DOUBLE_EQ(hw.efficiency_bw, 0.75);
  EXPECT_DOUBLE_EQ(hw.memory_compute_overlap, 0.25);
  EXPECT_TRUE(hw.calibrated);
  ASSERT_TRUE(hw.machine);
  EXPECT_EQ(*hw.machine, (MachineSignature{"Test CPU \"quoted\" name", 8, "Haswell", 4}));
  // A source note for every figure the file sets (the machine signature is not a figure).
  const YAML::Node root = YAML::Load(yaml);
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (key == "name" || key == "description" || key == "source" || key == "sources" || key == "machine") continue;
    if (key == "peak_tflops") {
      EXPECT_TRUE(hw.sources.count("peak_tflops.fp32")) << key;
    } else {
      EXPECT_TRUE(hw.sources.count(key)) << key;
    }
  }
  // The per-shape GEMM table travels as comments.
  EXPECT_NE(yaml.find("#        1    1024    1024       20.97"), std::string::npos) << yaml;
}

// memory_compute_overlap combines the kernel model's terms: 1 (the default) is the roofline's max, 0 their
// sum, values between hide that fraction of the shorter term. Hand-worked on a toy profile (efficiencies 1,
// no launch): 64 x 128 fp32 expert, one row: memory (98304 + (3 x 64 + 6 x 128) x 4) B / 1e10 B/s =
// 10.2144 us, compute 2 x 3 x 64 x 128 FLOPs in whole waves of 1 x 16 tiles over 2 cores at 1e10 FLOP/s
// = 4.9152 us.
TEST(Calibrate, OverlapCombinesMemoryAndCompute) {
  const std::string base =
      "name: toy\npeak_tflops: {fp32: 0.01}\nmemory_bandwidth_gbs: 10\nsm_count: 2\ntile_m: 1\ntile_n: 16\n"
      "launch_overhead_us: 0\nefficiency_bw: 1\nefficiency_flops: 1\n";
  const double mem = 10.2144e-6, compute = 4.9152e-6;
  // Exact sums of a few doubles: 1e-12 relative.
  for (const auto& [overlap, expected] : std::vector<std::pair<std::string, double>>{
           {"", mem}, {"1", mem}, {"0", mem + compute}, {"0.25", mem + 0.75 * compute}}) {
    const HardwareProfile hw =
        parse_hardware_profile(base + (overlap.empty() ? "" : "memory_compute_overlap: " + overlap + "\n"), "toy.yaml");
    const ExpertRoofline m(hw, 64, 128, Dtype::fp32);
    const CostBreakdown c = expert_time(m, 1);
    EXPECT_NEAR(c.quantized_s, expected, 1e-12 * expected) << "overlap '" << overlap << "'";
    EXPECT_NEAR(c.ideal_s, mem, 1e-12 * mem) << "the ideal column stays a roofline";
  }
  EXPECT_THROW(parse_hardware_profile(base + "memory_compute_overlap: 1.5\n", "toy.yaml"), ConfigError);
  EXPECT_THROW(parse_hardware_profile(base + "memory_compute_overlap: -0.1\n", "toy.yaml"), ConfigError);
}

TEST(Calibrate, QuickRunWritesALoadableProfile) {
  const std::string dir = testing::make_temp_dir();
  const std::string out = dir + "/cpu.yaml";
  const auto r = testing::run_cli("calibrate --quick --force --name cpu-quick --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("copy bandwidth"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + out), std::string::npos) << r.out;
  const HardwareProfile hw = parse_hardware_profile(testing::read_text(out), out);
  EXPECT_EQ(hw.name, "cpu-quick");
  EXPECT_TRUE(hw.calibrated);
  EXPECT_GT(*hw.peak_fp32_flops_per_s, 1e8);          // any CPU does 0.1 GFLOP/s
  EXPECT_GT(hw.memory_bandwidth_bytes_per_s, 1e8);    // and copies 0.1 GB/s
  EXPECT_GT(hw.sm_count, 0);
  EXPECT_GT(hw.efficiency_flops, 0.0);
  EXPECT_LE(hw.efficiency_flops, 1.0);
  EXPECT_GT(hw.efficiency_bw, 0.0);
  EXPECT_LE(hw.efficiency_bw, 1.0);
  EXPECT_GE(hw.memory_compute_overlap, 0.0);
  EXPECT_LE(hw.memory_compute_overlap, 1.0);
  EXPECT_GE(hw.launch_overhead_s, 0.0);
  // Without --out the profile goes to stdout and loads as it stands.
  const auto s = testing::run_cli("calibrate --quick --force");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(parse_hardware_profile(s.out, "stdout").name, "cpu-local");
}

// A calibrated profile records the machine it was measured on, and it is this one.
TEST(Calibrate, ProfileRecordsThisMachine) {
  const auto s = testing::run_cli("calibrate --quick --force --threads 1");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const HardwareProfile hw = parse_hardware_profile(s.out, "stdout");
  ASSERT_TRUE(hw.machine.has_value());
  EXPECT_EQ(*hw.machine, this_machine(1));
  EXPECT_EQ(hw.machine->threads, 1);
  EXPECT_FALSE(hw.machine->cpu_model.empty());
  EXPECT_GE(hw.machine->cores, 1);
  // The signature is not a figure the model reads: the digest ignores it.
  HardwareProfile other = hw;
  other.machine->cpu_model = "another CPU";
  EXPECT_EQ(hardware_digest(hw), hardware_digest(other));
}

TEST(Calibrate, MachineKeyIsValidated) {
  const std::string base = "name: x\npeak_tflops: {fp32: 1}\nmemory_bandwidth_gbs: 10\nsm_count: 2\n";
  const HardwareProfile hw = parse_hardware_profile(
      base + "machine: {cpu_model: \"Z\", cores: 4, blas_core: \"Haswell\", threads: 2}\n", "m.yaml");
  ASSERT_TRUE(hw.machine);
  EXPECT_EQ(describe(*hw.machine), "Z, 4 cores, BLAS core Haswell, 2 threads");
  for (const char* bad : {"machine: {cpu_model: Z, cores: 4, blas_core: H}\n",
                          "machine: {cpu_model: Z, cores: 0, blas_core: H, threads: 1}\n",
                          "machine: {cpu_model: Z, cores: 4, blas_core: H, threads: 1, x: 1}\n", "machine: 3\n"}) {
    try {
      parse_hardware_profile(base + bad, "m.yaml");
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("m.yaml:5: hardware.machine"), std::string::npos) << e.what();
    }
  }
}

// The refusal rule on figures worked out by hand: each condition alone makes a problem.
TEST(Calibrate, ImplausibleOrLoadedCalibrationsAreProblems) {
  CalibrationResult r;
  r.threads = 2;
  r.machine.cores = 2;
  r.simd_fp32_lanes = 16;
  r.peak_fp32_flops_per_s = 200e9;
  r.copy_bandwidth_bytes_per_s = 20e9;
  r.efficiency_flops = 0.7;
  r.efficiency_bw = 0.8;
  r.load_before = 0.5;
  EXPECT_EQ(calibration_problem(r), "");
  CalibrationResult loaded = r;
  loaded.load_before = 3.5;  // above cores + 1
  EXPECT_NE(calibration_problem(loaded).find("heavy load"), std::string::npos);
  loaded.load_before = 3.0;  // at the limit: allowed
  EXPECT_EQ(calibration_problem(loaded), "");
  CalibrationResult slow = r;
  slow.peak_fp32_flops_per_s = 9.6e9;  // the busy `--quick` run's 0.0096 TFLOP/s: under 16 x 2 x 0.5
  EXPECT_NE(calibration_problem(slow).find("below 0.5 GFLOP/s per SIMD lane"), std::string::npos);
  CalibrationResult copy = r;
  copy.copy_bandwidth_bytes_per_s = 0.5e9;
  EXPECT_NE(calibration_problem(copy).find("copy bandwidth"), std::string::npos);
  CalibrationResult eff = r;
  eff.efficiency_bw = 0.01;
  EXPECT_NE(calibration_problem(eff).find("efficiency"), std::string::npos);
}

TEST(Calibrate, BadArgumentsExitTwoAndLeaveNoFile) {
  const std::string dir = testing::make_temp_dir();
  const auto r = testing::run_cli("calibrate --quick --name 'a b' --out " + dir + "/x.yaml");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(testing::read_text(dir + "/x.yaml").empty());
  EXPECT_EQ(testing::run_cli("calibrate --bogus").exit_code, 2);
  EXPECT_EQ(testing::run_cli("calibrate --quick --out /nonexistent-dir/x.yaml").exit_code, 2);
}

TEST(Calibrate, ShippedCpuLocalLoads) {
  const HardwareProfile hw = load_hardware_profile(HardwareRef{"cpu-local", ""}, "test");
  EXPECT_EQ(hw.name, "cpu-local");
  EXPECT_TRUE(hw.calibrated);
  EXPECT_EQ(hw.tile_m, 1);
  EXPECT_TRUE(hw.peak_fp32_flops_per_s.has_value());
  EXPECT_GT(critical_batch(hw, Dtype::fp32), 0.0);
}

// ---- a GPU: the fit on timings made from known efficiencies (no device needed) ----------------------

// 1000 SMs of 16 x 16 tiles at 1 PFLOP/s and 5 TB/s: one wave of tiles takes a few us against 5 us of
// weights, so small batches are memory bound in the kernel model too, and each sample's time is the
// roofline term of its regime over the efficiency that made it.
const char* kToyGpu =
    "name: toy-gpu\ndescription: a test GPU\npeak_tflops: {bf16: 1000}\nmemory_bandwidth_gbs: 5000\n"
    "sm_count: 1000\ntile_m: 16\ntile_n: 16\nlaunch_overhead_us: 4\nefficiency_bw: 1\nefficiency_flops: 1\nk_step_us: 0\n";

DeviceMeasurements toy_measurements(double eff_flops, double eff_bw, double launch_s, double overlap) {
  HardwareProfile truth = parse_hardware_profile(kToyGpu, "toy.yaml");
  truth.efficiency_flops = eff_flops;
  truth.efficiency_bw = eff_bw;
  truth.launch_overhead_s = launch_s;
  truth.memory_compute_overlap = overlap;
  const ExpertRoofline rm(truth, 1024, 4096, Dtype::bf16);
  DeviceMeasurements m;
  m.device = "Toy GPU (sm_00)";
  m.dtype = Dtype::bf16;
  m.hidden = 1024;
  m.ffn = 4096;
  m.copy_bandwidth_bytes_per_s = 1.8e12;
  m.launch_overhead_s = launch_s;
  // Far below and far above the knee (compute_bound_from), where one term dwarfs the other.
  const int64_t knee = rm.compute_bound_from;
  for (int64_t n : {int64_t{1}, int64_t{2}, knee / 64, knee / 16, knee * 32, knee * 64, knee * 128}) {
    m.expert.push_back({n, expert_time(rm, n).quantized_s});
  }
  return m;
}

TEST(Calibrate, DeviceFitRecoversTheEfficienciesThatMadeTheTimings) {
  const HardwareProfile datasheet = parse_hardware_profile(kToyGpu, "toy.yaml");
  // The knee of this shape at the datasheet figures: 2P / F per row against W / BW (A(n) small).
  const ExpertRoofline rm(datasheet, 1024, 4096, Dtype::bf16);
  const double w = 3.0 * 1024 * 4096 * 2, flops_row = 2.0 * 3 * 1024 * 4096, act_row = (3.0 * 1024 + 6.0 * 4096) * 2;
  EXPECT_NEAR(static_cast<double>(rm.compute_bound_from), w / 5e12 / (flops_row / 1000e12 - act_row / 5e12), 1.0);
  const DeviceFit fit = fit_device(toy_measurements(0.55, 0.8, 6e-6, 1.0), datasheet);
  EXPECT_EQ(fit.bw_samples, 4);
  EXPECT_EQ(fit.flops_samples, 3);
  EXPECT_NEAR(fit.efficiency_bw, 0.8, 0.01);
  EXPECT_NEAR(fit.efficiency_flops, 0.55, 0.01);
  for (const DeviceFit::Row& r : fit.rows) EXPECT_NEAR(r.fitted_s, r.measured_s, 0.02 * r.measured_s) << r.rows;
}

TEST(Calibrate, DeviceProfileKeepsTheDatasheetAndLoads) {
  const std::string yaml = device_profile_yaml(toy_measurements(0.5, 0.9, 5e-6, 1.0), kToyGpu, "toy-measured", "rack 3");
  const HardwareProfile hw = parse_hardware_profile(yaml, "out.yaml");
  EXPECT_EQ(hw.name, "toy-measured");
  EXPECT_TRUE(hw.calibrated);
  EXPECT_NEAR(hw.efficiency_flops, 0.5, 0.01);
  EXPECT_NEAR(hw.efficiency_bw, 0.9, 0.01);
  EXPECT_NEAR(hw.launch_overhead_s, 5e-6, 1e-9);
  EXPECT_DOUBLE_EQ(*hw.peak_bf16_flops_per_s, 1000e12);  // the datasheet's figures stay
  EXPECT_DOUBLE_EQ(hw.memory_bandwidth_bytes_per_s, 5e12);
  EXPECT_EQ(hw.sm_count, 1000);
  EXPECT_NE(hw.sources.at("efficiency_flops").find("rack 3"), std::string::npos);
  EXPECT_NE(yaml.find("# Device-to-device copy: 1800 GB/s"), std::string::npos) << yaml;
  // Only the two smallest batches: two efficiencies from two points that both terms could explain; the fit
  // still reproduces them.
  DeviceMeasurements small = toy_measurements(0.5, 0.9, 5e-6, 1.0);
  small.expert.resize(2);
  const DeviceFit few = fit_device(small, parse_hardware_profile(kToyGpu, "toy.yaml"));
  for (const DeviceFit::Row& r : few.rows) EXPECT_NEAR(r.fitted_s, r.measured_s, 0.01 * r.measured_s) << r.rows;
  // No timing at all: the datasheet's efficiencies, said so.
  small.expert.clear();
  const HardwareProfile none = parse_hardware_profile(device_profile_yaml(small, kToyGpu, "t", ""), "s.yaml");
  EXPECT_EQ(none.efficiency_flops, 1.0);
  EXPECT_EQ(none.efficiency_bw, 1.0);
  EXPECT_NE(none.sources.at("efficiency_flops").find("no expert timing bound by compute"), std::string::npos);
}

TEST(Calibrate, CudaBackendWithoutADeviceIsExitThree) {
  const auto r = testing::run_cli("calibrate --backend cuda --base h200 --quick");
  if (r.exit_code == 0) GTEST_SKIP() << "a CUDA device is present: tests/gpu measures it";
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("--backend cuda"), std::string::npos) << r.err;
  EXPECT_EQ(testing::run_cli("calibrate --backend cuda").exit_code, 2);            // no --base
  EXPECT_EQ(testing::run_cli("calibrate --backend cuda --base nope").exit_code, 2);  // unknown base
  EXPECT_EQ(testing::run_cli("calibrate --backend tpu").exit_code, 2);
  EXPECT_EQ(testing::run_cli("calibrate --base h200").exit_code, 2);                // base without cuda
}

}  // namespace
}  // namespace moesim
