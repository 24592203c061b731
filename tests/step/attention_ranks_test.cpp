// Tests src/step/attention_ranks: a 2-rank step with uneven requests worked by hand (the spread, the
// barrier on the slowest rank, the balance ratio and the wait), the KV-token balancer against round robin,
// and the decoder's attention through run: one device is the old single-device figure. Host only.
#include "src/step/attention_ranks.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

HardwareProfile toy() {
  // 1 TB/s, 100 TFLOP/s bf16, no launch: attention decode time is its bytes over the bandwidth.
  HardwareProfile hw;
  hw.name = "toy";
  hw.memory_bandwidth_bytes_per_s = 1e12;
  hw.peak_bf16_flops_per_s = 1e14;
  hw.sm_count = 4;
  hw.launch_overhead_s = 0;
  hw.k_step_s = 0;
  hw.efficiency_bw = hw.efficiency_flops = 1;
  return hw;
}

StepSequence decode_seq(int64_t context) { return {context, 1, context}; }

TEST(AttentionRanks, TwoRanksWithUnevenRequestsByHand) {
  // Contexts 100, 300, 100, 100 over 2 ranks. Round robin: rank 0 takes sequences 0 and 2 (200 KV tokens),
  // rank 1 sequences 1 and 3 (400). By KV tokens: 0 -> rank 0 (both empty, the lower), 1 -> rank 1 (0 < 100),
  // 2 -> rank 0 (100 < 300), 3 -> rank 0 (200 < 300): 300 and 300.
  const std::vector<StepSequence> seqs = {decode_seq(100), decode_seq(300), decode_seq(100), decode_seq(100)};
  const std::vector<RankShare> rr = spread_requests(seqs, 2, RequestBalance::round_robin);
  ASSERT_EQ(rr.size(), 2u);
  EXPECT_EQ(rr[0].sequences, 2);
  EXPECT_EQ(rr[0].context_tokens, 200);
  EXPECT_EQ(rr[1].context_tokens, 400);
  const std::vector<RankShare> kv = spread_requests(seqs, 2, RequestBalance::kv_tokens);
  EXPECT_EQ(kv[0].sequences, 3);
  EXPECT_EQ(kv[0].context_tokens, 300);
  EXPECT_EQ(kv[1].sequences, 1);
  EXPECT_EQ(kv[1].context_tokens, 300);

  // The barrier: the layer pays the slowest rank; the ratio is mean over max KV tokens, 300 / 400 = 0.75; the
  // wait is the slowest rank's time over the ranks' mean.
  AttentionShape a;
  a.hidden = 256;
  a.heads = 4;
  a.kv_heads = 4;
  a.head_dim = 64;
  const HardwareProfile hw = toy();
  const RankAttention r = attention_over_ranks(hw, a, rr, true);
  const double t0 = attention_decode_time(hw, a, 2, 200).quantized_s, t1 = attention_decode_time(hw, a, 2, 400).quantized_s;
  ASSERT_GT(t1, t0);  // more KV to read
  EXPECT_DOUBLE_EQ(r.slowest.quantized_s, t1);
  EXPECT_DOUBLE_EQ(r.mean_s, (t0 + t1) / 2);
  EXPECT_DOUBLE_EQ(r.wait_s, t1 - (t0 + t1) / 2);
  EXPECT_DOUBLE_EQ(r.balance_ratio, 0.75);
  // Balanced by KV tokens the two ranks read the same KV, one holding one sequence more: no KV wait left.
  const RankAttention b = attention_over_ranks(hw, a, kv, true);
  EXPECT_DOUBLE_EQ(b.balance_ratio, 1.0);
  EXPECT_LT(b.slowest.quantized_s, r.slowest.quantized_s);
}

TEST(AttentionRanks, IdleRanksAndOneRank) {
  // One sequence over 3 ranks: two ranks idle (no attention), the ratio (100 / 3) / 100.
  AttentionShape a;
  a.hidden = 64;
  a.heads = 2;
  a.kv_heads = 2;
  a.head_dim = 32;
  const RankAttention r = attention_over_ranks(toy(), a, spread_requests({decode_seq(100)}, 3, RequestBalance::round_robin), true);
  EXPECT_EQ(r.rank_s[1], 0.0);
  EXPECT_EQ(r.rank_s[2], 0.0);
  EXPECT_NEAR(r.balance_ratio, 1.0 / 3.0, 1e-15);
  // One rank is the plain attention of the whole step.
  const RankAttention one =
      attention_over_ranks(toy(), a, spread_requests({decode_seq(100), decode_seq(50)}, 1, RequestBalance::kv_tokens), true);
  EXPECT_DOUBLE_EQ(one.slowest.quantized_s, attention_decode_time(toy(), a, 2, 150).quantized_s);
  EXPECT_EQ(one.wait_s, 0.0);
  EXPECT_THROW(spread_requests({}, 0, RequestBalance::round_robin), PreconditionError);
}

