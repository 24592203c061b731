// The decoder step loop (see decoder.hpp): seeded weights, prompt lengths and tokens, prefill and greedy
// decode through attention with a KV cache and the MoE FFN, one DecoderRecord per layer and step. Every
// GEMM (projections, router, experts, head) runs on the fixed-order kernel, so hidden states, logits and
// routing are the same bits at any thread count, on any BLAS kernel and x86-64 CPU. Built by g++.
// Covered by tests/decoder/decoder_test.cpp.
#include "src/decoder/decoder.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <thrust/system/cpp/execution_policy.h>
#include <thrust/system/omp/execution_policy.h>

#include "src/common/clock.hpp"
#include "src/common/error.hpp"
#include "src/common/counter_rng.hpp"
#include "src/decoder/kv_cache.hpp"
#include "src/decoder/norms.hpp"
#include "kernels/gemm_fixed_order.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace {



// Streams of the counter-based generator (common/counter_rng.hpp), one per kind of draw.
enum Stream : uint64_t {
  kStreamTopicCentre = 1,
  kStreamTokenEmbedding = 2,
  kStreamLmHead = 3,
  kStreamPromptLen = 4,
  kStreamTopic = 5,
  kStreamPromptToken = 6,
  kStreamLayer = 7,
  kStreamRouter = 8,
  kStreamRoute = 9,
};

// Below this many elements a loop stays on the calling thread (see attention_layer.cpp).
constexpr int64_t kSerialElements = int64_t{1} << 16;

void add_into(float* x, const float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kSerialElements)
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

const char* to_string(DecoderPhase p) { return p == DecoderPhase::prefill ? "prefill" : "decode"; }

DecoderShape executed_decoder_shape(const Experiment& e) {
  const ModelConfig& m = e.model;
  DecoderShape s;
  s.layers = e.execute.layers;
  s.hidden = e.execute.hidden;
  s.ffn = e.execute.ffn;
  const int group = m.heads / std::max(1, m.kv_heads);
  const int64_t wanted = std::max<int64_t>(kMinExecutedHeadDim, e.execute.hidden / m.heads);
  s.head_dim = static_cast<int>(std::min<int64_t>(m.head_dim, wanted));
  int64_t heads = e.execute.hidden / s.head_dim / group * group;
  heads = std::max<int64_t>(group, std::min<int64_t>(heads, m.heads));
  s.heads = static_cast<int>(heads);
  s.kv_heads = s.heads / group;
  s.vocab = std::min(m.vocab, kDecoderVocab);
  s.experts = m.experts;
  s.top_k = m.top_k;
  s.shared_experts = m.shared_experts;
  s.topics = std::max(1, e.workload.topics);
  return s;
}

namespace {

// The preconditions of workload.prompt_len shared by decoder_prompt_lengths and decoder_prompt_tokens.
void check_prompt_len(const WorkloadConfig& w) {
  MOESIM_REQUIRE(w.batch >= 1 && !w.prompt_len.empty(), "the decoder needs workload.batch >= 1 and a prompt length");
  if (w.prompt_len_range) {
    MOESIM_REQUIRE(w.prompt_len.size() == 2 && w.prompt_len[0] >= 1 && w.prompt_len[0] <= w.prompt_len[1],
                   "workload.prompt_len range must be LO..HI with 1 <= LO <= HI");
  } else if (w.prompt_len.size() != 1) {
    MOESIM_REQUIRE(static_cast<int64_t>(w.prompt_len.size()) == w.batch,
                   "workload.prompt_len has " << w.prompt_len.size() << " lengths for " << w.batch << " sequences");
  }
  if (!w.prompt_len_range) {
    for (int l : w.prompt_len) MOESIM_REQUIRE(l >= 1, "prompt lengths must be >= 1, got " << l);
  }
}

// Sequence b's length under a LO..HI range, drawn from the seed.
int drawn_prompt_len(const WorkloadConfig& w, int64_t b) {
  const uint64_t span = static_cast<uint64_t>(w.prompt_len[1] - w.prompt_len[0]) + 1;
  return w.prompt_len[0] + static_cast<int>(counter_hash(w.seed, kStreamPromptLen, b) % span);
}

// Sequence b's length under a distribution or a file (workload.prompt_dist), drawn from the seed: at most
// kMaxRequestLength, so an int.
int dist_prompt_len(const WorkloadConfig& w, int64_t b) {
  return static_cast<int>(w.prompt_dist.draw(1, w.seed, static_cast<uint64_t>(b)));
}

}  // namespace

