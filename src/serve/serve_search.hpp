// The steady state of a closed loop of fixed-length requests, and a search over layouts and batches by it
// (docs/serve.md "Searching layouts"): for each layout the step model's input is made once (its loads routed once by
// the caller and scaled), and each batch a rank costs one step. Fast enough for hundreds of layouts of a 61-layer
// model in seconds; the schedule (scheduler.hpp) is what a single layout's run uses. Host only, deterministic.
// Covered by tests/serve/serve_search_test.cpp.
//
// In steady state every rank holds `batch` requests, each decoding osl tokens and needing isl prompt tokens per
// cycle. With D draft tokens accepted at a (the base's mtp_draft, mtp_accept) a request gains g = 1 + a + ... + a^D
// tokens a step, running 1 + D query tokens; without, g = 1 and D = 0. A cycle takes
// S = max(osl / g, ceil(batch (isl + (1 + D) osl / g) / max_num_tokens)) steps, each running batch x (osl / g) / S
// decoding requests and batch x isl / S prompt tokens (chunked prefill spread evenly). Then
//   TPOT = S x step / osl,  output tokens/s a GPU = batch x osl / (S x step) / attention_tp,
//   tokens/s a user = 1 / TPOT,
//   TTFT = ceil(isl / chunk) x the step with the decoding requests and a chunk of
//          min(isl, max_num_tokens - (1 + D) decode) prompt tokens (a new prompt takes the step's whole prefill
//          budget until it is done).
// Every rank runs the same share (the ranks' imbalance is not in the steady state: a run shows it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/step/serving_step.hpp"

namespace moesim {

struct SteadyPoint {
  int64_t batch = 0;  // requests a rank
  double step_s = 0, tpot_s = 0, ttft_s = 0;
  double output_tokens_per_s_per_gpu = 0, tokens_per_s_per_user = 0;
  bool fits = true;   // the rank's KV cache holds batch x (isl + osl + D) tokens
};

// `base`: the step model's input for the layout (its loads; phase, shares and sequences are set here).
SteadyPoint steady_state(const ServingStepInput& base, int64_t batch, int64_t isl, int64_t osl, int64_t max_num_tokens,
                         int64_t kv_capacity_tokens);

// One layout of a search, as the caller labels it, with its points at each batch (actual routing and balanced).
struct SearchLayout {
  std::string label;
  std::vector<SteadyPoint> actual, balanced;
};

// The points on the front of output tokens/s a GPU against tokens/s a user (no other point is at least as good in
// both and better in one), over every layout's fitting points of `actual` (or `balanced`): [layout, point] pairs,
// by tokens/s a user.
std::vector<std::pair<size_t, size_t>> pareto_front(const std::vector<SearchLayout>& layouts, bool balanced);

// The best point of each layout that meets the targets (TPOT at most tpot_s, TTFT at most ttft_s; 0: no target),
// by output tokens/s a GPU: [layout, point] pairs, best first, at most `top`.
std::vector<std::pair<size_t, size_t>> best_under_targets(const std::vector<SearchLayout>& layouts, double tpot_s,
                                                          double ttft_s, size_t top);

}  // namespace moesim
