// A serving run (see serve_run.hpp).
#include "src/serve/serve_run.hpp"

#include <numeric>

#include "src/cost/placement.hpp"

namespace moesim {
namespace {

enum class Counterfactual { none, balanced_attention };

// The step model as the scheduler's cost: the template with this step's sequences, their ranks and its phase.
StepCoster step_coster(const ServingStepInput& base, Counterfactual cf) {
  return [&base, cf](const StepBatch& b) {
    ServingStepInput in = base;
    in.phase = b.prefill ? StepPhase::prefill : StepPhase::decode;
    in.mtp_draft = 0;
    if (cf == Counterfactual::balanced_attention) {
      // Every rank the mean share (rounded up, so that no rank is left out of the batch's tokens).
      RankShare total;
      for (const StepSequence& s : b.sequences) {
        ++total.sequences;
        total.context_tokens += s.context_tokens;
        total.query_tokens += s.query_tokens;
        total.attended_positions += s.attended_positions;
      }
      const int64_t r = base.attention_dp;
      RankShare mean;
      mean.sequences = (total.sequences + r - 1) / r;
      mean.context_tokens = (total.context_tokens + r - 1) / r;
      mean.query_tokens = (total.query_tokens + r - 1) / r;
      mean.attended_positions = (total.attended_positions + r - 1) / r;
      in.shares.assign(static_cast<size_t>(r), mean);
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

ServeResult run_serve(const ServeInput& in) {
  ServeResult out;
  SchedulerLimits limits = in.limits;
  limits.ranks = in.step.attention_dp;
  out.gpus = in.step.attention_dp * in.step.attention_tp;
  out.schedule = schedule_requests(in.requests, limits, step_coster(in.step, Counterfactual::none));
  out.metrics = serve_metrics(out.schedule, out.gpus);
  if (in.counterfactuals) {
    const ServingStepInput balanced = with_balanced_routing(in.step);
    out.balanced_routing =
        serve_metrics(schedule_requests(in.requests, limits, step_coster(balanced, Counterfactual::none)), out.gpus);
    out.balanced_attention = serve_metrics(
        schedule_requests(in.requests, limits, step_coster(in.step, Counterfactual::balanced_attention)), out.gpus);
  }
  return out;
}

}  // namespace moesim
