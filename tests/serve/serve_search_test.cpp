// Tests src/serve/serve_search: the steady state's cycle worked by hand (a cycle of osl steps when the budget holds
// every prompt, a longer one when it does not, a shorter one with draft tokens; the KV fit), the front of tokens/s a GPU against tokens/s a user and
// the best layouts under targets on hand-made points, and `moesim serve --search` end to end. Host only.
#include "src/serve/serve_search.hpp"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/sweep/published_serve.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

ServingStepInput deepseek_on_16() {
  Experiment e = load_experiment_file(std::string(MOESIM_SOURCE_DIR) + "/configs/deepseek-v3.yaml", {});
  e.placement.devices = 16;
  e.placement.replicas = 0;
  const HardwareProfile hw = load_hardware_profile(e.hardware, e.source_file);
  ServeSetup s;
  s.limits.max_batch = 64;
  s.limits.max_num_tokens = 1024;
  return serve_input_for(e, hw, s, {}).input.step;
}

TEST(ServeSearch, ACycleOfOslStepsWhenTheBudgetHoldsEveryPrompt) {
  const ServingStepInput step = deepseek_on_16();
  // 4 requests a rank of 8 + 4 tokens, 64 tokens a step: S = max(4, ceil(4 x 12 / 64)) = 4 steps a cycle, each 4
  // decode tokens and 8 prompt tokens. TPOT is the step; a rank of 1 GPU makes 4 tokens a step.
  const SteadyPoint p = steady_state(step, 4, 8, 4, 64, 1000);
  EXPECT_GT(p.step_s, 0);
  EXPECT_DOUBLE_EQ(p.tpot_s, p.step_s);
  EXPECT_DOUBLE_EQ(p.output_tokens_per_s_per_gpu, 4 / p.step_s);
  EXPECT_DOUBLE_EQ(p.tokens_per_s_per_user, 1 / p.step_s);
  EXPECT_GT(p.ttft_s, 0);
  EXPECT_TRUE(p.fits);  // 4 x 12 <= 1000
}

TEST(ServeSearch, ALongerCycleWhenTheBudgetCannotHoldThePrompts) {
  const ServingStepInput step = deepseek_on_16();
  // 4 requests of 100 + 4 tokens, 16 tokens a step: S = max(4, ceil(4 x 104 / 16)) = 26 steps for 4 tokens each:
  // TPOT = 26 / 4 steps, and the rank makes 16 output tokens in 26 steps.
  const SteadyPoint p = steady_state(step, 4, 100, 4, 16, 400);
  EXPECT_NEAR(p.tpot_s, 6.5 * p.step_s, 1e-12);
  EXPECT_NEAR(p.output_tokens_per_s_per_gpu, 16 / (26 * p.step_s), 1e-9);
  EXPECT_FALSE(p.fits);  // 4 x 104 > 400
  // The prompt of 100 takes ceil(100 / (16 - 1)) = 7 steps of its own chunk: TTFT is several steps.
  EXPECT_GT(p.ttft_s, 5 * p.step_s);
}

TEST(ServeSearch, DraftTokensShortenTheCycle) {
  const ServingStepInput plain = deepseek_on_16();
  // 4 requests a rank of 8 + 4 tokens, 64 tokens a step, one draft token always accepted: a request gains g = 2
  // tokens a step, so decodes its 4 in 2 steps of 2 query tokens. S = max(4 / 2, ceil(4 x (8 + 2 x 4 / 2) / 64)) = 2
  // steps a cycle, each 4 decoding requests and 4 x 8 / 2 = 16 prompt tokens: TPOT is half a step, and the rank
  // makes 16 tokens in 2 steps.
  ServingStepInput step = plain;
  step.mtp_draft = 1;
  step.mtp_accept = 1;
  const SteadyPoint p = steady_state(step, 4, 8, 4, 64, 1000);
  EXPECT_DOUBLE_EQ(p.tpot_s, p.step_s / 2);
  EXPECT_DOUBLE_EQ(p.output_tokens_per_s_per_gpu, 8 / p.step_s);
  // That step, by hand: the 4 decoding requests attend 8 + 4 / 2 = 10 tokens with each of their 2 query tokens;
  // the chunk's 16 tokens attend half a prompt (4) each.
  RankShare s;
  s.sequences = 5;
  s.decode_sequences = 4;
  s.decode_query_tokens = 8;
  s.decode_context_tokens = 40;
  s.decode_attended_positions = 80;
  s.context_tokens = 40 + 4 + 16;
  s.query_tokens = 8 + 16;
  s.attended_positions = 80 + 16 * 4;
  ServingStepInput x = step;
  x.phase = StepPhase::prefill;
  x.shares.assign(static_cast<size_t>(x.attention_dp), s);
  EXPECT_DOUBLE_EQ(p.step_s, model_serving_step(x).step_s);
  EXPECT_TRUE(p.fits);  // 4 x (12 + 1) <= 1000
  // Never accepted: the same 4-step cycle as without drafts, each step dearer (the drafts and the MTP module).
  step.mtp_accept = 0;
  const SteadyPoint none = steady_state(step, 4, 8, 4, 64, 1000), without = steady_state(plain, 4, 8, 4, 64, 1000);
  EXPECT_DOUBLE_EQ(none.tpot_s, none.step_s);
  EXPECT_GT(none.step_s, without.step_s);
  EXPECT_FALSE(steady_state(step, 4, 8, 4, 64, 51).fits);  // 4 x 13 > 51
}

