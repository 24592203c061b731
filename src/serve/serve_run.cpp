// A serving run (see serve_run.hpp).
#include "src/serve/serve_run.hpp"

#include <algorithm>
#include <numeric>

#include "src/common/error.hpp"

#include "src/cost/placement.hpp"

namespace moesim {
namespace {

enum class Counterfactual { none, balanced_attention };

// The step model as the scheduler's cost: the template with this step's sequences, their ranks and its phase.
StepCoster step_coster(const ServingStepInput& base, Counterfactual cf) {
  return [&base, cf](const StepBatch& b) {
    ServingStepInput in = base;
    in.phase = b.prefill ? StepPhase::prefill : StepPhase::decode;
    if (cf == Counterfactual::balanced_attention) {
      in.shares = mean_shares(b, base.attention_dp);
    } else {
      in.sequences = b.sequences;
      in.sequence_rank = b.rank;
    }
    return model_serving_step(in).step_s;
  };
}

}  // namespace

ServingStepInput with_balanced_routing(const ServingStepInput& in) {
  ServingStepInput out = in;
  for (std::vector<int64_t>& l : out.loads) l = even_loads(in.model.experts, std::accumulate(l.begin(), l.end(), int64_t{0}));
  for (std::vector<int64_t>& l : out.plan_loads)
    l = even_loads(in.model.experts, std::accumulate(l.begin(), l.end(), int64_t{0}));
  return out;
}

ServeMetrics serve_metrics(const Schedule& s, int gpus) {
  ServeMetrics m;
  m.requests = static_cast<int64_t>(s.requests.size());
  m.steps = static_cast<int64_t>(s.steps.size());
  m.preemptions = s.preemptions;
  if (s.requests.empty()) return m;
  double start = s.requests.front().arrival_s;
  std::vector<double> ttft, tpot, e2e;
  double speed = 0;
  int64_t decoders = 0;
  for (const RequestTiming& r : s.requests) {
    start = std::min(start, r.arrival_s);
    m.prompt_tokens += r.prompt_tokens;
    m.output_tokens += r.output_tokens;
    ttft.push_back(r.first_token_s - r.arrival_s);
    e2e.push_back(r.finish_s - r.arrival_s);
    if (r.output_tokens > 1 && r.finish_s > r.first_token_s) {
      const double t = (r.finish_s - r.first_token_s) / static_cast<double>(r.output_tokens - 1);
      tpot.push_back(t);
      speed += 1.0 / t;
      ++decoders;
    }
  }
  m.duration_s = s.end_s - start;
  const double g = static_cast<double>(std::max(1, gpus));
  if (m.duration_s > 0) {
    m.output_tokens_per_s_per_gpu = static_cast<double>(m.output_tokens) / m.duration_s / g;
    m.total_tokens_per_s_per_gpu = static_cast<double>(m.output_tokens + m.prompt_tokens) / m.duration_s / g;
  }
  m.tokens_per_s_per_user = decoders > 0 ? speed / static_cast<double>(decoders) : 0;
  m.ttft_s = summarize_latency(ttft);
  m.tpot_s = summarize_latency(tpot);
  m.e2e_s = summarize_latency(e2e);
  double ratio = 0, time = 0;
  for (const ServeStepRecord& r : s.steps) {
    ratio += r.balance_ratio;
    time += r.time_s;
  }
  if (!s.steps.empty()) {
    m.balance_ratio_mean = ratio / static_cast<double>(s.steps.size());
    m.step_mean_s = time / static_cast<double>(s.steps.size());
  }
  return m;
}

Schedule join_stages(const Schedule& prefill, const Schedule& decode, const std::vector<size_t>& decoded,
                     const std::vector<double>& transfer_s) {
  Schedule out = prefill;
  out.steps = decode.steps;
  out.preemptions += decode.preemptions;
  out.end_s = 0;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    RequestTiming& t = out.requests[i];
    t.first_token_s = prefill.requests[i].first_token_s + transfer_s[i];
    t.finish_s = t.first_token_s;
  }
  for (size_t j = 0; j < decoded.size(); ++j) {
    RequestTiming& t = out.requests[decoded[j]];
    t.finish_s = decode.requests[j].finish_s;
    t.output_tokens = decode.requests[j].output_tokens;
    t.preemptions += decode.requests[j].preemptions;
  }
  for (const RequestTiming& t : out.requests) out.end_s = std::max(out.end_s, t.finish_s);
  return out;
}

