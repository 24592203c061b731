// kernels/host/expert_choice_rows: the selection per expert against expert_choice_gating's one sort, on the
// same kinds of inputs, groups (capacity_scope sequence) and capacities past a group's length included.
// kernels/host/topk_rows: every body this CPU has (portable, AVX2, AVX-512) against the generic token-choice
// template (router/topk_gating.hpp, the bytes routing had before) and the plain-loop reference, on fresh
// random inputs of awkward shapes: E 1, 3, 13, 16, 17, 256, 257; k from 1 to E; ties (quantised logits);
// a NaN or an infinity anywhere, the last position included, reported as its first index. Same bytes at any
// thread count.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <thrust/system/cpp/execution_policy.h>

#include "kernels/host/expert_choice_rows.hpp"
#include "kernels/host/topk_rows.hpp"
#include "router/expert_choice.hpp"
#include "router/topk_gating.hpp"
#include "router/topk_gating_ref.hpp"

namespace moesim {
namespace {

std::vector<float> logits_of(int64_t n, int num_experts, uint64_t seed, bool ties) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n * num_experts));
  for (float& v : x) v = ties ? std::round(normal(rng)) : normal(rng);  // ties: a few distinct values a row
  return x;
}

struct Out {
  std::vector<int32_t> expert;
  std::vector<float> weight;
  std::vector<double> key;
};

Out generic(const std::vector<float>& x, int64_t n, int num_experts, int k, const GateWeightRule& rule) {
  Out o{std::vector<int32_t>(n * k), std::vector<float>(n * k), std::vector<double>(n * k)};
  token_choice_gating(thrust::cpp::par, x.data(), n, num_experts, k, rule, o.expert.data(), o.weight.data(),
                      o.key.data());
  return o;
}

Out rows(const std::vector<float>& x, int64_t n, int num_experts, int k, const GateWeightRule& rule, TopKBody body,
         bool parallel, int64_t* bad) {
  Out o{std::vector<int32_t>(n * k), std::vector<float>(n * k), std::vector<double>(n * k)};
  *bad = token_choice_rows(x.data(), n, num_experts, k, rule, o.expert.data(), o.weight.data(), o.key.data(),
                           parallel, body);
  return o;
}

std::vector<GateWeightRule> rules() {
  std::vector<GateWeightRule> out;
  for (ScoreFunction score : {ScoreFunction::softmax, ScoreFunction::sigmoid})
    for (bool pre : {true, false})
      for (bool renorm : {true, false}) out.push_back(GateWeightRule{score, pre, renorm, 2.5});
  return out;
}