TEST(ServeSearch, AMixedStepRunsItsDecodingSequencesOnTheDecodeKernel) {
  // A rank's share of 8 decoding requests (context 2048 each) beside a 512-token chunk: its attention is the 8
  // requests' decode core plus the chunk's prefill core, each as a share of its own (launches at the same cost).
  ServingStepInput in = deepseek_on_16();
  in.figures.decode_launch_share = 1;
  RankShare d;
  d.sequences = d.query_tokens = d.decode_sequences = d.decode_query_tokens = 8;
  d.context_tokens = d.attended_positions = d.decode_context_tokens = d.decode_attended_positions = 8 * 2048;
  RankShare c;
  c.sequences = 1;
  c.query_tokens = 512;
  c.context_tokens = 512;
  c.attended_positions = 512 * 513 / 2;
  RankShare mixed = c;
  mixed.sequences += d.sequences;
  mixed.query_tokens += d.query_tokens;
  mixed.context_tokens += d.context_tokens;
  mixed.attended_positions += d.attended_positions;
  mixed.decode_sequences = d.decode_sequences;
  mixed.decode_context_tokens = d.decode_context_tokens;
  mixed.decode_query_tokens = d.decode_query_tokens;
  mixed.decode_attended_positions = d.decode_attended_positions;
  auto attention = [&](const RankShare& s, StepPhase phase) {
    ServingStepInput x = in;
    x.phase = phase;
    x.shares.assign(static_cast<size_t>(in.attention_dp), s);
    return model_serving_step(x).attention.rank_s.front();
  };
  const double both = attention(mixed, StepPhase::prefill);
  EXPECT_NEAR(both, attention(d, StepPhase::decode) + attention(c, StepPhase::prefill), 1e-12 * both);
  // Without the decode part named, the 8 requests' KV cache would not be read.
  RankShare unnamed = mixed;
  unnamed.decode_sequences = unnamed.decode_context_tokens = unnamed.decode_query_tokens = 0;
  unnamed.decode_attended_positions = 0;
  EXPECT_GT(both, attention(unnamed, StepPhase::prefill));
}

SteadyPoint point(double gpu, double user, double tpot_ms, bool fits = true) {
  SteadyPoint p;
  p.output_tokens_per_s_per_gpu = gpu;
  p.tokens_per_s_per_user = user;
  p.tpot_s = tpot_ms * 1e-3;
  p.fits = fits;
  return p;
}

TEST(ServeSearch, TheFrontAndTheBestUnderATarget) {
  // Layout a: (100 tok/s/GPU, 50 /user), (300, 20); layout b: (200, 40), (250, 10), and (900, 90) that does not fit.
  std::vector<SearchLayout> l(2);
  l[0].actual = {point(100, 50, 20), point(300, 20, 50)};
  l[1].actual = {point(200, 40, 25), point(250, 10, 100), point(900, 90, 11, false)};
  l[0].balanced = l[0].actual;
  l[1].balanced = {point(400, 40, 25), point(250, 10, 100), point(900, 90, 11, false)};
  // Front: (100, 50) and (200, 40) and (300, 20); (250, 10) is beaten by (300, 20). By tokens/s a user, ascending.
  const auto f = pareto_front(l, false);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0], std::make_pair(size_t{0}, size_t{1}));
  EXPECT_EQ(f[1], std::make_pair(size_t{1}, size_t{0}));
  EXPECT_EQ(f[2], std::make_pair(size_t{0}, size_t{0}));
  // Balanced, b's (400, 40) beats a's (300, 20): the front is (400, 40), (100, 50).
  const auto fb = pareto_front(l, true);
  ASSERT_EQ(fb.size(), 2u);
  EXPECT_EQ(fb[0], std::make_pair(size_t{1}, size_t{0}));
  // TPOT <= 30 ms: a's best is (100) at 20 ms, b's (200) at 25 ms: b first.
  const auto best = best_under_targets(l, 0.030, 0, 5);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0], std::make_pair(size_t{1}, size_t{0}));
  EXPECT_EQ(best[1], std::make_pair(size_t{0}, size_t{0}));
  EXPECT_EQ(best_under_targets(l, 0.030, 0, 1).size(), 1u);
  EXPECT_TRUE(best_under_targets(l, 0.005, 0, 5).empty());
  // No target: each layout's most tokens/s a GPU that fits (a: 300, b: 250).
  const auto any = best_under_targets(l, 0, 0, 5);
  ASSERT_EQ(any.size(), 2u);
  EXPECT_EQ(any[0], std::make_pair(size_t{0}, size_t{1}));
}