std::vector<int> decoder_prompt_lengths(const WorkloadConfig& w) {
  check_prompt_len(w);
  const int64_t B = w.batch;
  if (w.prompt_dist.kind != LengthKind::fixed) {
    std::vector<int> lens(B);
    for (int64_t b = 0; b < B; ++b) lens[b] = dist_prompt_len(w, b);
    return lens;
  }
  if (w.prompt_len_range) {
    std::vector<int> lens(B);
    for (int64_t b = 0; b < B; ++b) lens[b] = drawn_prompt_len(w, b);
    return lens;
  }
  if (w.prompt_len.size() == 1) return std::vector<int>(B, w.prompt_len[0]);
  return w.prompt_len;
}

double decoder_prompt_tokens(const WorkloadConfig& w) {
  check_prompt_len(w);
  const int64_t B = w.batch;
  if (w.prompt_dist.kind != LengthKind::fixed) {
    if (B > kExactPromptTokens) return static_cast<double>(B) * w.prompt_dist.mean(1);
    double sum = 0;
    for (int64_t b = 0; b < B; ++b) sum += dist_prompt_len(w, b);
    return sum;
  }
  if (w.prompt_len_range) {
    if (B > kExactPromptTokens) return static_cast<double>(B) * (0.5 * w.prompt_len[0] + 0.5 * w.prompt_len[1]);
    double sum = 0;
    for (int64_t b = 0; b < B; ++b) sum += drawn_prompt_len(w, b);
    return sum;
  }
  if (w.prompt_len.size() == 1) return static_cast<double>(B) * w.prompt_len[0];
  double sum = 0;
  for (int l : w.prompt_len) sum += l;
  return sum;
}

double estimate_decoder_bytes(const Experiment& e) {
  const DecoderShape s = executed_decoder_shape(e);
  const double prompt_tokens = decoder_prompt_tokens(e.workload);  // allocates nothing, whatever the batch
  const double B = static_cast<double>(e.workload.batch), D = e.workload.decode_steps;
  const double H = static_cast<double>(s.hidden), F = static_cast<double>(s.ffn), E = s.experts, k = s.top_k;
  const double qw = static_cast<double>(s.heads) * s.head_dim, kvw = static_cast<double>(s.kv_heads) * s.head_dim;
  const double V = s.vocab;
  const double per_layer = H * (qw + 2 * kvw) + qw * H + 2 * H + H * E + E + 3 * (E + s.shared_experts) * H * F;
  const double weights = s.layers * per_layer + (s.topics + V) * H + H + H * V;
  const double cache = s.layers * (prompt_tokens + B * D) * 2 * kvw;
  const double N = std::max(prompt_tokens, B);
  const double rows = N * k + E * std::max(64, e.router.block_size);  // worst padding
  const double acts = N * (4 * H + 2 * qw + 2 * kvw + 2 * E)              // x, norms, attention, logits
                      + rows * (2 * H + 2 * F)                          // gathered rows, scratch, expert outputs
                      + N * H * (s.shared_experts > 0 ? 1 : 0)          // shared-expert output
                      + B * (2 * V + 2 * H);                            // head
  const double routing = N * k * 13 * 2 + N * 8;                       // Routing and plan, token ids
  return 4 * (weights + cache + acts) + routing;
}

