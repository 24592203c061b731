// Determinism of the whole binary: identical inputs give byte-identical JSON at 1, 2 and 4 threads and
// on a repeated run, for every gating strategy (compare --gating all), with capacity drops, every drop
// policy, several batches (aux_free_bias state), the decoder workload, and `route` on a user's logits.
// --no-execute leaves the measured times out, so the whole report must match.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/run_cli.hpp"
#include "workload/logits_file.hpp"
#include "workload/synthetic_logits.hpp"

namespace moesim {
namespace {

using testing::run_cli;

// Runs `args --threads T` for T = 1, 2, 4 and once more at 2; every output must equal the first.
void expect_same_json_at_every_thread_count(const std::string& args) {
  const auto first = run_cli(args + " --format json --threads 1");
  ASSERT_EQ(first.exit_code, 0) << args << "\n" << first.err;
  ASSERT_NO_THROW(nlohmann::json::parse(first.out)) << first.out;
  for (int threads : {2, 4, 2}) {
    const auto r = run_cli(args + " --format json --threads " + std::to_string(threads));
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    EXPECT_EQ(r.out, first.out) << args << " differs at --threads " << threads;
  }
}

TEST(Determinism, CompareAllGatingsWithDrops) {
  // 64 experts in 8 groups, top-6, capacity factor 1 (drops), 3000 tokens: enough work per thread that
  // every parallel loop splits, and E not a multiple of the thread count's favourite sizes.
  expect_same_json_at_every_thread_count(
      "compare --gating all --no-execute --set workload.batch=3000 --set model.experts=64 --set model.top_k=6"
      " --set router.groups=8 --set router.topk_groups=4 --set router.capacity_factor=1.0");
}

TEST(Determinism, CompareDropPoliciesAndPriorities) {
  expect_same_json_at_every_thread_count(
      "compare --gating token_choice,noisy_top_k,sinkhorn --no-execute --set workload.batch=2000"
      " --set model.experts=12 --set model.top_k=3 --vary router.capacity_factor=0.5,1.25"
      " --vary router.drop_policy=position,score,random --vary router.priority=k_major,token_major");
}

TEST(Determinism, SeveralBatchesCarryRouterState) {
  expect_same_json_at_every_thread_count(
      "compare --gating aux_free_bias,group_limited,expert_choice --no-execute --set workload.batches=4"
      " --set workload.batch=1000 --set model.experts=16 --set model.top_k=4 --set router.groups=4"
      " --set router.topk_groups=2");
}

TEST(Determinism, DecoderWorkload) {
  expect_same_json_at_every_thread_count(
      "compare --gating all --no-execute --set workload.source=decoder --set workload.batch=4"
      " --set workload.prompt_len=24 --set workload.decode_steps=2 --set execute.hidden=64 --set execute.ffn=128"
      " --set execute.layers=2");
}

TEST(Determinism, RouteEveryGatingOnUserLogits) {
  const std::string dir = testing::make_temp_dir();
  const int64_t n = 4000;
  const int num_experts = 24;
  testing::write_text(dir + "/l.npy", encode_npy_f32(synthetic_logits(n, num_experts, 1.5, 11), n, num_experts));
  for (const char* gating : {"token_choice", "noisy_top_k", "expert_choice", "sinkhorn", "hash", "random", "balanced",
                             "group_limited", "aux_free_bias"}) {
    SCOPED_TRACE(gating);
    expect_same_json_at_every_thread_count("route --logits " + dir + "/l.npy --top-k 4 --capacity-factor 1.1 --gating " +
                                           gating);
  }
}

}  // namespace
}  // namespace moesim
