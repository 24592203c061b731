// Attention as data-parallel ranks run it (docs/workloads.md "Modeled time"): a step's sequences spread over
// the ranks of an expert-parallel placement by the engine's policy, each rank's attention costed on its own
// sequences and KV tokens, and the layer's all-to-all waiting for the slowest rank. Above the cost model's
// attention roofline (src/cost/roofline.hpp), below the pipeline. Host only, pure arithmetic.
// Covered by tests/step/attention_ranks_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/roofline.hpp"

namespace moesim {

// One rank's share of a step: its sequences, the KV tokens they attend to (decode: each sequence's context
// after the step's append) and the query tokens it runs with the positions they attend (prefill).
struct RankShare {
  int64_t sequences = 0;
  int64_t context_tokens = 0;
  int64_t query_tokens = 0;
  int64_t attended_positions = 0;
  // Of which decoding, one query token each attending its context: in a step that also runs prompt chunks (a
  // mixed step), these run the decode attention kernel on their KV cache and the chunks the prefill kernel.
  int64_t decode_sequences = 0;
  int64_t decode_context_tokens = 0;
  int64_t decode_query_tokens = 0, decode_attended_positions = 0;  // 1 + draft tokens each, and what they attend
};

// One sequence of the step, as spread_requests places it.
struct StepSequence {
  int64_t context_tokens = 0;      // its KV tokens after the step's append
  int64_t query_tokens = 0;        // tokens it runs this step (decode 1 + draft tokens, prefill its prompt)
  int64_t attended_positions = 0;  // sum over those tokens of the positions each attends to
  bool decoding = false;           // a decoding request (with draft tokens, more than one query token)
};

// Adds one sequence to a rank's share (a sequence of one query token counts as decoding too; decoding ones add
// their query tokens, draft tokens included, to the decode part's context).
void add_sequence(RankShare& share, const StepSequence& sequence);

// The sequences over `ranks` ranks, in order: round_robin puts sequence i on rank i mod ranks (SGLang's DP
// attention default); kv_tokens puts each on the rank with the fewest KV tokens so far (ties: the lower rank),
// as the engines' load balancers do. Requires ranks >= 1.
std::vector<RankShare> spread_requests(const std::vector<StepSequence>& sequences, int ranks, RequestBalance policy);

// The attention of one layer over the ranks: each rank's modeled time (decode: attention_decode_time on its
// sequences and KV tokens; prefill: attention_prefill_time on its tokens), the slowest rank's, which the
// layer's all-to-all waits for, and the mean.
struct RankAttention {
  std::vector<double> rank_s;
  CostBreakdown slowest;       // the slowest rank's breakdown: what the layer pays
  double mean_s = 0;           // the ranks' mean quantized time: what balanced attention would pay
  double wait_s = 0;           // slowest - mean: what the attention imbalance costs the layer
  // TensorRT-LLM's balance ratio: mean over max tokens per rank (KV tokens in decode, query tokens in
  // prefill); 1 = even.
  double balance_ratio = 1;
};
// TensorRT-LLM's balance ratio of the shares: mean over max KV tokens per rank in decode (query tokens in prefill);
// 1 when every rank is empty.
double rank_balance_ratio(const std::vector<RankShare>& shares, bool decode);

RankAttention attention_over_ranks(const HardwareProfile& hw, const AttentionShape& shape,
                                   const std::vector<RankShare>& shares, bool decode);

}  // namespace moesim