DecoderWeights make_decoder_weights(const DecoderShape& s, uint64_t seed, const WorkloadConfig& workload, int groups) {
  MOESIM_REQUIRE(s.layers >= 1 && s.hidden >= 1 && s.ffn >= 1 && s.vocab >= 1 && s.experts >= 1 && s.topics >= 1,
                 "decoder shape needs layers, hidden, ffn, vocab, experts, topics >= 1");
  DecoderWeights w;
  w.shape = s;
  w.topic_centre.resize(static_cast<size_t>(s.topics) * s.hidden);
  w.token_embedding.resize(static_cast<size_t>(s.vocab) * s.hidden);
  fill_seeded_normal(w.topic_centre, seed, kStreamTopicCentre, 1.0);
  fill_seeded_normal(w.token_embedding, seed, kStreamTokenEmbedding, 1.0);
  // Each layer's popularity is fixed over the steps: drift and batch_variation turn synthetic batches only.
  WorkloadConfig fixed = workload;
  fixed.drift = 0;
  fixed.batch_variation = 0;
  for (int l = 0; l < s.layers; ++l) {
    const uint64_t layer_seed = counter_hash(seed, kStreamLayer, static_cast<uint64_t>(l));
    DecoderLayerWeights lw;
    lw.attention = make_attention_weights(s.hidden, s.heads, s.kv_heads, s.head_dim, layer_seed);
    lw.ffn_norm.assign(s.hidden, 1.0f);
    lw.router.resize(static_cast<size_t>(s.hidden) * s.experts);
    fill_seeded_normal(lw.router, layer_seed, kStreamRouter, 1.0 / std::sqrt(static_cast<double>(s.hidden)));
    lw.popularity_bias = popularity_at(fixed, s.experts, groups, seed + static_cast<uint64_t>(l), 0);
    lw.experts = make_expert_weights(s.experts, s.hidden, s.ffn, layer_seed + 1);
    if (s.shared_experts > 0) lw.shared = make_expert_weights(s.shared_experts, s.hidden, s.ffn, layer_seed + 2);
    w.layers.push_back(std::move(lw));
  }
  w.final_norm.assign(s.hidden, 1.0f);
  w.lm_head.resize(static_cast<size_t>(s.hidden) * s.vocab);
  fill_seeded_normal(w.lm_head, seed, kStreamLmHead, 1.0 / std::sqrt(static_cast<double>(s.hidden)));
  return w;
}

uint64_t decoder_route_seed(uint64_t seed, int step, int layer) {
  return counter_hash(seed, kStreamRoute, (static_cast<uint64_t>(step) << 20) ^ static_cast<uint64_t>(layer));
}

Decoder::Decoder(const Experiment& e) : e_(e) {
  w_ = make_decoder_weights(executed_decoder_shape(e), e.workload.seed, e.workload, e.router.groups);
}

namespace {

// The tokens of one step, packed sequence by sequence (prefill: every prompt position; decode: one each).
struct StepBatch {
  std::vector<int32_t> seq, pos;   // [num_tokens] sequence and position of each token
  std::vector<int64_t> token_ids;  // [num_tokens]
  std::vector<int64_t> last_row;   // [batch] each sequence's last token in the step
  int64_t num_tokens = 0;
  int64_t attended = 0;            // sum over the tokens of the positions each attends to (pos + 1)
  int64_t context = 0;             // tokens in a layer's KV cache after the step (all sequences)
};

void pack_step(const DecoderRun& run, int step, StepBatch& sb) {
  const int64_t B = static_cast<int64_t>(run.prompt_len.size());
  sb.seq.clear();
  sb.pos.clear();
  sb.token_ids.clear();
  sb.last_row.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const int L = run.prompt_len[b];
    if (step == 0) {
      for (int p = 0; p < L; ++p) {
        sb.seq.push_back(static_cast<int32_t>(b));
        sb.pos.push_back(p);
        sb.token_ids.push_back(run.tokens[b][p]);
      }
    } else {
      sb.seq.push_back(static_cast<int32_t>(b));
      sb.pos.push_back(L + step - 1);
      sb.token_ids.push_back(run.tokens[b].back());
    }
    sb.last_row[b] = static_cast<int64_t>(sb.seq.size()) - 1;
  }
  sb.num_tokens = static_cast<int64_t>(sb.seq.size());
  sb.attended = 0;
  for (int32_t p : sb.pos) sb.attended += static_cast<int64_t>(p) + 1;
  sb.context = 0;
  for (int64_t b = 0; b < B; ++b) sb.context += static_cast<int64_t>(run.prompt_len[b]) + step;
}

// Activations of one step, reused across steps.
struct StepBuffers {
  std::vector<float> x, attn_out, xn, logits, y;  // [num_tokens, hidden] (logits: [num_tokens, experts])
  AttentionScratch scratch;
};

// Where a layer's routing comes from: the router, its per-sequence capacity scope and the step's seed.
struct LayerRouting {
  const RouterConfig& router;
  int64_t sequence_length;  // capacity_scope sequence: tokens per sequence (0: the whole batch)
  uint64_t seed;
};

