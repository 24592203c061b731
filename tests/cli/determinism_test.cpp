// Determinism of the whole binary: identical inputs give byte-identical JSON at 1, 2 and 3 threads and
// on a repeated run, for every gating strategy (compare --gating all), with capacity drops, every drop
// policy, several batches (aux_free_bias state), the decoder workload, and `route` on a user's logits.
// --no-execute leaves the measured times out, so the whole report must match. The decoder's report is
// also the same under every OpenBLAS kernel (OPENBLAS_CORETYPE, set for the child processes), the
// executed layer's output digest the same at every thread count, and a baseline recorded at one thread
// passes at two. CTest runs this file under OPENBLAS_CORETYPE=Haswell, SkylakeX and unset (all but the
// test that sets the variable itself; tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace {

using testing::run_cli;

// Runs `args --threads T` for T = 1, 2, 3 and once more at 2; every output must equal the first.
void expect_same_json_at_every_thread_count(const std::string& args) {
  const auto first = run_cli(args + " --format json --threads 1");
  ASSERT_EQ(first.exit_code, 0) << args << "\n" << first.err;
  ASSERT_NO_THROW(nlohmann::json::parse(first.out)) << first.out;
  for (int threads : {2, 3, 2}) {
    const auto r = run_cli(args + " --format json --threads " + std::to_string(threads));
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    EXPECT_EQ(testing::without_provenance(r.out), testing::without_provenance(first.out))
        << args << " differs at --threads " << threads;
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
      " --set model.experts=12 --set model.top_k=3 --set placement.replicas=4 --vary router.capacity_factor=0.5,1.25"
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

// Sets OPENBLAS_CORETYPE for the child processes (unset for ""), restoring the old value at scope exit.
class ScopedCoretype {
 public:
  explicit ScopedCoretype(const std::string& kernel) {
    const char* old = std::getenv("OPENBLAS_CORETYPE");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (kernel.empty()) {
      unsetenv("OPENBLAS_CORETYPE");
    } else {
      setenv("OPENBLAS_CORETYPE", kernel.c_str(), 1);
    }
  }
  ~ScopedCoretype() {
    if (had_) {
      setenv("OPENBLAS_CORETYPE", old_.c_str(), 1);
    } else {
      unsetenv("OPENBLAS_CORETYPE");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

// OpenBLAS kernels this CPU can run: AVX2 (Haswell, Zen), AVX (Sandybridge), SSE only (Nehalem), the
// library's own choice (unset), and SkylakeX where the CPU has AVX-512.
std::vector<std::string> runnable_kernels() {
  std::vector<std::string> k = {"Haswell", "Zen", "Sandybridge", "Nehalem", ""};
  if (__builtin_cpu_supports("avx512f")) k.push_back("SkylakeX");
  return k;
}

// The decoder defines the workload: its report (hidden states, logits, routing, metrics, modeled
// times) must not depend on the BLAS kernel or the thread count, since it runs no BLAS at all.
TEST(Determinism, DecoderSameBytesOnEveryBlasKernel) {
  const std::string args = "run " MOESIM_SOURCE_DIR "/configs/mixtral-8x7b-decode.yaml --no-execute --format json"
                           " --set workload.decode_steps=6 --set workload.batch=24";
  std::string first;
  for (const std::string& kernel : runnable_kernels()) {
    const ScopedCoretype scoped(kernel);
    for (int threads : {1, 2, 3}) {
      const auto r = run_cli(args + " --threads " + std::to_string(threads));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      if (first.empty()) {
        first = testing::without_provenance(r.out);
        ASSERT_NE(first.find("final_hidden_digest"), std::string::npos) << first;
      } else {
        EXPECT_EQ(testing::without_provenance(r.out), first) << "OPENBLAS_CORETYPE=" << (kernel.empty() ? "(unset)" : kernel)
                                << " --threads " << threads;
      }
    }
  }
}

// The executed layer (OpenBLAS, timed) on awkward sizes, with a shared expert and an expert over one
// tile: the output digest is the same at 1, 2 and 3 threads for whichever kernel this process's
// environment selects (across kernels it may differ in the last bits; docs/design.md).
TEST(Determinism, ExecutedDigestSameAtEveryThreadCount) {
  const std::string args =
      "run --format json --repeats 1 --set workload.batch=777 --set execute.hidden=200 --set execute.ffn=300"
      " --set model.shared_experts=1 --set workload.skew=2";
  std::string first;
  for (int threads : {1, 2, 3}) {
    const auto r = run_cli(args + " --threads " + std::to_string(threads));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j["execute"].contains("output_digest")) << r.out;
    const std::string digest = j["execute"]["output_digest"];
    EXPECT_EQ(digest.rfind("fnv1a64:", 0), 0u) << digest;
    EXPECT_EQ(j["strategies"][0]["measured"]["output_digest"], digest);
    if (first.empty()) {
      first = digest;
    } else {
      EXPECT_EQ(digest, first) << "--threads " << threads;
    }
  }
}

// A regression gate must not flip with the core count: a baseline recorded at one thread passes at two
// and three compared exactly (rtol 0, atol 0).
TEST(Determinism, BaselineFromOneThreadPassesAtTwo) {
  const std::string dir = testing::make_temp_dir();
  const std::string baseline = dir + "/baseline.json";
  const std::string cfg = MOESIM_SOURCE_DIR "/configs/mixtral-8x7b-decode.yaml --set workload.decode_steps=6";
  const auto update = run_cli("check " + cfg + " --baseline " + baseline + " --update-baseline --threads 1");
  ASSERT_EQ(update.exit_code, 0) << update.out << update.err;
  for (int threads : {2, 3}) {
    const auto r = run_cli("check " + cfg + " --baseline " + baseline + " --rtol 0 --atol 0 --threads " +
                           std::to_string(threads));
    EXPECT_EQ(r.exit_code, 0) << "--threads " << threads << "\n" << r.out << r.err;
  }
}

}  // namespace
}  // namespace moesim