TEST(ServeSearch, TheCommandRoutesOnceAndSkipsLayoutsTheConfigRefuses) {
  const auto r = testing::run_cli(std::string("serve ") + MOESIM_SOURCE_DIR +
                                  "/configs/deepseek-v3.yaml --search --vary placement.devices=16,32,64 --vary "
                                  "placement.replicas=0,32 --isl 256 --osl 64 --batches 4,16 --max-num-tokens 1024 "
                                  "--tpot-ms 200 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layouts"].size(), 5u);  // 64 devices do not divide 256 + 32 slots
  EXPECT_EQ(j["skipped"].size(), 1u);
  EXPECT_EQ(j["layouts"][0]["actual"].size(), 2u);
  EXPECT_FALSE(j["best"].empty());
  EXPECT_FALSE(j["front"]["actual"].empty());
  EXPECT_FALSE(j["front"]["balanced"].empty());
  const auto page = testing::run_cli(std::string("serve ") + MOESIM_SOURCE_DIR +
                                     "/configs/deepseek-v3.yaml --search --vary placement.devices=16,32 --isl 256 --osl 64 "
                                     "--batches 4,16 --max-num-tokens 1024 --tpot-ms 200 --format html");
  ASSERT_EQ(page.exit_code, 0) << page.err;
  EXPECT_EQ(page.out.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.out.find("id=\"front\""), std::string::npos);
  EXPECT_NE(page.out.find("balanced routing"), std::string::npos);
  EXPECT_NE(page.out.find("devices=16"), std::string::npos);
  // Draft tokens and attention TP from the layouts: the JSON names the drafts, and TP 2 halves the ranks.
  const auto mtp = testing::run_cli(std::string("serve ") + MOESIM_SOURCE_DIR +
                                    "/configs/deepseek-v3.yaml --search --vary placement.attention_tp=1,2 --set "
                                    "placement.devices=16 --isl 256 --osl 64 --batches 4 --max-num-tokens 1024 "
                                    "--mtp-draft 1 --mtp-accept 0.8 --format json");
  ASSERT_EQ(mtp.exit_code, 0) << mtp.err;
  const nlohmann::json m = nlohmann::json::parse(mtp.out);
  EXPECT_EQ(m["mtp_draft"], 1);
  ASSERT_EQ(m["layouts"].size(), 2u);
  EXPECT_EQ(m["layouts"][1]["settings"], "attention_tp=2");
  // A --tp that does not divide a layout's GPUs skips that layout, not the search.
  const auto tp = testing::run_cli(std::string("serve ") + MOESIM_SOURCE_DIR +
                                   "/configs/deepseek-v3.yaml --search --vary placement.devices=16,32 --tp 32 --isl 256 "
                                   "--osl 64 --batches 4 --max-num-tokens 1024 --format json");
  ASSERT_EQ(tp.exit_code, 0) << tp.err;
  const nlohmann::json t = nlohmann::json::parse(tp.out);
  ASSERT_EQ(t["layouts"].size(), 1u);
  EXPECT_EQ(t["layouts"][0]["settings"], "devices=32");
  ASSERT_EQ(t["skipped"].size(), 1u);
  EXPECT_NE(t["skipped"][0].get<std::string>().find("--tp"), std::string::npos);
  const auto bad = testing::run_cli(std::string("serve --search --vary router.top_k=2,4"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--vary router.top_k"), std::string::npos) << bad.err;
  const auto lone = testing::run_cli(std::string("serve --tpot-ms 5"));
  EXPECT_EQ(lone.exit_code, 2);
}

}  // namespace
}  // namespace moesim
