// Token-choice gating on the host in one pass over each token's logits: the finite check, the top-k
// selection and the weights of router/topk_gating.hpp's TokenChoiceFunctor, while the row is in cache.
// The selection is select_topk_row's (router/gating_common.hpp), with the candidates found by SIMD
// compares: a first sweep takes the maximum of each of L lanes (AVX-512: 16, AVX2: 8) and checks every
// logit is finite; the top_k-th largest lane maximum is a lower bound T of the row's top_k-th largest
// value (the lanes hold distinct experts), so only experts with logit >= T are inserted, in expert order,
// and the stable top-k of that subsequence is the row's. The insertions, the keys and the weights are
// those of the portable code, so the bytes are the same on every body and at any thread count.
// Bodies: AVX-512F, AVX2, portable (select_topk_row), chosen at run time (MOESIM_TOPK_KERNEL=portable|avx2|
// avx512 forces one the CPU has). Host only. Reference: router/topk_gating_ref.hpp; test:
// tests/router/topk_rows_test.cpp (every body against the reference on awkward shapes).
#pragma once

#include <cstdint>
#include <vector>

#include "router/gating_common.hpp"

namespace moesim {

enum class TopKBody { portable, avx2, avx512 };
const char* to_string(TopKBody b);

// The bodies this CPU runs, portable first; and the one used by default (the widest, or MOESIM_TOPK_KERNEL).
std::vector<TopKBody> available_topk_bodies();
TopKBody default_topk_body();

// token_choice_gating over logits [num_tokens, num_experts] (row-major), parallel over tokens (OpenMP when
// `parallel`): expert, weight [num_tokens * top_k] and key_scratch [num_tokens * top_k] as
// token_choice_gating writes them. Returns -1, or when a logit is not finite the first such index
// (token * num_experts + expert; the outputs are then unspecified).
int64_t token_choice_rows(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                          const GateWeightRule& rule, int32_t* expert, float* weight, double* key_scratch,
                          bool parallel, TopKBody body = default_topk_body());

}  // namespace moesim
