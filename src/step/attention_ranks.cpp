// Attention over data-parallel ranks (see attention_ranks.hpp).
#include "src/step/attention_ranks.hpp"

#include <algorithm>

#include "src/common/error.hpp"

namespace moesim {

std::vector<RankShare> spread_requests(const std::vector<StepSequence>& sequences, int ranks, RequestBalance policy) {
  MOESIM_REQUIRE(ranks >= 1, "spread_requests needs at least one rank, got " << ranks);
  std::vector<RankShare> shares(static_cast<std::size_t>(ranks));
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    std::size_t r = i % shares.size();
    if (policy == RequestBalance::kv_tokens) {
      r = 0;
      for (std::size_t q = 1; q < shares.size(); ++q)
        if (shares[q].context_tokens < shares[r].context_tokens) r = q;
    }
    add_sequence(shares[r], sequences[i]);
  }
  return shares;
}

void add_sequence(RankShare& s, const StepSequence& q) {
  ++s.sequences;
  s.context_tokens += q.context_tokens;
  s.query_tokens += q.query_tokens;
  s.attended_positions += q.attended_positions;
  if (q.decoding || q.query_tokens == 1) {
    ++s.decode_sequences;
    s.decode_context_tokens += q.context_tokens;
    s.decode_query_tokens += q.query_tokens;
    s.decode_attended_positions += q.attended_positions;
  }
}

RankAttention attention_over_ranks(const HardwareProfile& hw, const AttentionShape& shape,
                                   const std::vector<RankShare>& shares, bool decode) {
  MOESIM_REQUIRE(!shares.empty(), "attention_over_ranks needs at least one rank");
  RankAttention a;
  double sum = 0;
  for (const RankShare& s : shares) {
    CostBreakdown c;  // a rank without sequences runs no attention
    if (s.sequences > 0)
      c = decode ? attention_decode_time(hw, shape, s.sequences, s.context_tokens)
                 : attention_prefill_time(hw, shape, s.query_tokens, s.attended_positions);
    a.rank_s.push_back(c.quantized_s);
    if (a.rank_s.size() == 1 || c.quantized_s > a.slowest.quantized_s) a.slowest = c;
    sum += c.quantized_s;
  }
  a.mean_s = sum / static_cast<double>(shares.size());
  a.wait_s = a.slowest.quantized_s - a.mean_s;
  a.balance_ratio = rank_balance_ratio(shares, decode);
  return a;
}

double rank_balance_ratio(const std::vector<RankShare>& shares, bool decode) {
  double token_sum = 0, token_max = 0;
  for (const RankShare& s : shares) {
    const double tokens = static_cast<double>(decode ? s.context_tokens : s.query_tokens);
    token_sum += tokens;
    token_max = std::max(token_max, tokens);
  }
  return token_max > 0 ? token_sum / static_cast<double>(shares.size()) / token_max : 1.0;
}

}  // namespace moesim
