// Expert choice by selection on the host (see expert_choice_rows.hpp).
#include "kernels/host/expert_choice_rows.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include "router/expert_choice.hpp"

namespace moesim {

void expert_choice_rows(const float* logits, int64_t num_tokens, int num_experts, ScoreFunction score, double scaling,
                        int64_t capacity, int64_t group_tokens, int32_t* token, int32_t* expert, float* weight,
                        double* score_scratch, bool parallel) {
  const int64_t total = expert_choice_assignments(num_tokens, num_experts, capacity, group_tokens);
  if (total == 0) return;
  const int64_t s = group_tokens > 0 ? group_tokens : num_tokens;
  const router_detail::TokenScoresFunctor scores{logits, num_experts, score, score_scratch};
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < num_tokens; ++t) scores(t);
  // Experts in blocks of kBlock: each block's scores of a group are read a row at a time (contiguous) into one
  // column per expert.
  constexpr int kBlock = 16;
  const int64_t groups = (num_tokens + s - 1) / s;
  const int64_t blocks = (num_experts + kBlock - 1) / kBlock;
  const int64_t c_full = std::min(capacity, s);
#pragma omp parallel if (parallel)
  {
    std::vector<double> column;
    std::vector<int32_t> order;
#pragma omp for schedule(dynamic, 1)
    for (int64_t job = 0; job < groups * blocks; ++job) {
      const int64_t g = job / blocks;
      const int e0 = static_cast<int>(job % blocks) * kBlock;
      const int e1 = std::min(num_experts, e0 + kBlock);
      const int64_t first = g * s;
      const int64_t len = std::min(s, num_tokens - first);
      const int64_t c_g = std::min(capacity, len);
      column.resize(static_cast<size_t>(len) * kBlock);
      for (int64_t i = 0; i < len; ++i) {
        const double* row = score_scratch + (first + i) * num_experts;
        for (int e = e0; e < e1; ++e) column[static_cast<size_t>((e - e0) * len + i)] = row[e];
      }
      for (int e = e0; e < e1; ++e) {
        const double* col = column.data() + static_cast<size_t>(e - e0) * len;
        // ExpertChoiceOrder within one (group, expert): descending score, then ascending token.
        const auto better = [col](int32_t a, int32_t b) { return col[a] != col[b] ? col[a] > col[b] : a < b; };
        order.resize(static_cast<size_t>(len));
        std::iota(order.begin(), order.end(), 0);
        if (c_g < len) std::nth_element(order.begin(), order.begin() + c_g, order.end(), better);
        std::sort(order.begin(), order.begin() + c_g, better);
        const int64_t out = g * num_experts * c_full + static_cast<int64_t>(e) * c_g;
        for (int64_t c = 0; c < c_g; ++c) {
          const int32_t i = order[static_cast<size_t>(c)];
          token[out + c] = static_cast<int32_t>(first + i);
          expert[out + c] = e;
          weight[out + c] = static_cast<float>(col[i] * scaling);
        }
      }
    }
  }
}

}  // namespace moesim
