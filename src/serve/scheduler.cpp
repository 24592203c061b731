// The engine-like scheduler (see scheduler.hpp).
#include "src/serve/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "src/common/counter_rng.hpp"
#include "src/common/error.hpp"

namespace moesim {
namespace {

// A request while it is in the system.
struct Live {
  int64_t cached = 0;        // KV tokens in its rank's cache
  int64_t target = 0;        // tokens its (re)prefill must cache: the prompt, plus the output so far after a preemption
  int64_t generated = 0;     // output tokens produced
  bool prefilled = false;    // arrived with its prompt's KV and first token (disaggregated decode), not yet admitted
};

struct Rank {
  std::deque<size_t> queue;    // waiting, in order (a preempted request at the front)
  std::vector<size_t> active;  // admitted, in admission order
  int64_t reserved = 0;        // KV tokens held or promised: decoding caches and admitted prompts in full
};

class Scheduler {
 public:
  Scheduler(const std::vector<Request>& requests, const SchedulerLimits& limits, const StepCoster& cost)
      : req_(requests), lim_(limits), cost_(cost), live_(requests.size()), ranks_(static_cast<size_t>(limits.ranks)) {
    out_.requests.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      RequestTiming& t = out_.requests[i];
      t.arrival_s = requests[i].arrival_s;
      t.prompt_tokens = requests[i].prompt_tokens;
      t.output_tokens = requests[i].output_tokens;
    }
  }

  Schedule run() {
    double now = req_.empty() ? 0.0 : req_.front().arrival_s;
    if (lim_.concurrency > 0) {
      now = 0;
      released_ = std::min(req_.size(), static_cast<size_t>(lim_.concurrency));
      for (RequestTiming& t : out_.requests) t.arrival_s = 0;
    } else {
      released_ = req_.size();
    }
    size_t next = 0, finished = 0;
    while (finished < req_.size()) {
      while (next < released_ && out_.requests[next].arrival_s <= now) assign(next++);
      StepBatch batch;
      ServeStepRecord rec;
      std::vector<std::vector<size_t>> chunked(ranks_.size());
      std::vector<std::vector<int64_t>> chunk(ranks_.size());
      for (size_t r = 0; r < ranks_.size(); ++r) plan_rank(r, batch, rec, chunked[r], chunk[r]);
      if (batch.sequences.empty()) {
        if (next >= released_) throw ConfigError("scheduler: requests left that no rank can run");
        now = std::max(now, out_.requests[next].arrival_s);
        continue;
      }
      batch.prefill = rec.prefill_tokens > 0;
      rec.start_s = now;
      rec.time_s = cost_(batch);
      if (!(rec.time_s > 0) || !std::isfinite(rec.time_s))
        throw ConfigError("scheduler: expected a positive step time from the cost model, got " +
                          std::to_string(rec.time_s));
      rec.balance_ratio = balance_ratio(batch);
      now += rec.time_s;
      for (size_t r = 0; r < ranks_.size(); ++r) finished += advance(r, chunked[r], chunk[r], now);
      double use = 0;
      for (const Rank& k : ranks_) {
        int64_t cached = 0;
        for (size_t i : k.active) cached += live_[i].cached;
        use = std::max(use, static_cast<double>(cached) / static_cast<double>(lim_.kv_capacity_tokens));
      }
      rec.kv_use = use;
      out_.steps.push_back(rec);
    }
    out_.end_s = now;
    return out_;
  }

 private:
  // The rank an arriving request goes to: round robin, or the fewest KV tokens held, promised and queued.
  void assign(size_t i) {
    size_t r = 0;
    if (lim_.balance == RequestBalance::round_robin) {
      r = static_cast<size_t>(round_robin_++ % ranks_.size());
    } else {
      int64_t best = std::numeric_limits<int64_t>::max();
      for (size_t k = 0; k < ranks_.size(); ++k) {
        int64_t load = ranks_[k].reserved;
        for (size_t q : ranks_[k].queue) load += req_[q].prompt_tokens;
        if (load < best) best = load, r = k;
      }
    }
    out_.requests[i].rank = static_cast<int>(r);
    live_[i].target = req_[i].prompt_tokens;
    live_[i].prefilled = lim_.arrive_prefilled;
    ranks_[r].queue.push_back(i);
  }

