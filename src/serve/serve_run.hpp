// A serving run (moesim serve; docs/serve.md): a request stream scheduled onto the attention-DP ranks
// (scheduler.hpp), every step costed by the step model (src/step/serving_step.hpp) with the run's routed loads, and
// what the users and the operator see: TTFT, TPOT and end-to-end latency, tokens/s per GPU and per user, the
// ranks' balance; and the same run with balanced routing and with balanced attention, so that what imbalance costs
// reads in tokens/s per GPU. Host only, deterministic. Covered by tests/serve/serve_run_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/serve/eplb_timeline.hpp"
#include "src/serve/request_stream.hpp"
#include "src/serve/scheduler.hpp"
#include "src/step/serving_step.hpp"

namespace moesim {

struct ServeInput {
  // The step model's input: model, profile, placement, routed loads (draws) and their plans, attention DP and TP,
  // figures. Its phase, sequences, sequence_rank and shares are set for each step.
  ServingStepInput step;
  std::vector<Request> requests;
  SchedulerLimits limits;  // limits.ranks is step.attention_dp
  bool counterfactuals = true;
  // Disaggregated serving: `step` and `limits` are the decode GPUs'; the prefill GPUs run every prompt (and its first
  // token) on their own step model and limits, and the prompt's KV cache moves to a decode rank over the scale-out
  // link in kv_transfer_s_per_token x prompt tokens + kv_transfer_latency_s. The request's first token reaches the
  // user when its KV has arrived.
  bool disaggregated = false;
  ServingStepInput prefill_step;
  SchedulerLimits prefill_limits;
  double kv_transfer_s_per_token = 0, kv_transfer_latency_s = 0;
  // EPLB over time (colocated runs): each step's loads a draw of eplb.loads under a plan re-made every
  // eplb.rebalance_every steps (eplb_timeline.hpp); the run is compared with the plan made once.
  bool eplb_over_time = false;
  EplbTimeline eplb;
};

struct ServeMetrics {
  double duration_s = 0;  // from the first arrival to the last finish
  int64_t requests = 0, prompt_tokens = 0, output_tokens = 0, steps = 0, preemptions = 0;
  double output_tokens_per_s_per_gpu = 0, total_tokens_per_s_per_gpu = 0;
  // The mean over requests of their decode speed, (output - 1) / (finish - first token); requests of one output
  // token are left out.
  double tokens_per_s_per_user = 0;
  LatencySummary ttft_s, tpot_s, e2e_s;
  double balance_ratio_mean = 1;  // over the steps
  double step_mean_s = 0;
};

struct ServeResult {
  Schedule schedule;          // colocated: the run; disaggregated: every request's timing and the decode GPUs' steps
  Schedule prefill_schedule;  // disaggregated: the prefill GPUs' run (each request to its first token)
  ServeMetrics metrics;
  // The same stream with balanced routing (every draw's loads even over the experts), and with the ranks'
  // attention at their mean share each step (routing as run). Empty (steps 0) without counterfactuals.
  ServeMetrics balanced_routing, balanced_attention;
  // EPLB over time: the same stream with the plan made once, and the re-plans' count and weight transfers.
  ServeMetrics static_plan;
  EplbTally eplb, static_eplb;
  int gpus = 1;
};

// The metrics of a schedule on `gpus` GPUs.
ServeMetrics serve_metrics(const Schedule& s, int gpus);

// The same input with every draw's loads (and the loads its plan is made from) even over the experts.
ServingStepInput with_balanced_routing(const ServingStepInput& in);

// A disaggregated run's timing from its two stages: the prefill GPUs' schedule (every request to its first token)
// and the decode GPUs' (every request of more than one output token, arriving prefilled after its KV transfer, in
// the order of `decoded`: indices into the prefill schedule's requests).
Schedule join_stages(const Schedule& prefill, const Schedule& decode, const std::vector<size_t>& decoded,
                     const std::vector<double>& transfer_s);

// Runs the stream (and its counterfactuals). Throws ConfigError as schedule_requests and model_serving_step do.
ServeResult run_serve(const ServeInput& in);

}  // namespace moesim