// One layer of one step: attention with the KV cache and its residual, RMSNorm, router logits and
// routing, dispatch, SwiGLU experts (routed and shared) and combine with its residual; x is updated in
// place. Returns the layer's record; `req` receives the routing request (for the last MoE input).
DecoderRecord run_layer(const DecoderLayerWeights& lw, const DecoderShape& s, int layer, const StepBatch& sb,
                        KvCache& cache, StepBuffers& buf, const LayerRouting& routing, RouterState& state,
                        RouteRequest& req, const std::function<void(const Routing&)>& observe) {
  const int64_t N = sb.num_tokens, H = s.hidden, E = s.experts;
  DecoderRecord rec;
  rec.layer = layer;
  rec.num_tokens = N;
  rec.context_tokens = sb.context;
  rec.attended_positions = sb.attended;
  rec.kv_cache_bytes = KvCache::bytes_for(1, s.kv_heads, s.head_dim, static_cast<double>(sb.context), 4);

  const auto t0 = Clock::now();
  attention_layer_omp(lw.attention, cache, layer, buf.x.data(), sb.seq.data(), sb.pos.data(), N, buf.attn_out.data(),
                      buf.scratch);
  add_into(buf.x.data(), buf.attn_out.data(), N * H);
  rec.measured.attention_s = seconds_since(t0);

  const auto t1 = Clock::now();
  if (N * H < kSerialElements) {
    rms_norm(thrust::cpp::par, buf.x.data(), lw.ffn_norm.data(), N, H, buf.xn.data());
  } else {
    rms_norm(thrust::omp::par, buf.x.data(), lw.ffn_norm.data(), N, H, buf.xn.data());
  }
  sgemm_fixed_order_omp(buf.xn.data(), lw.router.data(), buf.logits.data(), N, H, E);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t ex = 0; ex < E; ++ex) buf.logits[t * E + ex] += lw.popularity_bias[ex];
  req = RouteRequest{};
  req.logits = buf.logits.data();
  req.num_tokens = N;
  req.num_experts = s.experts;
  req.top_k = s.top_k;
  req.token_ids = sb.token_ids.data();
  req.sequence_length = routing.sequence_length;
  req.seed = routing.seed;
  const Routing r = route_omp(routing.router, req, &state);
  rec.measured.router_s = seconds_since(t1);
  if (observe) observe(r);

  const auto t2 = Clock::now();
  const DispatchPlan plan = plan_dispatch_omp(r, routing.router.layout, routing.router.block_size);
  const double plan_s = seconds_since(t2);
  MoePhaseTimes phases;
  moe_forward_omp(lw.experts, s.shared_experts > 0 ? &lw.shared : nullptr, buf.xn.data(), r, plan, buf.y.data(),
                  &phases, HostGemm::fixed_order);
  const auto t3 = Clock::now();
  add_into(buf.x.data(), buf.y.data(), N * H);
  rec.measured.dispatch_s = plan_s + phases.dispatch_s;
  rec.measured.experts_s = phases.experts_s;
  rec.measured.combine_s = phases.combine_s + seconds_since(t3);
  rec.measured.layer_s = seconds_since(t0);
  rec.metrics = compute_balance_metrics(r, buf.logits.data(), routing.router.layout, routing.router.block_size);
  rec.expert_bias = state.expert_bias;
  return rec;
}

// Greedy next token of each sequence from its last row: final RMSNorm, the head, argmax (ties: the
// lower id). head_in, head_out: [batch, hidden], [batch, vocab] scratch; head_out keeps the logits.
void greedy_next_tokens(const DecoderWeights& w, const StepBatch& sb, const std::vector<float>& x,
                        std::vector<float>& head_in, std::vector<float>& head_out, DecoderRun& run) {
  const int64_t B = static_cast<int64_t>(sb.last_row.size()), H = w.shape.hidden, V = w.shape.vocab;
  head_in.resize(B * H);
  for (int64_t b = 0; b < B; ++b) std::copy_n(x.data() + sb.last_row[b] * H, H, head_in.data() + b * H);
  rms_norm(thrust::cpp::par, head_in.data(), w.final_norm.data(), B, H, head_in.data());
  head_out.resize(B * V);
  sgemm_fixed_order_omp(head_in.data(), w.lm_head.data(), head_out.data(), B, H, V);
  for (int64_t b = 0; b < B; ++b) {
    const float* row = head_out.data() + b * V;
    run.tokens[b].push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
  }
}

}  // namespace

