// Tests of router.semantics in the config stage (src/config/load_config.cpp, semantics.cpp): each
// preset's keys, keys given in the file or by --set keeping their values, apply_override re-applying a
// changed preset to the keys left to it, the YAML round trip, and one-line errors naming file and key
// for bad values of the new keys. Host only; no randomness.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "tests/support/config_support.hpp"

namespace moesim {
namespace {

using testing::load_error;

TEST(SemanticsConfig, DefaultIsExactAndChangesNothing) {
  const Experiment e = default_experiment({});
  EXPECT_EQ(e.router.semantics, RoutingSemantics::exact);
  EXPECT_EQ(e.router.capacity_rounding, CapacityRounding::decimal);
  EXPECT_EQ(e.router.bias_update_counts, BiasUpdateCounts::demand);
  EXPECT_EQ(e.router.bias_update_arithmetic, BiasArithmetic::float64);
  EXPECT_EQ(e.router.priority, Priority::k_major);
  const Experiment x = default_experiment({"router.semantics=exact"});
  EXPECT_EQ(experiment_to_yaml(x), experiment_to_yaml(e));
}

TEST(SemanticsConfig, MegatronPresetSetsItsConventions) {
  const Experiment e = load_experiment_text("router: {semantics: megatron}\n", "exp.yaml", {});
  const RouterConfig& r = e.router;
  EXPECT_EQ(r.capacity_rounding, CapacityRounding::float64);
  EXPECT_EQ(r.bias_update_counts, BiasUpdateCounts::kept);
  EXPECT_EQ(r.bias_update_arithmetic, BiasArithmetic::float32);
  EXPECT_EQ(r.priority, Priority::token_major);
  EXPECT_EQ(r.drop_policy, DropPolicy::score);
  EXPECT_EQ(r.group_mask_fill, GroupMaskFill::neg_inf);
  EXPECT_EQ(r.score, ScoreFunction::softmax);
  EXPECT_FALSE(r.pre_softmax);
  EXPECT_FALSE(r.renormalize);
  EXPECT_FALSE(r.renormalize_after_drop);
}

TEST(SemanticsConfig, HuggingFaceAndDeepSeekPresets) {
  const Experiment hf = load_experiment_text("router: {semantics: huggingface}\n", "exp.yaml", {});
  EXPECT_EQ(hf.router.group_mask_fill, GroupMaskFill::zero);
  EXPECT_TRUE(hf.router.renormalize);
  EXPECT_TRUE(hf.router.pre_softmax);
  EXPECT_EQ(hf.router.score, ScoreFunction::softmax);  // token_choice: Mixtral
  EXPECT_EQ(hf.router.priority, Priority::token_major);
  const Experiment hf_groups =
      load_experiment_text("router: {semantics: huggingface, gating: group_limited, groups: 2}\n", "exp.yaml", {});
  EXPECT_EQ(hf_groups.router.score, ScoreFunction::sigmoid);  // DeepseekV3TopkRouter
  const Experiment ds = load_experiment_text("router: {semantics: deepseek}\n", "exp.yaml", {});
  EXPECT_EQ(ds.router.score, ScoreFunction::sigmoid);
  EXPECT_TRUE(ds.router.renormalize);
  EXPECT_EQ(ds.router.group_mask_fill, GroupMaskFill::neg_inf);
  EXPECT_EQ(ds.router.bias_update_arithmetic, BiasArithmetic::float32);
  EXPECT_EQ(ds.router.bias_update_counts, BiasUpdateCounts::demand);
  EXPECT_EQ(ds.router.priority, Priority::k_major);
}

TEST(SemanticsConfig, GivenKeysOverrideThePreset) {
  // In the file, and by --set (before or after the semantics in the command line: the preset is applied
  // once every value is in).
  const Experiment a = load_experiment_text("router: {semantics: megatron, priority: k_major}\n", "exp.yaml",
                                            {"router.capacity_rounding=decimal"});
  EXPECT_EQ(a.router.priority, Priority::k_major);
  EXPECT_EQ(a.router.capacity_rounding, CapacityRounding::decimal);
  EXPECT_EQ(a.router.bias_update_counts, BiasUpdateCounts::kept);
  const Experiment b = load_experiment_text("router: {score: sigmoid}\n", "exp.yaml", {"router.semantics=megatron"});
  EXPECT_EQ(b.router.score, ScoreFunction::sigmoid);
  EXPECT_TRUE(b.router.renormalize);  // Megatron renormalises sigmoid scores for top_k 2
  // The built-in experiment's renormalize: true and score: softmax are not the user's: the preset sets them.
  const Experiment d = default_experiment({"router.semantics=deepseek"});
  EXPECT_EQ(d.router.score, ScoreFunction::sigmoid);
  EXPECT_TRUE(d.router.renormalize);  // DeepSeek renormalises sigmoid scores
}

TEST(SemanticsConfig, ApplyOverrideReappliesAChangedPresetToTheKeysLeftToIt) {
  Experiment e = load_experiment_text("router: {priority: k_major}\n", "exp.yaml", {});
  apply_override(e, "router.semantics=megatron");
  EXPECT_EQ(e.router.capacity_rounding, CapacityRounding::float64);
  EXPECT_EQ(e.router.priority, Priority::k_major);  // given in the file
  apply_override(e, "router.semantics=exact");
  EXPECT_EQ(e.router.capacity_rounding, CapacityRounding::decimal);  // back to the default
  apply_override(e, "router.semantics=megatron");
  apply_override(e, "model.top_k=1");  // an unrelated override keeps the preset's values
  EXPECT_EQ(e.router.capacity_rounding, CapacityRounding::float64);
  EXPECT_EQ(e.router.bias_update_counts, BiasUpdateCounts::kept);
}

TEST(SemanticsConfig, RoundTripsAndPrintsTheKeys) {
  const Experiment e = load_experiment_text("router: {semantics: megatron}\n", "exp.yaml", {});
  const std::string yaml = experiment_to_yaml(e);
  for (const char* key : {"semantics: megatron", "capacity_rounding: float", "bias_update_counts: kept",
                          "bias_update_arithmetic: float32"}) {
    EXPECT_NE(yaml.find(key), std::string::npos) << key << "\n" << yaml;
  }
  EXPECT_EQ(experiment_to_yaml(load_experiment_text(yaml, "back.yaml", {})), yaml);
}

TEST(SemanticsConfig, BadValuesNameFileLineAndKey) {
  struct Case {
    std::string text;
    std::vector<std::string> overrides;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"router:\n  semantics: torch\n", {},
       "exp.yaml:2: router.semantics: expected one of exact|megatron|huggingface|deepseek, got 'torch'"},
      {"router:\n  capacity_rounding: up\n", {}, "exp.yaml:2: router.capacity_rounding: expected one of decimal|float"},
      {"router:\n  bias_update_counts: 3\n", {}, "exp.yaml:2: router.bias_update_counts: expected one of demand|kept"},
      {"name: x\n", {"router.bias_update_arithmetic=half"},
       "--set router.bias_update_arithmetic=half: router.bias_update_arithmetic: expected one of float64|float32"},
  };
  for (const Case& c : cases) {
    const std::string err = load_error(c.text, c.overrides);
    EXPECT_EQ(err.find(c.want), 0u) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
}

TEST(SemanticsConfig, BuiltInExperimentKeysGiveWayToAPreset) {
  // The built-in experiment writes Mixtral's score and renormalisation; under a preset they are not the
  // user's, so --set router.semantics=megatron routes as Megatron without --set router.renormalize=false.
  const Experiment m = default_experiment({"router.semantics=megatron"});
  EXPECT_FALSE(m.router.renormalize);
  EXPECT_FALSE(m.router.pre_softmax);
  const Experiment x = default_experiment({});
  EXPECT_TRUE(x.router.renormalize);
  // A --set still wins.
  const Experiment g = default_experiment({"router.semantics=megatron", "router.renormalize=true"});
  EXPECT_TRUE(g.router.renormalize);
  // And compare's rows, re-loaded per gating, keep the preset's choice.
  Experiment s = m;
  apply_override(s, "router.gating=sinkhorn");
  EXPECT_FALSE(s.router.renormalize);
  EXPECT_TRUE(s.router.pre_softmax);
}

}  // namespace
}  // namespace moesim