  // Preempts the latest-admitted requests until the decoding requests' next tokens fit; then picks the prefill
  // chunks. Appends the rank's sequences to the batch.
  void plan_rank(size_t r, StepBatch& batch, ServeStepRecord& rec, std::vector<size_t>& chunked, std::vector<int64_t>& chunk) {
    Rank& k = ranks_[r];
    auto decoding = [&] {
      int64_t n = 0;
      for (size_t i : k.active) n += live_[i].cached >= live_[i].target ? 1 : 0;
      return n;
    };
    const int64_t per = 1 + lim_.mtp_draft;  // tokens a decoding request runs a step
    bool preempted = false;
    while (!k.active.empty() && k.reserved + per * decoding() > lim_.kv_capacity_tokens) {
      preempt(k);
      preempted = true;
    }
    // Requests that arrive with their KV join the decoding ones while the rank has room (their next token's too).
    while (!preempted && !k.queue.empty() && static_cast<int64_t>(k.active.size()) < lim_.max_batch) {
      const size_t i = k.queue.front();
      Live& l = live_[i];
      if (!l.prefilled || k.reserved + l.target + per * (decoding() + 1) > lim_.kv_capacity_tokens) break;
      k.queue.pop_front();
      k.active.push_back(i);
      k.reserved += l.target;
      l.cached = l.target;
      l.generated = std::max<int64_t>(l.generated, 1);
      l.prefilled = false;
    }
    int64_t budget = lim_.max_num_tokens;
    for (size_t i : k.active) {
      const Live& l = live_[i];
      if (l.cached < l.target) continue;
      StepSequence s;
      s.context_tokens = l.cached + per;
      s.query_tokens = per;
      s.attended_positions = per * l.cached + per * (per + 1) / 2;
      s.decoding = true;
      batch.sequences.push_back(s);
      batch.rank.push_back(static_cast<int>(r));
      ++rec.decode_requests;
      rec.decode_tokens += per;
      budget -= per;
    }
    auto add_chunk = [&](size_t i) {
      const Live& l = live_[i];
      const int64_t c = std::min(budget, l.target - l.cached);
      StepSequence s;
      s.query_tokens = c;
      s.context_tokens = l.cached + c;
      s.attended_positions = c * l.cached + c * (c + 1) / 2;
      batch.sequences.push_back(s);
      batch.rank.push_back(static_cast<int>(r));
      rec.prefill_tokens += c;
      budget -= c;
      chunked.push_back(i);
      chunk.push_back(c);
    };
    for (size_t i : k.active)
      if (budget > 0 && live_[i].cached < live_[i].target) add_chunk(i);
    // No admission on a step that had to preempt: the freed cache is for the requests still decoding.
    while (!preempted && budget > 0 && !k.queue.empty() && static_cast<int64_t>(k.active.size()) < lim_.max_batch) {
      const size_t i = k.queue.front();
      if (live_[i].prefilled || k.reserved + live_[i].target > lim_.kv_capacity_tokens) break;
      k.queue.pop_front();
      k.active.push_back(i);
      k.reserved += live_[i].target;
      add_chunk(i);
    }
  }

  void preempt(Rank& k) {
    const size_t i = k.active.back();
    k.active.pop_back();
    Live& l = live_[i];
    // Decoding, it reserved its cache; prefilling, its whole target.
    k.reserved -= std::max(l.cached, l.target);
    l.cached = 0;
    l.target = req_[i].prompt_tokens + l.generated;
    l.prefilled = false;  // it recomputes here
    k.queue.push_front(i);
    ++out_.requests[i].preemptions;
    ++out_.preemptions;
  }

  // After the step ends at `now`: decoding requests cache one token and produce the next, chunks are cached, a
  // finished prompt produces its token. Returns the requests that finished.
  size_t advance(size_t r, const std::vector<size_t>& chunked, const std::vector<int64_t>& chunk, double now) {
    Rank& k = ranks_[r];
    size_t finished = 0;
    for (size_t i : k.active) {
      Live& l = live_[i];
      const auto c = std::find(chunked.begin(), chunked.end(), i);
      if (c != chunked.end()) {
        l.cached += chunk[static_cast<size_t>(c - chunked.begin())];
        if (l.cached < l.target) continue;
      } else if (l.cached >= l.target) {
        // The decoding token and the accepted drafts: their KV kept, each a token out.
        const int64_t kept = std::min(1 + accepted_drafts(i, l.generated), req_[i].output_tokens - l.generated);
        l.cached += kept;
        k.reserved += kept;
        l.generated += kept;
        continue;
      } else {
        continue;  // prefilling, no chunk this step
      }
      ++l.generated;
      if (l.generated == 1) out_.requests[i].first_token_s = now;
    }
    std::vector<size_t> kept;
    for (size_t i : k.active) {
      Live& l = live_[i];
      if (l.generated >= req_[i].output_tokens) {
        out_.requests[i].finish_s = now;
        if (released_ < req_.size() && lim_.concurrency > 0) out_.requests[released_++].arrival_s = now;
        k.reserved -= l.cached;
        l.cached = 0;
        ++finished;
      } else {
        kept.push_back(i);
      }
    }
    k.active = std::move(kept);
    return finished;
  }

