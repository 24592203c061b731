// An engine-like scheduler over a request stream (docs/serve.md "The schedule"): requests are spread over the
// attention data-parallel ranks as they arrive, and every rank runs continuous batching with chunked prefill
// under its limits; all ranks step together (their MoE layers meet at the all-to-all), each step costed by the
// caller. Host only, deterministic. Covered by tests/serve/scheduler_test.cpp (schedules worked by hand).
//
// A step, on each rank:
//   1. Decoding requests each run one token (their next token's KV appended, the next token produced).
//   2. The rest of the rank's token budget (max_num_tokens) goes to prefill: first the requests already part-way
//      through their prompts, then new ones from the rank's queue, while the rank holds fewer than max_batch
//      requests and its KV cache can hold the new request's whole prompt. A prompt longer than the budget runs in
//      chunks over several steps (chunked prefill). The step that finishes a prompt produces its first token.
//   3. Before the step, if the decoding requests' new tokens would overflow the KV cache, the latest-admitted
//      request is preempted (its cache freed; it returns to the front of the queue and later recomputes its
//      prompt and the tokens it had produced, as vLLM's recompute preemption does).
// A step's time is the caller's cost of every rank's sequences; with no work anywhere the clock jumps to the next
// arrival.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/serve/request_stream.hpp"
#include "src/step/attention_ranks.hpp"

namespace moesim {

struct SchedulerLimits {
  int ranks = 1;                    // attention data-parallel ranks
  int64_t max_batch = 256;          // requests a rank holds (prefilling and decoding)
  int64_t max_num_tokens = 8192;    // tokens a rank runs a step (decode tokens + prefill chunks)
  int64_t kv_capacity_tokens = 0;   // KV tokens a rank's cache holds
  RequestBalance balance = RequestBalance::round_robin;  // how arriving requests are spread over the ranks
  // A closed loop of this many clients (a benchmark's max concurrency): the first `concurrency` requests arrive at
  // the start and each finish releases the next, the stream's arrival times unread; 0: arrivals as the stream gives.
  int64_t concurrency = 0;
  // Disaggregated decode: every request arrives with its prompt's KV cache and its first token (from the prefill
  // GPUs), and joins the decoding requests without a prefill while the rank has room; one preempted later recomputes
  // as any other. Requests here must have more than one output token.
  bool arrive_prefilled = false;
  // Multi-token prediction: each decoding request runs 1 + mtp_draft tokens a step and keeps 1 + the draft tokens
  // accepted, each accepted with chance mtp_accept given the ones before it (a counter-based draw on `seed`, the
  // request and its tokens so far); the rejected drafts' KV is dropped.
  int mtp_draft = 0;
  double mtp_accept = 0;
  uint64_t seed = 0;
};

// One step as the cost model takes it: every rank's sequences and whether any prompt runs (a prefill step:
// chunks, with or without decoding requests beside them).
struct StepBatch {
  std::vector<StepSequence> sequences;
  std::vector<int> rank;  // each sequence's rank
  bool prefill = false;
};
using StepCoster = std::function<double(const StepBatch&)>;
// Every rank the ranks' mean share of a step (rounded up, so that no rank is left out of the batch's tokens): the
// balanced-attention counterfactual.
std::vector<RankShare> mean_shares(const StepBatch& b, int ranks);

struct RequestTiming {
  double arrival_s = 0, first_token_s = 0, finish_s = 0;  // arrival: the stream's, or its release in a closed loop
  int64_t prompt_tokens = 0, output_tokens = 0;
  int rank = 0;
  int preemptions = 0;
};

struct ServeStepRecord {
  double start_s = 0, time_s = 0;
  int64_t decode_requests = 0;   // every rank's
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double kv_use = 0;             // the fullest rank's KV tokens over its capacity, after the step
  double balance_ratio = 1;      // mean over max tokens per rank (KV tokens in a decode step, tokens in a prefill step)
};

struct Schedule {
  std::vector<RequestTiming> requests;  // in the stream's order
  std::vector<ServeStepRecord> steps;
  int64_t preemptions = 0;
  double end_s = 0;                     // the last request's finish
};

// Checks the limits against the stream (ConfigError naming the option: ranks, max_batch and max_num_tokens at
// least 1, max_num_tokens at least max_batch, every request's prompt + output within a rank's KV capacity), then
// schedules every request to its finish.
Schedule schedule_requests(const std::vector<Request>& requests, const SchedulerLimits& limits, const StepCoster& cost);

// Percentiles of a schedule, as the serving benchmarks report them.
struct LatencySummary {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
// Linear interpolation between order statistics (numpy's default); zeros for no values.
LatencySummary summarize_latency(std::vector<double> values);

}  // namespace moesim
