// Tests of real load profiles: the shipped OLMoE/Mixtral counts give, per layer, the imbalance (max/mean),
// CV and normalised entropy ranges stated in data/routing-traces/olmoe-mixtral-expert-counts/SOURCE.md;
// the largest-remainder scaling; reader errors; and the load_profile pipeline on the shipped configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "router/balance_metrics.hpp"
#include "tests/support/run_cli.hpp"
#include "src/workload/load_profile.hpp"

namespace moesim {
namespace {

const std::string kCounts =
    std::string(MOESIM_SOURCE_DIR) + "/data/routing-traces/olmoe-mixtral-expert-counts/expert_counts.json";

// A range as SOURCE.md writes it; each bound with half its last written digit (the rounding of the bound).
struct Range {
  double lo, lo_half, hi, hi_half;
};

struct Family {
  std::vector<std::string> prefixes;  // keys starting with one of them
  int experts, top_k;
  Range imbalance, cv, entropy;
};

bool in_family(const Family& f, const std::string& key) {
  for (const std::string& p : f.prefixes)
    if (key.rfind(p, 0) == 0) return true;
  return false;
}

void check_family(const Family& f, const nlohmann::json& data) {
  std::vector<double> imb, cv, hn;
  for (auto it = data.begin(); it != data.end(); ++it) {
    if (!in_family(f, it.key())) continue;
    const LoadProfile p = read_load_profile(kCounts, it.key(), f.experts);
    ASSERT_EQ(p.layers, (std::vector<int>{0, 7, 15})) << it.key();
    for (size_t i = 0; i < p.layers.size(); ++i) {
      const int64_t total = std::accumulate(p.counts[i].begin(), p.counts[i].end(), int64_t{0});
      const BalanceMetrics m = metrics_from_loads(p.counts[i], total / f.top_k, f.top_k);
      const std::string where = it.key() + " layer " + std::to_string(p.layers[i]);
      EXPECT_GE(m.imbalance, f.imbalance.lo - f.imbalance.lo_half) << where;
      EXPECT_LE(m.imbalance, f.imbalance.hi + f.imbalance.hi_half) << where;
      EXPECT_GE(m.cv, f.cv.lo - f.cv.lo_half) << where;
      EXPECT_LE(m.cv, f.cv.hi + f.cv.hi_half) << where;
      EXPECT_GE(m.entropy_norm, f.entropy.lo - f.entropy.lo_half) << where;
      EXPECT_LE(m.entropy_norm, f.entropy.hi + f.entropy.hi_half) << where;
      imb.push_back(m.imbalance);
      cv.push_back(m.cv);
      hn.push_back(m.entropy_norm);
    }
  }
  ASSERT_FALSE(imb.empty()) << f.prefixes[0];
  // The stated ranges are the extremes: the smallest and largest values round to the bounds.
  auto ends = [&](const std::vector<double>& v, const Range& r, const char* name) {
    EXPECT_NEAR(*std::min_element(v.begin(), v.end()), r.lo, r.lo_half) << f.prefixes[0] << " " << name;
    EXPECT_NEAR(*std::max_element(v.begin(), v.end()), r.hi, r.hi_half) << f.prefixes[0] << " " << name;
  };
  ends(imb, f.imbalance, "imbalance");
  ends(cv, f.cv, "cv");
  ends(hn, f.entropy, "entropy_norm");
}

nlohmann::json shipped_data() {
  return nlohmann::json::parse(testing::read_text(kCounts))["data"];
}

TEST(LoadProfile, ShippedCountsMatchSourceRanges) {
  const nlohmann::json data = shipped_data();
  // SOURCE.md, "Load statistics (per layer; Hn = entropy / ln E)". OLMoE base covers the six domains
  // (tulu included); SFT and DPO share one stated range.
  const double c2 = 0.005, c3 = 0.0005, c4 = 0.00005;  // half a unit of the 2nd, 3rd, 4th decimal
  check_family({{"olmoe/expert_counts/"}, 64, 8, {2.50, c2, 7.81, c2}, {0.32, c2, 1.35, c2}, {0.829, c3, 0.990, c3}}, data);
  check_family({{"olmoe-sft/expert_counts/", "olmoe-dpo/expert_counts/"}, 64, 8, {2.92, c2, 3.97, c2}, {0.38, c2, 0.72, c2},
                {0.951, c3, 0.985, c3}},
               data);
  check_family({{"olmoe/expert_counts_top1/"}, 64, 1, {3.32, c2, 36.6, 0.05}, {0.70, c2, 4.69, c2}, {0.42, c2, 0.94, c2}},
               data);
  check_family({{"mistral/expert_counts/"}, 8, 2, {1.08, c2, 1.33, c2}, {0.04, c2, 0.25, c2}, {0.982, c3, 0.9996, c4}}, data);
  check_family({{"mistral/expert_counts_top1/"}, 8, 1, {1.16, c2, 1.58, c2}, {0.10, c2, 0.35, c2}, {0.969, c3, 0.998, c3}},
               data);
}

TEST(LoadProfile, ShippedTokenTotals) {
  // SOURCE.md: 208,896 tokens per pretraining domain; top-8 OLMoE 1,671,168 and top-2 Mixtral 417,792 per layer.
  for (const auto& [key, experts, total] : std::vector<std::tuple<std::string, int, int64_t>>{
           {"olmoe/expert_counts/arxiv", 64, 1671168}, {"mistral/expert_counts/c4", 8, 417792}}) {
    const LoadProfile p = read_load_profile(kCounts, key, experts);
    for (const auto& c : p.counts) EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t{0}), total) << key;
  }
}