DecoderRun Decoder::run(const RouterConfig& router, const RoutingObserver& observe) const {
  const DecoderShape& s = w_.shape;
  const WorkloadConfig& wl = e_.workload;
  const int64_t B = wl.batch, H = s.hidden, E = s.experts, V = s.vocab;
  const int D = wl.decode_steps;
  const uint64_t seed = wl.seed;

  DecoderRun run;
  run.prompt_len = decoder_prompt_lengths(wl);
  run.topic.resize(B);
  run.tokens.resize(B);
  std::vector<int64_t> capacity(B);
  int64_t prompt_tokens = 0;
  bool equal_lengths = true;
  for (int64_t b = 0; b < B; ++b) {
    const int L = run.prompt_len[b];
    run.topic[b] = static_cast<int>(counter_hash(seed, kStreamTopic, b) % static_cast<uint64_t>(s.topics));
    for (int p = 0; p < L; ++p) {
      const uint64_t index = (static_cast<uint64_t>(b) << 32) | static_cast<uint64_t>(p);
      run.tokens[b].push_back(static_cast<int32_t>(counter_hash(seed, kStreamPromptToken, index) % V));
    }
    capacity[b] = static_cast<int64_t>(L) + D;
    prompt_tokens += L;
    equal_lengths = equal_lengths && L == run.prompt_len[0];
  }
  MOESIM_REQUIRE(prompt_tokens + B * D < (int64_t{1} << 31), "the decoder's tokens must fit 32-bit positions");

  KvCache cache(s.layers, s.kv_heads, s.head_dim, capacity);
  run.kv_cache_allocated_bytes = cache.allocated_bytes();
  run.router_states.assign(s.layers, RouterState{});
  StepBatch sb;
  StepBuffers buf;
  std::vector<float> head_in, head_out;

  for (int step = 0; step <= D; ++step) {
    const auto t_step = Clock::now();
    const DecoderPhase phase = step == 0 ? DecoderPhase::prefill : DecoderPhase::decode;
    pack_step(run, step, sb);
    const int64_t N = sb.num_tokens;
    buf.x.resize(N * H);
    for (int64_t t = 0; t < N; ++t) {
      const float* c = w_.topic_centre.data() + static_cast<int64_t>(run.topic[sb.seq[t]]) * H;
      const float* te = w_.token_embedding.data() + sb.token_ids[t] * H;
      for (int64_t i = 0; i < H; ++i)
        buf.x[t * H + i] = static_cast<float>(kTopicWeight * c[i] + kTokenWeight * te[i]);
    }
    buf.attn_out.resize(N * H);
    buf.xn.resize(N * H);
    buf.y.resize(N * H);
    buf.logits.resize(N * E);

    for (int l = 0; l < s.layers; ++l) {
      // Per-sequence capacity needs one sequence length: the prefill of equal prompts has it; mixed
      // prompts and decode steps (one token per sequence) use the whole batch.
      const LayerRouting routing{router, (step == 0 && equal_lengths) ? run.prompt_len[0] : 0,
                                 decoder_route_seed(seed, step, l)};
      RouteRequest req;
      std::function<void(const Routing&)> observe_layer;
      if (observe) {
        observe_layer = [&](const Routing& r) {
          DecoderRecord seen;
          seen.phase = phase;
          seen.step = step;
          seen.layer = l;
          seen.num_tokens = r.num_tokens;
          observe(seen, r, buf.logits.data(), sb.token_ids.data());
        };
      }
      DecoderRecord rec =
          run_layer(w_.layers[l], s, l, sb, cache, buf, routing, run.router_states[l], req, observe_layer);
      rec.phase = phase;
      rec.step = step;
      run.records.push_back(std::move(rec));
      if (step == D && l == s.layers - 1) {
        DecoderMoeInput& in = run.last_moe_input;
        in.layer = l;
        in.step = step;
        in.num_tokens = N;
        in.x = buf.xn;
        in.logits = buf.logits;
        in.token_ids = sb.token_ids;
        in.sequence_length = req.sequence_length;
        in.seed = req.seed;
      }
    }
    for (int64_t b = 0; b < B; ++b) cache.set_length(b, static_cast<int64_t>(run.prompt_len[b]) + step);
    run.kv_cache_bytes_per_step.push_back(cache.used_bytes());

    greedy_next_tokens(w_, sb, buf.x, head_in, head_out, run);
    run.step_wall_s.push_back(seconds_since(t_step));
    if (step == D) {
      run.last_logits = head_out;
      run.final_hidden = buf.x;
    }
  }
  return run;
}

}  // namespace moesim
