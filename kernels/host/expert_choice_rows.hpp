// Expert-choice gating on the host, the result of router/expert_choice.hpp's expert_choice_gating (the same
// bytes) without its one sort of every (token, expert) pair: the scores as TokenScoresFunctor writes them,
// then each expert of each group takes its best min(C, group length) tokens by a selection under the same
// total order (score descending, token ascending), sorts only those, and writes them where the sorted
// permutation would have put them. O(N E) per batch instead of O(N E log(N E)); parallel over blocks of
// experts (OpenMP when `parallel`), deterministic at any thread count. Host only. Reference:
// router/expert_choice_ref.hpp; test: tests/router/topk_rows_test.cpp (against the generic template).
#pragma once

#include <cstdint>

#include "src/config/experiment.hpp"

namespace moesim {

// Arguments as expert_choice_gating's; score_scratch: [num_tokens * num_experts].
void expert_choice_rows(const float* logits, int64_t num_tokens, int num_experts, ScoreFunction score, double scaling,
                        int64_t capacity, int64_t group_tokens, int32_t* token, int32_t* expert, float* weight,
                        double* score_scratch, bool parallel);

}  // namespace moesim