TEST(LoadProfile, ScaleLoadsUsesLargestRemainders) {
  EXPECT_EQ(scale_loads({1, 1, 1}, 10), (std::vector<int64_t>{4, 3, 3}));  // ties: lower expert
  EXPECT_EQ(scale_loads({6, 2, 2}, 5), (std::vector<int64_t>{3, 1, 1}));   // exact: no remainders
  EXPECT_EQ(scale_loads({5, 3, 2}, 4), (std::vector<int64_t>{2, 1, 1}));   // 2, 1.2, 0.8: 0.8 has the largest remainder
  EXPECT_EQ(scale_loads({0, 0, 0, 0}, 6), (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_EQ(scale_loads({5, 0}, 0), (std::vector<int64_t>{0, 0}));
  const std::vector<int64_t> real = read_load_profile(kCounts, "olmoe/expert_counts/github", 64).counts[1];
  for (int64_t total : {1, 63, 64, 512, 2048, 100003}) {
    const std::vector<int64_t> s = scale_loads(real, total);
    EXPECT_EQ(std::accumulate(s.begin(), s.end(), int64_t{0}), total) << total;
  }
}

TEST(LoadProfile, ReaderErrorsNameFileAndKey) {
  auto fails_with = [](const std::string& json, const std::string& key, int experts, const std::string& expect) {
    try {
      parse_load_profile(json, "p.json", key, experts);
      ADD_FAILURE() << "no error for " << json;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("p.json: ", 0), 0u) << e.what();
    }
  };
  fails_with("{\"a\": {\"0\": [1, 2]}, \"b\": {\"0\": [1, 2]}}", "c", 2, "expected one of a, b, got 'c'");
  fails_with("{\"a\": {\"0\": [1, 2]}, \"b\": {\"0\": [1, 2]}}", "", 2, "the file holds several profiles");
  fails_with("{\"a\": {\"0\": [1, 2, 3]}}", "a", 2, "a.0: expected 2 counts");
  fails_with("{\"a\": {\"0\": [1, -2]}}", "a", 2, "a.0[1]: expected a count >= 0");
  fails_with("{\"a\": {\"x\": [1, 2]}}", "a", 2, "expected layer numbers as keys");
  // "07" would be layer 7 a second time (a fuzz finding: layers then were not ascending).
  fails_with("{\"a\": {\"7\": [1, 2], \"07\": [3, 4]}}", "a", 2, "without leading zeros), got '07'");
  fails_with("{\"a\": {\"00\": [1, 2]}}", "a", 2, "got '00'");
  fails_with("[1]", "a", 2, "expected a JSON object");
  fails_with("{", "a", 2, "invalid JSON: line 1");
  // Nested keys and the "data" wrapper are both accepted.
  const LoadProfile p = parse_load_profile("{\"data\": {\"m\": {\"k\": {\"10\": [0, 4], \"2\": [1, 3]}}}}", "p.json", "m/k", 2);
  EXPECT_EQ(p.layers, (std::vector<int>{2, 10}));
  EXPECT_EQ(p.counts[0], (std::vector<int64_t>{1, 3}));
}

TEST(LoadProfile, PipelineOnTheShippedConfigs) {
  for (const char* name : {"olmoe-profile", "mixtral-profile"}) {
    const Experiment e = load_experiment_file(std::string(MOESIM_SOURCE_DIR) + "/configs/" + name + ".yaml", {});
    RunOptions keep;
    keep.records = true;  // every record's loads, read below
    const RunResult r = run_experiment(e, own_variant(e), keep);
    ASSERT_EQ(r.variants.size(), 1u);
    const VariantResult& v = r.variants[0];
    ASSERT_EQ(v.records.size(), 3u) << name;
    EXPECT_FALSE(v.executed);
    const LoadProfile p = read_load_profile(kCounts, e.workload.profile_key, e.model.experts);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(v.per_batch[i].load, p.counts[i]) << name;
      EXPECT_EQ(v.records[i].layer, p.layers[i]);
      EXPECT_EQ(v.records[i].num_tokens, e.workload.batch);
      // The real skew costs time: the balanced counterfactual is never slower on one device... in the
      // memory-bound regime it may be (idle experts); either way the figure is finite and positive.
      EXPECT_GT(v.records[i].modeled_layer_s, 0) << name;
      EXPECT_GT(v.records[i].batching_efficiency, 0) << name;
    }
    ASSERT_EQ(v.phases.size(), 1u);
    EXPECT_EQ(v.phases[0].phase, "profile");
    EXPECT_GT(v.phases[0].modeled_tokens_per_s, 0);
  }
  const testing::CliResult c = testing::run_cli(std::string("check ") + MOESIM_SOURCE_DIR + "/configs/olmoe-profile.yaml " +
                                                MOESIM_SOURCE_DIR + "/configs/mixtral-profile.yaml");
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
}

}  // namespace
}  // namespace moesim
