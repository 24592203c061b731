// The steady state of a closed loop, and the search by it (see serve_search.hpp).
#include "src/serve/serve_search.hpp"

#include <algorithm>
#include <cmath>

#include "src/common/error.hpp"

namespace moesim {

SteadyPoint steady_state(const ServingStepInput& base, int64_t batch, int64_t isl, int64_t osl, int64_t max_num_tokens,
                         int64_t kv_capacity_tokens) {
  if (batch < 1 || isl < 1 || osl < 1 || max_num_tokens < 1)
    throw ConfigError("steady state: expected a batch, lengths and a token budget of at least 1");
  SteadyPoint p;
  p.batch = batch;
  const int64_t per = 1 + base.mtp_draft;  // query tokens a decoding request runs a step
  p.fits = batch * (isl + osl + base.mtp_draft) <= kv_capacity_tokens;
  const double b = static_cast<double>(batch), in = static_cast<double>(isl), out = static_cast<double>(osl);
  // A request gains g tokens a step on average (1 without draft tokens), so it decodes osl / g steps a cycle, each
  // running 1 + draft query tokens.
  const double g = mtp_tokens_per_request(base.mtp_draft, base.mtp_accept), decode_steps = out / g;
  const double budget = static_cast<double>(max_num_tokens);
  const double steps = std::max(decode_steps, std::ceil(b * (in + decode_steps * static_cast<double>(per)) / budget));
  const int64_t decode = std::max<int64_t>(1, std::llround(b * decode_steps / steps));
  const int64_t prompt = static_cast<int64_t>(std::ceil(b * in / steps));
  // Each decoding request attends its prompt and half its output on average; the chunk, half its prompt.
  const int64_t context = isl + osl / 2;
  RankShare s;
  s.sequences = decode + (prompt > 0 ? 1 : 0);
  s.context_tokens = decode * context + (prompt > 0 ? isl / 2 + prompt : 0);
  s.decode_sequences = decode;
  s.decode_query_tokens = decode * per;
  s.decode_context_tokens = decode * context;
  s.decode_attended_positions = decode * per * context;
  s.query_tokens = s.decode_query_tokens + prompt;
  s.attended_positions = s.decode_attended_positions + prompt * (isl / 2);
  ServingStepInput step = base;
  step.phase = prompt > 0 ? StepPhase::prefill : StepPhase::decode;
  step.shares.assign(static_cast<size_t>(base.attention_dp), s);
  p.step_s = model_serving_step(step).step_s;
  p.tpot_s = steps * p.step_s / out;
  // A new prompt takes the step's whole prefill budget beside the decoding requests until it is done.
  const int64_t chunk = std::max<int64_t>(1, std::min(isl, max_num_tokens - decode * per));
  RankShare c = s;
  c.sequences = decode + 1;
  c.context_tokens = decode * context + chunk;
  c.query_tokens = s.decode_query_tokens + chunk;
  c.attended_positions = s.decode_attended_positions + chunk * (chunk + 1) / 2;
  step.phase = StepPhase::prefill;
  step.shares.assign(static_cast<size_t>(base.attention_dp), c);
  p.ttft_s = static_cast<double>((isl + chunk - 1) / chunk) * model_serving_step(step).step_s;
  p.tokens_per_s_per_user = 1.0 / p.tpot_s;
  p.output_tokens_per_s_per_gpu = b * out / (steps * p.step_s) / std::max(1, base.attention_tp);
  return p;
}

std::vector<std::pair<size_t, size_t>> pareto_front(const std::vector<SearchLayout>& layouts, bool balanced) {
  std::vector<std::pair<size_t, size_t>> all;
  for (size_t l = 0; l < layouts.size(); ++l) {
    const std::vector<SteadyPoint>& pts = balanced ? layouts[l].balanced : layouts[l].actual;
    for (size_t i = 0; i < pts.size(); ++i)
      if (pts[i].fits) all.push_back({l, i});
  }
  auto at = [&](const std::pair<size_t, size_t>& x) -> const SteadyPoint& {
    return (balanced ? layouts[x.first].balanced : layouts[x.first].actual)[x.second];
  };
  // By tokens/s a user, highest first (ties: more tokens/s a GPU first, then the earlier layout): a point is on the
  // front when its tokens/s a GPU beats every point before it.
  std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) {
    const SteadyPoint &x = at(a), &y = at(b);
    if (x.tokens_per_s_per_user != y.tokens_per_s_per_user) return x.tokens_per_s_per_user > y.tokens_per_s_per_user;
    if (x.output_tokens_per_s_per_gpu != y.output_tokens_per_s_per_gpu)
      return x.output_tokens_per_s_per_gpu > y.output_tokens_per_s_per_gpu;
    return a < b;
  });
  std::vector<std::pair<size_t, size_t>> front;
  double best = -1;
  for (const auto& x : all)
    if (at(x).output_tokens_per_s_per_gpu > best) {
      best = at(x).output_tokens_per_s_per_gpu;
      front.push_back(x);
    }
  std::reverse(front.begin(), front.end());
  return front;
}

std::vector<std::pair<size_t, size_t>> best_under_targets(const std::vector<SearchLayout>& layouts, double tpot_s,
                                                          double ttft_s, size_t top) {
  std::vector<std::pair<size_t, size_t>> best;
  for (size_t l = 0; l < layouts.size(); ++l) {
    int chosen = -1;
    for (size_t i = 0; i < layouts[l].actual.size(); ++i) {
      const SteadyPoint& p = layouts[l].actual[i];
      if (!p.fits || (tpot_s > 0 && p.tpot_s > tpot_s) || (ttft_s > 0 && p.ttft_s > ttft_s)) continue;
      if (chosen < 0 || p.output_tokens_per_s_per_gpu > layouts[l].actual[static_cast<size_t>(chosen)].output_tokens_per_s_per_gpu)
        chosen = static_cast<int>(i);
    }
    if (chosen >= 0) best.push_back({l, static_cast<size_t>(chosen)});
  }
  std::stable_sort(best.begin(), best.end(), [&](const auto& a, const auto& b) {
    return layouts[a.first].actual[a.second].output_tokens_per_s_per_gpu >
           layouts[b.first].actual[b.second].output_tokens_per_s_per_gpu;
  });
  if (best.size() > top) best.resize(top);
  return best;
}

}  // namespace moesim
