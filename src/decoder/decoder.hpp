// The decoder workload (`workload.source: decoder`): seeded MoE decoder layers (RMSNorm, attention with a
// KV cache, RMSNorm, MoE FFN routed by route_omp with one RouterState per layer kept across steps), final
// norm, small-vocabulary head and greedy argmax, run for a prompt prefill and workload.decode_steps steps
// at the `execute:` size. In: an Experiment and a RouterConfig; out: one DecoderRecord per (step, layer).
// Bytewise identical at any thread count, OpenBLAS kernel and x86-64 CPU apart from measured times: every
// GEMM runs on the fixed-order kernel (kernels/gemm_fixed_order.hpp). Built by g++ (OpenMP).
// Covered by tests/decoder/decoder_test.cpp; docs/workloads.md describes the design.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/decoder/attention_layer.hpp"
#include "src/decoder/decoder_shape.hpp"
#include "kernels/moe_layer.hpp"
#include "router/balance_metrics.hpp"
#include "router/route.hpp"

namespace moesim {

// Token embeddings: x = kTopicWeight * centre[topic of the sequence] + kTokenWeight * embedding[token],
// both N(0, 1) per element (kTopicWeight^2 + kTokenWeight^2 = 1 keeps unit variance). The shared
// centre makes the tokens of one sequence route alike (temporal locality); docs/workloads.md.
constexpr double kTopicWeight = 0.6;
constexpr double kTokenWeight = 0.8;

// Prompt length of each of the workload.batch sequences: one length for all, one per sequence, or
// drawn uniformly from [LO, HI] per sequence from the seed (prompt_len_range).
std::vector<int> decoder_prompt_lengths(const WorkloadConfig& w);

// Bytes the decoder allocates (weights, KV cache, activations of the prefill, MoE buffers), estimated
// from the experiment before anything is allocated.
double estimate_decoder_bytes(const Experiment& e);

// sum(decoder_prompt_lengths(w)) without materialising the lengths, so that the memory estimate of any
// workload.batch allocates nothing: exact up to kExactPromptTokens sequences (a hash per sequence for a
// LO..HI range); beyond that, a range counts its mean length per sequence.
constexpr int64_t kExactPromptTokens = int64_t{1} << 22;
double decoder_prompt_tokens(const WorkloadConfig& w);

struct DecoderLayerWeights {
  AttentionWeights attention;
  std::vector<float> ffn_norm;         // [hidden]
  std::vector<float> router;           // [hidden, experts], N(0, 1/hidden)
  std::vector<float> popularity_bias;  // [experts] popularity_at(workload, E, groups, seed + layer, 0)
  ExpertWeights experts;               // [experts] SwiGLU
  ExpertWeights shared;                // [shared_experts] SwiGLU (num_experts 0 when none)
};

struct DecoderWeights {
  DecoderShape shape;
  std::vector<float> topic_centre;     // [topics, hidden]
  std::vector<float> token_embedding;  // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers;
  std::vector<float> final_norm;       // [hidden]
  std::vector<float> lm_head;          // [hidden, vocab]
};

// groups: router.groups (workload.group_skew's groups).
DecoderWeights make_decoder_weights(const DecoderShape& shape, uint64_t seed, const WorkloadConfig& workload,
                                    int groups);

// One layer of one step. Steps: 0 is the prefill, 1..decode_steps the decode steps.
struct DecoderRecord {
  DecoderPhase phase = DecoderPhase::prefill;
  int step = 0;
  int layer = 0;
  int64_t num_tokens = 0;          // tokens routed (prefill: sum of prompt lengths; decode: batch)
  int64_t context_tokens = 0;      // tokens in this layer's KV cache after the step's append (all sequences)
  int64_t attended_positions = 0;  // sum over the step's tokens of the positions each attends to (pos + 1)
  double kv_cache_bytes = 0;       // executed cache in use for this layer after the step (float32)
  BalanceMetrics metrics;          // routing of this layer and step (load = tokens per expert)
  std::vector<float> expert_bias;  // aux_free_bias: this layer's bias after this step's update, else empty
  DecoderTimes measured;
};

// What the last step's last layer fed its router, kept so that the pipeline can re-time that MoE layer
// (the variant's routing against balanced routing) on real decoder hidden states.
struct DecoderMoeInput {
  int layer = 0;
  int step = 0;
  int64_t num_tokens = 0;
  std::vector<float> x;              // [num_tokens, hidden] the MoE input (after its RMSNorm)
  std::vector<float> logits;         // [num_tokens, experts] router logits (bias included)
  std::vector<int64_t> token_ids;    // [num_tokens]
  int64_t sequence_length = 0;
  uint64_t seed = 0;
};

struct DecoderRun {
  std::vector<int> prompt_len;                // [batch]
  std::vector<int> topic;                     // [batch]
  std::vector<std::vector<int32_t>> tokens;   // [batch][prompt_len + decode_steps + 1]: prompt, then generated
  std::vector<DecoderRecord> records;         // step-major, then layer
  std::vector<double> step_wall_s;            // [1 + decode_steps] whole steps (embedding to argmax)
  std::vector<float> last_logits;             // [batch, vocab] logits of the last step
  std::vector<float> final_hidden;            // [tokens of the last step, hidden] residual stream after the last layer
  std::vector<RouterState> router_states;     // [layers] after the last step
  std::vector<double> kv_cache_bytes_per_step;  // [1 + decode_steps] executed cache in use, all layers
  double kv_cache_allocated_bytes = 0;        // executed cache, preallocated
  DecoderMoeInput last_moe_input;
};

// Route request seed of (step, layer): the same for every variant, so noisy and random gatings differ
// between variants only by their strategy.
uint64_t decoder_route_seed(uint64_t seed, int step, int layer);

class Decoder {
 public:
  // Allocates and fills the weights (not the cache). A validated Experiment always runs; the
  // preconditions (batch >= 1, prompt lengths >= 1) throw PreconditionError otherwise.
  explicit Decoder(const Experiment& e);

  const Experiment& experiment() const { return e_; }
  const DecoderShape& shape() const { return w_.shape; }
  const DecoderWeights& weights() const { return w_; }

  // Sees each layer's routing as it is made: its record (phase, step, layer, num_tokens set), the Routing,
  // the router logits [num_tokens, experts] and token ids [num_tokens]; pointers live for the call only.
  using RoutingObserver =
      std::function<void(const DecoderRecord&, const Routing&, const float* logits, const int64_t* token_ids)>;

  // Prefill then workload.decode_steps decode steps, routed with `router`. Allocates the KV cache.
  // `observe` (may be empty) is called with every MoE layer's routing, steps in order, then layers.
  DecoderRun run(const RouterConfig& router, const RoutingObserver& observe = {}) const;

 private:
  Experiment e_;
  DecoderWeights w_;
};

}  // namespace moesim
