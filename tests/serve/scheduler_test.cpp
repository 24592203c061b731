// Tests src/serve/scheduler: schedules worked by hand with a cost that is a function of the batch (2 requests on 2
// ranks with chunked prefill; a KV cache that fills and preempts; a closed loop of clients), the limits refused
// with the option named, and the latency percentiles. Host only.
#include "src/serve/scheduler.hpp"
#include "src/serve/serve_run.hpp"

#include <gtest/gtest.h>

#include "src/common/error.hpp"

namespace moesim {
namespace {

Request request(int64_t id, double arrival, int64_t prompt, int64_t output) {
  Request r;
  r.id = id;
  r.arrival_s = arrival;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  return r;
}

int64_t tokens_of(const StepBatch& b) {
  int64_t t = 0;
  for (const StepSequence& s : b.sequences) t += s.query_tokens;
  return t;
}

TEST(Scheduler, TwoRequestsOnTwoRanksWithChunkedPrefill) {
  // A (prompt 6, output 2) goes to rank 0, B (prompt 3, output 3) to rank 1; 4 tokens a rank a step; a step costs
  // 1 + 0.1 x its tokens seconds.
  //   step 1: A's chunk of 4, B's whole prompt (3): 7 tokens, 1.7 s; B's first token at 1.7.
  //   step 2: A's last 2 prompt tokens, B decodes (context 4): 3 tokens, 1.3 s; A's first token at 3.0.
  //   step 3: A decodes (context 7), B decodes (context 5): 2 tokens, 1.2 s; both finish at 4.2.
  SchedulerLimits lim;
  lim.ranks = 2;
  lim.max_batch = 2;
  lim.max_num_tokens = 4;
  lim.kv_capacity_tokens = 100;
  std::vector<StepBatch> seen;
  const StepCoster cost = [&](const StepBatch& b) {
    seen.push_back(b);
    return 1.0 + 0.1 * static_cast<double>(tokens_of(b));
  };
  const Schedule s = schedule_requests({request(0, 0, 6, 2), request(1, 0, 3, 3)}, lim, cost);
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_NEAR(s.steps[0].time_s, 1.7, 1e-12);
  EXPECT_EQ(s.steps[0].prefill_tokens, 7);
  EXPECT_EQ(s.steps[1].prefill_tokens, 2);
  EXPECT_EQ(s.steps[1].decode_tokens, 1);
  EXPECT_EQ(s.steps[2].decode_requests, 2);
  EXPECT_TRUE(seen[0].prefill && seen[1].prefill && !seen[2].prefill);
  // Step 2's sequences: A's chunk on rank 0 (2 tokens after 4 cached: context 6, positions 5 + 6 = 11), B's
  // decode on rank 1 (context 4).
  ASSERT_EQ(seen[1].sequences.size(), 2u);
  EXPECT_EQ(seen[1].rank[0], 0);
  EXPECT_EQ(seen[1].sequences[0].query_tokens, 2);
  EXPECT_EQ(seen[1].sequences[0].context_tokens, 6);
  EXPECT_EQ(seen[1].sequences[0].attended_positions, 11);
  EXPECT_EQ(seen[1].rank[1], 1);
  EXPECT_EQ(seen[1].sequences[1].context_tokens, 4);
  // Balance: 3.5 / 4 prompt tokens, then 1.5 / 2, then KV tokens 6 / 7.
  EXPECT_NEAR(s.steps[0].balance_ratio, 0.875, 1e-12);
  EXPECT_NEAR(s.steps[1].balance_ratio, 0.75, 1e-12);
  EXPECT_NEAR(s.steps[2].balance_ratio, 6.0 / 7.0, 1e-12);
  EXPECT_NEAR(s.requests[0].first_token_s, 3.0, 1e-12);
  EXPECT_NEAR(s.requests[1].first_token_s, 1.7, 1e-12);
  EXPECT_NEAR(s.requests[0].finish_s, 4.2, 1e-12);
  EXPECT_NEAR(s.requests[1].finish_s, 4.2, 1e-12);
  EXPECT_EQ(s.requests[0].rank, 0);
  EXPECT_EQ(s.requests[1].rank, 1);
  EXPECT_NEAR(s.end_s, 4.2, 1e-12);
  EXPECT_EQ(s.preemptions, 0);
}

TEST(Scheduler, AFullCachePreemptsTheLatestRequest) {
  // One rank, 10 KV tokens, two requests of prompt 4 and output 4, 1 s a step.
  //   step 1: both prompts (8 tokens cached), both first tokens;  step 2: both decode (10 cached);
  //   step 3: two more tokens do not fit: B (the later) is preempted, A decodes (6 cached);
  //   step 4: B's recompute (4 + 2 = 6) does not fit beside A's 7: A decodes and finishes;
  //   step 5: B recomputes its 6 tokens and produces its third;  step 6: B decodes its fourth and finishes.
  SchedulerLimits lim;
  lim.max_batch = 2;
  lim.max_num_tokens = 8;
  lim.kv_capacity_tokens = 10;
  const Schedule s = schedule_requests({request(0, 0, 4, 4), request(1, 0, 4, 4)}, lim, [](const StepBatch&) { return 1.0; });
  EXPECT_EQ(s.preemptions, 1);
  EXPECT_EQ(s.requests[1].preemptions, 1);
  ASSERT_EQ(s.steps.size(), 6u);
  EXPECT_EQ(s.steps[4].prefill_tokens, 6);
  EXPECT_NEAR(s.requests[0].finish_s, 4.0, 1e-12);
  EXPECT_NEAR(s.requests[1].first_token_s, 1.0, 1e-12);
  EXPECT_NEAR(s.requests[1].finish_s, 6.0, 1e-12);
  EXPECT_NEAR(s.steps[1].kv_use, 1.0, 1e-12);
}

TEST(Scheduler, AClosedLoopReleasesARequestAtEachFinish) {
  // One client: each request (prompt 2, output 1) runs alone; the second arrives when the first finishes.
  SchedulerLimits lim;
  lim.max_num_tokens = 256;
  lim.kv_capacity_tokens = 100;
  lim.concurrency = 1;
  const Schedule s = schedule_requests({request(0, 5, 2, 1), request(1, 9, 2, 1)}, lim, [](const StepBatch&) { return 0.5; });
  ASSERT_EQ(s.steps.size(), 2u);
  EXPECT_NEAR(s.requests[0].arrival_s, 0.0, 1e-12);
  EXPECT_NEAR(s.requests[1].arrival_s, 0.5, 1e-12);
  EXPECT_NEAR(s.requests[1].finish_s, 1.0, 1e-12);
}

TEST(Scheduler, ArrivalsLaterThanTheWorkJumpTheClock) {
  SchedulerLimits lim;
  lim.max_num_tokens = 256;
  lim.kv_capacity_tokens = 100;
  const Schedule s = schedule_requests({request(0, 0, 2, 1), request(1, 10, 2, 1)}, lim, [](const StepBatch&) { return 0.5; });
  EXPECT_NEAR(s.requests[1].first_token_s, 10.5, 1e-12);
  EXPECT_NEAR(s.end_s, 10.5, 1e-12);
}

TEST(Scheduler, KvBalancedSpreadsByTokens) {
  // The first (long) request fills rank 0, so the next two go to rank 1 until it holds more.
  SchedulerLimits lim;
  lim.ranks = 2;
  lim.max_num_tokens = 1024;
  lim.kv_capacity_tokens = 10000;
  lim.balance = RequestBalance::kv_tokens;
  const Schedule s = schedule_requests({request(0, 0, 1000, 2), request(1, 0, 100, 2), request(2, 0, 100, 2)}, lim,
                                       [](const StepBatch&) { return 1.0; });
  EXPECT_EQ(s.requests[0].rank, 0);
  EXPECT_EQ(s.requests[1].rank, 1);
  EXPECT_EQ(s.requests[2].rank, 1);
}

TEST(Scheduler, LimitsAreRefusedNamingTheOption) {
  SchedulerLimits lim;
  lim.kv_capacity_tokens = 10;
  const StepCoster one = [](const StepBatch&) { return 1.0; };
  auto message = [&](const SchedulerLimits& l, const std::vector<Request>& r) -> std::string {
    try {
      schedule_requests(r, l, one);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(lim, {request(0, 0, 8, 4)}).find("kv_capacity"), std::string::npos);
  SchedulerLimits small = lim;
  small.max_num_tokens = 4;
  small.max_batch = 8;
  EXPECT_NE(message(small, {request(0, 0, 2, 2)}).find("max_num_tokens"), std::string::npos);
  SchedulerLimits none = lim;
  none.ranks = 0;
  EXPECT_NE(message(none, {request(0, 0, 2, 2)}).find("ranks"), std::string::npos);
  EXPECT_NE(message(lim, {request(0, 2, 2, 2), request(1, 1, 2, 2)}).find("in order"), std::string::npos);
  const StepCoster zero = [](const StepBatch&) { return 0.0; };
  EXPECT_THROW(schedule_requests({request(0, 0, 2, 2)}, lim, zero), ConfigError);
}

TEST(Scheduler, LatencyPercentilesInterpolate) {
  const LatencySummary s = summarize_latency({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
  EXPECT_NEAR(s.p90, 3.7, 1e-12);
  EXPECT_NEAR(s.p99, 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(summarize_latency({}).p99, 0.0);
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// The two stages of a disaggregated run at 1 s a step: the prefill rank runs one 4-token prompt a step (1 request/s,
// the arrival rate); each KV moves in 0.5 s; the decode rank runs `batch` requests of `osl` output tokens.
Schedule disaggregated(int n, int64_t osl, int64_t batch) {
  std::vector<Request> prompts, requests;
  for (int i = 0; i < n; ++i) requests.push_back(request(i, i, 4, osl));
  prompts = requests;
  for (Request& q : prompts) q.output_tokens = 1;
  SchedulerLimits p;
  p.max_batch = 1;
  p.max_num_tokens = 4;
  p.kv_capacity_tokens = 100;
  const StepCoster second = [](const StepBatch&) { return 1.0; };
  const Schedule pre = schedule_requests(prompts, p, second);
  std::vector<double> transfer(requests.size(), 0.5);
  std::vector<Request> decode;
  std::vector<size_t> order;
  for (size_t i = 0; i < requests.size(); ++i) {
    Request q = requests[i];
    q.arrival_s = pre.requests[i].first_token_s + transfer[i];
    decode.push_back(q);
    order.push_back(i);
  }
  SchedulerLimits d;
  d.max_batch = batch;
  d.max_num_tokens = 8;
  d.kv_capacity_tokens = 100;
  d.arrive_prefilled = true;
  return join_stages(pre, schedule_requests(decode, d, second), order, transfer);
}

TEST(Scheduler, DisaggregatedStagesAtEqualRequestRates) {
  // Prefill: request i arrives at i and has its first token at i + 1; its KV reaches the decode rank at i + 1.5.
  // Decode of 2 output tokens (1 step) a request, 1 at a time: 1 request/s, the prefill's rate: every request ends
  // at i + 2.5, TTFT 1.5 s, TPOT 1 s, and no queue builds.
  const Schedule s = disaggregated(20, 2, 1);
  for (int i = 0; i < 20; ++i) {
    EXPECT_NEAR(s.requests[i].first_token_s, i + 1.5, 1e-12) << i;
    EXPECT_NEAR(s.requests[i].finish_s, i + 2.5, 1e-12) << i;
  }
  EXPECT_EQ(s.requests[5].output_tokens, 2);
  // 3 output tokens (2 steps) a request, 2 at a time: again 1 request/s; every request ends at i + 3.5.
  const Schedule m = disaggregated(20, 3, 2);
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(m.requests[i].finish_s, i + 3.5, 1e-12) << i;
  // 1 at a time, the decode runs 0.5 requests/s: the queue grows a second a request.
  const Schedule slow = disaggregated(20, 3, 1);
  EXPECT_NEAR(slow.requests[19].finish_s - slow.requests[19].arrival_s -
                  (slow.requests[0].finish_s - slow.requests[0].arrival_s),
              19.0, 1e-9);
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

TEST(Scheduler, DraftTokensRunAndTheAcceptedOnesCount) {
  // One request of prompt 4 and output 5, one draft token a step. Every draft accepted: the prefill's step makes
  // the first token, then each decode step runs 2 tokens (context 4 + 2 = 6 in the first) and keeps both: 3 steps.
  SchedulerLimits lim;
  lim.max_batch = 1;
  lim.max_num_tokens = 8;
  lim.kv_capacity_tokens = 100;
  lim.mtp_draft = 1;
  lim.mtp_accept = 1;
  std::vector<StepBatch> seen;
  const StepCoster cost = [&](const StepBatch& b) {
    seen.push_back(b);
    return 1.0;
  };
  const Schedule all = schedule_requests({request(0, 0, 4, 5)}, lim, cost);
  ASSERT_EQ(all.steps.size(), 3u);
  EXPECT_EQ(seen[1].sequences[0].query_tokens, 2);
  EXPECT_EQ(seen[1].sequences[0].context_tokens, 6);
  EXPECT_TRUE(seen[1].sequences[0].decoding);
  EXPECT_EQ(all.steps[1].decode_tokens, 2);
  EXPECT_NEAR(all.requests[0].finish_s, 3.0, 1e-12);
  // An output of 4: the last step keeps only the token the request still needs.
  EXPECT_EQ(schedule_requests({request(0, 0, 4, 4)}, lim, cost).steps.size(), 3u);
  // None accepted: one token a step, 1 + 4 steps.
  lim.mtp_accept = 0;
  EXPECT_EQ(schedule_requests({request(0, 0, 4, 5)}, lim, cost).steps.size(), 5u);
  // Half accepted: between the two, drawn from the seed.
  lim.mtp_accept = 0.5;
  const size_t half = schedule_requests({request(0, 0, 4, 41)}, lim, cost).steps.size();
  EXPECT_GT(half, 1u + 20u);
  EXPECT_LT(half, 1u + 40u);
}

}  // namespace
}  // namespace moesim