TEST(TopKRows, EveryBodyGivesTheBytesOfTheGenericPassAndTheReferencesExperts) {
  const std::vector<TopKBody> bodies = available_topk_bodies();
  ASSERT_EQ(bodies.front(), TopKBody::portable);
  uint64_t seed = 20261205;
  int cases = 0;
  for (int num_experts : {1, 3, 13, 16, 17, 64, 256, 257}) {
    for (int k : {1, 2, 3, 7, 8, 9, 16, 17, num_experts}) {
      if (k > num_experts) continue;
      for (bool ties : {false, true}) {
        const int64_t n = 37 + static_cast<int64_t>(seed % 23);
        const std::vector<float> x = logits_of(n, num_experts, ++seed, ties);
        const GateWeightRule rule = rules()[seed % rules().size()];
        const Out want = generic(x, n, num_experts, k, rule);
        std::vector<int32_t> ref_expert;
        std::vector<float> ref_weight;
        token_choice_gating_ref(x.data(), n, num_experts, k, rule, ref_expert, ref_weight);
        EXPECT_EQ(want.expert, ref_expert) << "E " << num_experts << " k " << k << " seed " << seed;
        for (TopKBody body : bodies) {
          for (bool parallel : {false, true}) {
            int64_t bad = 0;
            const Out got = rows(x, n, num_experts, k, rule, body, parallel, &bad);
            EXPECT_EQ(bad, -1);
            EXPECT_EQ(got.expert, want.expert) << to_string(body) << " E " << num_experts << " k " << k << " seed " << seed;
            EXPECT_EQ(got.weight, want.weight) << to_string(body) << " E " << num_experts << " k " << k << " seed " << seed;
            EXPECT_EQ(got.key, want.key) << to_string(body) << " E " << num_experts << " k " << k << " seed " << seed;
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 100);
}

TEST(TopKRows, TheFirstLogitThatIsNotFiniteIsReported) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int num_experts : {3, 16, 17, 256, 257}) {
    const int64_t n = 41;
    for (const auto& [token, expert, value] :
         std::vector<std::tuple<int64_t, int, float>>{{n - 1, num_experts - 1, nan}, {0, 0, inf}, {20, num_experts / 2, -inf},
                                                      {7, num_experts - 1, inf}}) {
      std::vector<float> x = logits_of(n, num_experts, 99, false);
      x[token * num_experts + expert] = value;
      x[(n - 1) * num_experts] = nan;  // a later one is not the first
      if (token == n - 1) x[(n - 1) * num_experts] = 0.5f;
      for (TopKBody body : available_topk_bodies()) {
        for (bool parallel : {false, true}) {
          int64_t bad = 0;
          rows(x, n, num_experts, 2, GateWeightRule{}, body, parallel, &bad);
          EXPECT_EQ(bad, token * num_experts + expert) << to_string(body) << " E " << num_experts;
        }
      }
    }
  }
}

TEST(TopKRows, SameBytesAtEveryThreadCount) {
  const int64_t n = 5000;
  const std::vector<float> x = logits_of(n, 256, 7, false);
  const GateWeightRule rule{ScoreFunction::softmax, true, true, 1.0};
  int64_t bad = 0;
  const Out one = [&] {
    omp_set_num_threads(1);
    return rows(x, n, 256, 8, rule, default_topk_body(), true, &bad);
  }();
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    const Out got = rows(x, n, 256, 8, rule, default_topk_body(), true, &bad);
    EXPECT_EQ(got.expert, one.expert);
    EXPECT_EQ(got.weight, one.weight);
  }
  omp_set_num_threads(omp_get_num_procs());
}

TEST(ExpertChoiceRows, TheBytesOfTheSortedPermutation) {
  uint64_t seed = 77;
  int cases = 0;
  for (int num_experts : {1, 3, 16, 17, 64}) {
    for (int64_t n : {1, 5, 37, 200}) {
      for (int64_t group : {int64_t{0}, int64_t{7}, n}) {
        for (int64_t capacity : {int64_t{1}, int64_t{3}, n / 2 + 1, n + 4}) {
          for (ScoreFunction score : {ScoreFunction::softmax, ScoreFunction::sigmoid}) {
            const std::vector<float> x = logits_of(n, num_experts, ++seed, seed % 2 == 0);
            const int64_t total = expert_choice_assignments(n, num_experts, capacity, group);
            std::vector<int32_t> wt(total), we(total), gt(total), ge(total);
            std::vector<float> ww(total), gw(total);
            std::vector<double> score_a(n * num_experts), score_b(n * num_experts);
            std::vector<int64_t> perm(n * num_experts);
            expert_choice_gating(thrust::cpp::par, x.data(), n, num_experts, score, 1.5, capacity, group, wt.data(),
                                 we.data(), ww.data(), ExpertChoiceScratch{score_a.data(), perm.data()});
            for (bool parallel : {false, true}) {
              expert_choice_rows(x.data(), n, num_experts, score, 1.5, capacity, group, gt.data(), ge.data(), gw.data(),
                                 score_b.data(), parallel);
              EXPECT_EQ(gt, wt) << "E " << num_experts << " n " << n << " group " << group << " C " << capacity;
              EXPECT_EQ(ge, we) << "E " << num_experts << " n " << n << " group " << group << " C " << capacity;
              EXPECT_EQ(gw, ww) << "E " << num_experts << " n " << n << " group " << group << " C " << capacity;
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 200);
}

}  // namespace
}  // namespace moesim
