// Tensor parallelism in the cost model (placement.tensor_parallel, src/cost/placement.hpp
// model_moe_layer): each expert's ffn split over T GPUs and the ring all-reduce of the partial outputs,
// by hand on one device and with expert parallelism; T 1 changes nothing; the config checks. Host only.
#include <gtest/gtest.h>

#include "tests/support/cost_support.hpp"

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/placement.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

// The toy accelerator of tests/support/cost_support.hpp (links 100 GB/s, 1 us latency).
HardwareProfile toy(const std::string& extra = "") { return test::toy_profile(extra); }

LayerCostInput layer(int64_t ffn, int tp, std::vector<int64_t> load, int64_t tokens) {
  LayerCostInput in;
  in.hidden = 64;
  in.ffn = ffn;
  in.num_experts = static_cast<int>(load.size());
  in.top_k = 2;
  in.format = Dtype::fp16;
  in.num_tokens = tokens;
  in.load = std::move(load);
  in.placement.tensor_parallel = tp;
  return in;
}

// One device, T = 2: the experts cost what (hidden 64, ffn 64) experts cost whole, plus the all-reduce
// of the 10 tokens' [10, 64] fp16 outputs: 2 (2 - 1) / 2 x 10 x 64 x 2 B = 1280 B over 100 GB/s =
// 12.8 ns, and 1 us of latency outside the ideal column.
TEST(TensorParallel, ShardedExpertsPlusTheRingAllReduceByHand) {
  const HardwareProfile hw = toy();
  const LayerCost tp2 = model_moe_layer(hw, layer(128, 2, {8, 6, 4, 2}, 10));
  const LayerCost half = model_moe_layer(hw, layer(64, 1, {8, 6, 4, 2}, 10));
  const double bw_s = 1280.0 / 100e9;
  EXPECT_NEAR(tp2.actual.ideal_s, half.actual.ideal_s + bw_s, 1e-18);
  EXPECT_NEAR(tp2.actual.quantized_s, half.actual.quantized_s + bw_s + 1e-6, 1e-18);
  EXPECT_NEAR(tp2.balanced.quantized_s, half.balanced.quantized_s + bw_s + 1e-6, 1e-18);
  EXPECT_NEAR(tp2.tensor_parallel_reduce_s, bw_s + 1e-6, 1e-18);
  // The erosion books the reduce as communication, and its parts still add up.
  const Erosion& x = tp2.erosion;
  EXPECT_NEAR(x.communication_s, bw_s + 1e-6, 1e-15);
  EXPECT_EQ(x.communication_imbalance_s, 0.0);  // one device: the same reduce balanced or not
  EXPECT_NEAR(x.reference_s + x.idle_saving_s + x.imbalance_s + x.imbalance_tiles_s + x.tile_phase_s + x.padding_s +
                  x.quantization_s + x.communication_s,
              x.actual_s, 1e-12 * x.actual_s);
  // T = 4: a ring moves 2 x 3 / 4 of the outputs.
  const LayerCost tp4 = model_moe_layer(hw, layer(128, 4, {8, 6, 4, 2}, 10));
  const LayerCost quarter = model_moe_layer(hw, layer(32, 1, {8, 6, 4, 2}, 10));
  EXPECT_NEAR(tp4.actual.ideal_s, quarter.actual.ideal_s + 1.5 * 10 * 64 * 2 / 100e9, 1e-18);
}

TEST(TensorParallel, OneGpuChangesNothing) {
  const HardwareProfile hw = toy();
  LayerCostInput in = layer(128, 1, {8, 6, 4, 2}, 10);
  const LayerCost a = model_moe_layer(hw, in);
  in.placement.tensor_parallel = 0;  // not a config value, but the model treats it as 1
  const LayerCost b = model_moe_layer(hw, in);
  EXPECT_EQ(a.actual.quantized_s, b.actual.quantized_s);
  EXPECT_EQ(a.tensor_parallel_reduce_s, 0.0);
}

// Expert parallel over 2 devices (round robin), each a group of T = 2 GPUs: the device kernels run the
// halved experts, and the reduce is that of the device with the most rows (8 + 4 = 12 on device 0).
TEST(TensorParallel, CombinesWithExpertParallelism) {
  const HardwareProfile hw = toy();
  LayerCostInput in = layer(128, 2, {8, 6, 4, 2}, 10);
  in.placement.kind = PlacementKind::expert_parallel;
  in.placement.policy = PlacementPolicy::round_robin;
  in.placement.devices = 2;
  in.placement.a2a_kernel = A2aKernel::simple;
  LayerCostInput half = in;
  half.ffn = 64;
  half.placement.tensor_parallel = 1;
  const LayerCost c = model_moe_layer(hw, in), h = model_moe_layer(hw, half);
  EXPECT_EQ(c.device_tokens, (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(c.device_time_s, h.device_time_s);
  const double reduce_s = 2.0 * 1 / 2 * 12 * 64 * 2 / 100e9 + 1e-6;
  EXPECT_NEAR(c.tensor_parallel_reduce_s, reduce_s, 1e-18);
  EXPECT_NEAR(c.actual.quantized_s, h.actual.quantized_s + reduce_s, 1e-15);
}

TEST(TensorParallel, NoLinkIsAConfigError) {
  const HardwareProfile hw = parse_hardware_profile(
      "name: nolink\npeak_tflops: {fp16: 10}\nmemory_bandwidth_gbs: 1000\nsm_count: 4\n", "nolink.yaml");
  try {
    model_moe_layer(hw, layer(128, 2, {8, 6, 4, 2}, 10));
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hardware.link_bandwidth_gbs"), std::string::npos) << e.what();
  }
}

TEST(TensorParallelCli, ActsOnTheModeledTimeAndIsChecked) {
  const std::string base = "run --no-execute --format json --set workload.batches=1";
  const auto one = testing::run_cli(base);
  const auto two = testing::run_cli(base + " --set placement.tensor_parallel=2");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(testing::without_provenance(one.out), testing::without_provenance(two.out));
  EXPECT_NE(two.out.find("\"tensor_parallel_reduce_s\""), std::string::npos);
  const auto bad = testing::run_cli("run --no-execute --set placement.tensor_parallel=3");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("placement.tensor_parallel: expected a divisor of model.ffn"), std::string::npos) << bad.err;
  const auto zero = testing::run_cli("run --no-execute --set placement.tensor_parallel=0");
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
  const auto config = testing::run_cli("config --set placement.tensor_parallel=2");
  ASSERT_EQ(config.exit_code, 0) << config.err;
  EXPECT_NE(config.out.find("tensor_parallel: 2"), std::string::npos) << config.out;
}

}  // namespace
}  // namespace moesim