  // Draft tokens accepted this step: each with chance mtp_accept given the ones before it.
  int64_t accepted_drafts(size_t i, int64_t generated) const {
    int64_t n = 0;
    const uint64_t index = (static_cast<uint64_t>(i) << 32) ^ static_cast<uint64_t>(generated);
    while (n < lim_.mtp_draft &&
           counter_uniform(lim_.seed, kStreamMtpAccept, index * 64 + static_cast<uint64_t>(n)) < lim_.mtp_accept)
      ++n;
    return n;
  }

  double balance_ratio(const StepBatch& b) const {
    std::vector<RankShare> shares(ranks_.size());
    for (size_t s = 0; s < b.sequences.size(); ++s) {
      add_sequence(shares[static_cast<size_t>(b.rank[s])], b.sequences[s]);
    }
    return rank_balance_ratio(shares, !b.prefill);
  }

  const std::vector<Request>& req_;
  SchedulerLimits lim_;
  const StepCoster& cost_;
  std::vector<Live> live_;
  std::vector<Rank> ranks_;
  Schedule out_;
  uint64_t round_robin_ = 0;
  size_t released_ = 0;  // requests whose arrival is known (all of an open stream's)
};

}  // namespace

Schedule schedule_requests(const std::vector<Request>& requests, const SchedulerLimits& limits, const StepCoster& cost) {
  if (limits.ranks < 1) throw ConfigError("ranks: expected at least 1 attention data-parallel rank, got " +
                                          std::to_string(limits.ranks));
  if (limits.concurrency < 0)
    throw ConfigError("concurrency: expected 0 (arrivals as given) or more clients, got " +
                      std::to_string(limits.concurrency));
  if (limits.max_batch < 1)
    throw ConfigError("max_batch: expected at least 1 request a rank, got " + std::to_string(limits.max_batch));
  if (limits.mtp_draft < 0 || limits.mtp_draft > 16 || !(limits.mtp_accept >= 0 && limits.mtp_accept <= 1))
    throw ConfigError("mtp_draft: expected 0 to 16 draft tokens accepted with a chance in [0, 1]");
  if (limits.max_num_tokens < limits.max_batch * (1 + limits.mtp_draft))
    throw ConfigError("max_num_tokens: expected at least max_batch x (1 + mtp_draft) (" +
                      std::to_string(limits.max_batch * (1 + limits.mtp_draft)) + ") tokens a rank and step, got " +
                      std::to_string(limits.max_num_tokens));
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& q = requests[i];
    if (limits.concurrency == 0 && i > 0 && q.arrival_s < requests[i - 1].arrival_s)
      throw ConfigError("requests: expected arrivals in order, got request " + std::to_string(i) + " before " +
                        std::to_string(i - 1));
    if (limits.arrive_prefilled && q.output_tokens < 2)
      throw ConfigError("requests: expected more than one output token for a disaggregated decode, got request " +
                        std::to_string(i) + " with " + std::to_string(q.output_tokens));
    if (q.prompt_tokens + q.output_tokens + limits.mtp_draft > limits.kv_capacity_tokens)
      throw ConfigError("kv_capacity: expected a rank's KV cache (" + std::to_string(limits.kv_capacity_tokens) +
                        " tokens) to hold request " + std::to_string(i) + "'s prompt, output and draft tokens (" +
                        std::to_string(q.prompt_tokens + q.output_tokens + limits.mtp_draft) + " tokens), got less");
  }
  return Scheduler(requests, limits, cost).run();
}

std::vector<RankShare> mean_shares(const StepBatch& b, int ranks) {
  RankShare total;
  for (const StepSequence& s : b.sequences) add_sequence(total, s);
  const int64_t r = std::max(1, ranks);
  auto share = [r](int64_t v) { return (v + r - 1) / r; };
  RankShare mean;
  mean.sequences = share(total.sequences);
  mean.context_tokens = share(total.context_tokens);
  mean.query_tokens = share(total.query_tokens);
  mean.attended_positions = share(total.attended_positions);
  mean.decode_sequences = std::min(mean.sequences, share(total.decode_sequences));
  mean.decode_context_tokens = std::min(mean.context_tokens, share(total.decode_context_tokens));
  mean.decode_query_tokens = std::min(mean.query_tokens, share(total.decode_query_tokens));
  mean.decode_attended_positions = std::min(mean.attended_positions, share(total.decode_attended_positions));
  return std::vector<RankShare>(static_cast<size_t>(r), mean);
}

LatencySummary summarize_latency(std::vector<double> v) {
  LatencySummary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(v.size() - 1, lo + 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  s.p50 = at(0.5);
  s.p90 = at(0.9);
  s.p99 = at(0.99);
  return s;
}

}  // namespace moesim