TEST(AttentionRanks, DecoderRunReportsTheRanksBalance) {
  // 12 sequences of 2..30 prompt tokens over 8 devices: the JSON's records and phases carry the balance and the
  // wait; by KV tokens the decode phase's wait is no larger than round robin's.
  const std::string cmd =
      "run --no-execute --format json --records --set workload.source=decoder --set workload.batch=12 "
      "--set workload.prompt_len=2..30 --set workload.decode_steps=2";
  const auto rr = testing::run_cli(cmd);
  const auto kv = testing::run_cli(cmd + " --set placement.request_balance=kv_tokens");
  ASSERT_EQ(rr.exit_code, 0) << rr.err;
  ASSERT_EQ(kv.exit_code, 0) << kv.err;
  const nlohmann::json a = nlohmann::json::parse(rr.out)["strategies"][0], b = nlohmann::json::parse(kv.out)["strategies"][0];
  const double ratio = a["phases"]["decode"]["attention_balance_ratio"].get<double>();
  EXPECT_GT(ratio, 0.0);
  EXPECT_LT(ratio, 1.0);
  EXPECT_GE(a["phases"]["decode"]["modeled_attention_wait_s"].get<double>(), 0.0);
  EXPECT_GE(b["phases"]["decode"]["attention_balance_ratio"].get<double>(), ratio);
  EXPECT_LE(b["phases"]["decode"]["modeled_attention_wait_s"].get<double>(),
            a["phases"]["decode"]["modeled_attention_wait_s"].get<double>());
  EXPECT_TRUE(a["records"][0]["modeled"].contains("attention_balance_ratio"));
}

TEST(AttentionRanks, AttentionTpSplitsTheHeadsOverFewerRanks) {
  // 8 sequences of 16 prompt tokens, one decode step, on the built-in 8 devices. placement.attention_tp 2: 4 ranks
  // of 2 GPUs, each rank 2 sequences of 17 KV tokens, each GPU half the heads (and half the KV heads).
  const std::string cmd =
      "run --no-execute --format json --records --set workload.source=decoder --set workload.batch=8 "
      "--set workload.prompt_len=16 --set workload.decode_steps=1 --set placement.attention_tp=2";
  const auto r = testing::run_cli(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Experiment e = default_experiment({"placement.attention_tp=2"});
  const HardwareProfile hw = load_hardware_profile(e.hardware, "");
  AttentionShape half;
  half.hidden = e.model.hidden;
  half.heads = e.model.heads / 2;
  half.kv_heads = std::max(1, e.model.kv_heads / 2);
  half.head_dim = e.model.head_dim;
  half.dtype = e.model.dtype;
  const nlohmann::json records = nlohmann::json::parse(r.out)["strategies"][0]["records"];
  const nlohmann::json& decode = records.back();
  ASSERT_EQ(decode["phase"], "decode");
  EXPECT_DOUBLE_EQ(decode["modeled"]["attention"]["quantized_s"].get<double>(),
                   attention_decode_time(hw, half, 2, 2 * 17).quantized_s);
  EXPECT_EQ(decode["modeled"]["attention_balance_ratio"].get<double>(), 1.0);
  // Refused where it does not divide the devices or the heads, naming the key.
  const auto bad = testing::run_cli("run --no-execute --set placement.attention_tp=3");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("placement.attention_tp: expected a divisor of model.heads"), std::string::npos) << bad.err;
  const auto devices = testing::run_cli("run --no-execute --set placement.attention_tp=16 --set placement.devices=4");
  EXPECT_EQ(devices.exit_code, 2);
  EXPECT_NE(devices.err.find("expected a divisor of placement.devices (4)"), std::string::npos) << devices.err;
}

}  // namespace
}  // namespace moesim