namespace {

// One run of the stream: colocated on `step`, or through the prefill GPUs and then the decode GPUs.
struct Run {
  Schedule schedule, prefill;
};

Run run_once(const ServeInput& in, const ServingStepInput& step, const ServingStepInput& prefill_step, Counterfactual cf) {
  SchedulerLimits limits = in.limits;
  limits.ranks = step.attention_dp;
  Run r;
  if (!in.disaggregated) {
    r.schedule = schedule_requests(in.requests, limits, step_coster(step, cf));
    return r;
  }
  // The prefill GPUs run each prompt to its first token.
  std::vector<Request> prompts = in.requests;
  for (Request& q : prompts) q.output_tokens = 1;
  SchedulerLimits pl = in.prefill_limits;
  pl.ranks = prefill_step.attention_dp;
  r.prefill = schedule_requests(prompts, pl, step_coster(prefill_step, cf));
  // Its KV moves to the decode GPUs; requests of one output token are done.
  std::vector<double> transfer(in.requests.size());
  std::vector<size_t> order;
  for (size_t i = 0; i < in.requests.size(); ++i) {
    transfer[i] = in.kv_transfer_latency_s + in.kv_transfer_s_per_token * static_cast<double>(in.requests[i].prompt_tokens);
    if (in.requests[i].output_tokens > 1) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return r.prefill.requests[a].first_token_s + transfer[a] < r.prefill.requests[b].first_token_s + transfer[b];
  });
  std::vector<Request> decode;
  for (size_t i : order) {
    Request q = in.requests[i];
    q.id = static_cast<int64_t>(decode.size());
    q.arrival_s = r.prefill.requests[i].first_token_s + transfer[i];
    decode.push_back(q);
  }
  limits.concurrency = 0;
  limits.arrive_prefilled = true;
  const Schedule d = decode.empty() ? Schedule{} : schedule_requests(decode, limits, step_coster(step, cf));
  r.schedule = join_stages(r.prefill, d, order, transfer);
  return r;
}

}  // namespace

namespace {

ServeResult run_eplb_over_time(const ServeInput& in) {
  ServeResult out;
  SchedulerLimits limits = in.limits;
  limits.ranks = in.step.attention_dp;
  out.gpus = in.step.attention_dp * in.step.attention_tp;
  out.schedule = schedule_requests(in.requests, limits, eplb_timeline_coster(in.step, in.eplb, &out.eplb));
  out.metrics = serve_metrics(out.schedule, out.gpus);
  EplbTimeline once = in.eplb;
  once.rebalance_every = 0;
  out.static_plan =
      serve_metrics(schedule_requests(in.requests, limits, eplb_timeline_coster(in.step, once, &out.static_eplb)), out.gpus);
  if (in.counterfactuals) {
    out.balanced_routing = serve_metrics(
        schedule_requests(in.requests, limits, step_coster(with_balanced_routing(in.step), Counterfactual::none)),
        out.gpus);
    out.balanced_attention = serve_metrics(
        schedule_requests(in.requests, limits, eplb_timeline_coster(in.step, in.eplb, nullptr, true)), out.gpus);
  }
  return out;
}

}  // namespace

ServeResult run_serve(const ServeInput& in) {
  if (in.eplb_over_time) {
    if (in.disaggregated)
      throw ConfigError("rebalance_every: expected a colocated run (EPLB over time with disaggregated serving is not "
                        "modeled)");
    return run_eplb_over_time(in);
  }
  ServeResult out;
  out.gpus = in.step.attention_dp * in.step.attention_tp +
             (in.disaggregated ? in.prefill_step.attention_dp * in.prefill_step.attention_tp : 0);
  if (in.disaggregated && in.limits.concurrency > 0)
    throw ConfigError("concurrency: expected arrivals as the stream gives them with disaggregated serving (a closed "
                      "loop over two stages is not modeled)");
  Run r = run_once(in, in.step, in.prefill_step, Counterfactual::none);
  out.schedule = std::move(r.schedule);
  out.prefill_schedule = std::move(r.prefill);
  out.metrics = serve_metrics(out.schedule, out.gpus);
  if (in.counterfactuals) {
    const ServingStepInput balanced = with_balanced_routing(in.step);
    const ServingStepInput balanced_prefill = in.disaggregated ? with_balanced_routing(in.prefill_step) : in.prefill_step;
    out.balanced_routing = serve_metrics(run_once(in, balanced, balanced_prefill, Counterfactual::none).schedule, out.gpus);
    out.balanced_attention =
        serve_metrics(run_once(in, in.step, in.prefill_step, Counterfactual::balanced_attention).schedule, out.gpus);
  }
  return out;
}

}  // namespace moesim
