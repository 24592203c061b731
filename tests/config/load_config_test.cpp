// Tests of the config stage (src/config/load_config.cpp): defaults, every shipped config, --set overrides
// of scalars, lists and maps, the YAML round trip, and a table of bad configs whose one-line ConfigError
// must name the key path (and the line, for file errors). Host only; no randomness.
#include "src/config/load_config.hpp"
#include "src/decoder/decoder.hpp"
#include "tests/support/config_support.hpp"
#include "tests/support/run_cli.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "src/common/error.hpp"

namespace moesim {
namespace {

std::string config_path(const std::string& name) { return std::string(MOESIM_SOURCE_DIR) + "/configs/" + name; }

using testing::load_error;

TEST(LoadConfig, DefaultsLoad) {
  const Experiment e = default_experiment({});
  EXPECT_EQ(e.source_file, "<built-in>");
  EXPECT_EQ(e.name, "quickstart");
  EXPECT_EQ(e.model.hidden, 4096);
  EXPECT_EQ(e.model.ffn, 14336);
  EXPECT_EQ(e.model.experts, 8);
  EXPECT_EQ(e.model.top_k, 2);
  EXPECT_EQ(e.model.layers, 32);
  EXPECT_EQ(e.model.kv_heads, 8);
  EXPECT_EQ(e.model.vocab, 32000);
  EXPECT_EQ(e.model.dtype, Dtype::bf16);
  EXPECT_EQ(e.router.gating, Gating::token_choice);
  EXPECT_DOUBLE_EQ(e.router.capacity_factor, 1.25);
  EXPECT_EQ(e.workload.source, WorkloadSource::synthetic);
  EXPECT_EQ(e.workload.batch, 4096);  // past the knee (configs/quickstart.yaml)
  EXPECT_EQ(e.workload.batches, 8);
  EXPECT_EQ(e.router.groups, 2);
  EXPECT_EQ(e.placement.kind, PlacementKind::expert_parallel);
  EXPECT_EQ(e.placement.devices, 8);
  EXPECT_EQ(e.workload.seed, 7u);
  EXPECT_DOUBLE_EQ(e.workload.skew, 0.15);  // calibrated to Mixtral's recorded loads (tests/workload/shipped_skew_test.cpp)
  EXPECT_EQ(e.hardware.name, "h100-sxm");
  EXPECT_TRUE(e.hardware.inline_yaml.empty());
  EXPECT_EQ(e.execute.hidden, 256);
  EXPECT_EQ(e.execute.ffn, 512);
  EXPECT_EQ(e.execute.layers, 1);
  EXPECT_EQ(e.execute.repeats, 3);
  ASSERT_EQ(e.expect.size(), 1u);
  EXPECT_EQ(e.expect[0].metric, "drop_rate");
  EXPECT_EQ(e.expect[0].aggregate, "value");
  EXPECT_FALSE(e.expect[0].min.has_value());
  ASSERT_TRUE(e.expect[0].max.has_value());
  EXPECT_DOUBLE_EQ(*e.expect[0].max, 0.5);
}

TEST(LoadConfig, EmptyMapKeepsStructDefaults) {
  const Experiment e = load_experiment_text("{}\n", "empty.yaml", {});
  EXPECT_EQ(e.source_file, "empty.yaml");
  EXPECT_EQ(experiment_to_yaml(e), experiment_to_yaml(Experiment{}));
  const Experiment sections = load_experiment_text("model:\nrouter:\nexpect:\n", "null-sections.yaml", {});
  EXPECT_EQ(experiment_to_yaml(sections), experiment_to_yaml(Experiment{}));
}

TEST(LoadConfig, MixtralConfigLoads) {
  const Experiment e = load_experiment_file(config_path("mixtral-8x7b.yaml"), {});
  EXPECT_EQ(e.model.hidden, 4096);
  EXPECT_EQ(e.model.ffn, 14336);
  EXPECT_EQ(e.model.experts, 8);
  EXPECT_EQ(e.model.top_k, 2);
  EXPECT_EQ(e.model.layers, 32);
  EXPECT_EQ(e.model.heads, 32);
  EXPECT_EQ(e.model.kv_heads, 8);
  EXPECT_EQ(e.model.head_dim, 128);
  EXPECT_EQ(e.model.vocab, 32000);
  EXPECT_EQ(e.model.dtype, Dtype::bf16);
  EXPECT_TRUE(e.router.renormalize);
}

TEST(LoadConfig, DeepSeekV3ConfigLoads) {
  const Experiment e = load_experiment_file(config_path("deepseek-v3.yaml"), {});
  EXPECT_EQ(e.model.hidden, 7168);
  EXPECT_EQ(e.model.ffn, 2048);
  EXPECT_EQ(e.model.experts, 256);
  EXPECT_EQ(e.model.top_k, 8);
  EXPECT_EQ(e.model.shared_experts, 1);
  EXPECT_EQ(e.model.layers, 61);
  EXPECT_EQ(e.model.heads, 128);
  EXPECT_EQ(e.model.kv_heads, 128);
  EXPECT_EQ(e.model.head_dim, 128);
  EXPECT_EQ(e.model.vocab, 129280);
  EXPECT_EQ(e.router.score, ScoreFunction::sigmoid);
  EXPECT_EQ(e.router.gating, Gating::group_limited);
  EXPECT_EQ(e.router.groups, 8);
  EXPECT_EQ(e.router.topk_groups, 4);
  EXPECT_EQ(e.router.group_mask_fill, GroupMaskFill::neg_inf);
  EXPECT_TRUE(e.router.renormalize);
  EXPECT_DOUBLE_EQ(e.router.routed_scaling_factor, 2.5);
  EXPECT_EQ(e.placement.kind, PlacementKind::expert_parallel);
}

TEST(LoadConfig, OlmoeConfigLoads) {
  const Experiment e = load_experiment_file(config_path("olmoe-1b-7b.yaml"), {});
  EXPECT_EQ(e.model.hidden, 2048);
  EXPECT_EQ(e.model.ffn, 1024);
  EXPECT_EQ(e.model.experts, 64);
  EXPECT_EQ(e.model.top_k, 8);
  EXPECT_EQ(e.model.layers, 16);
  EXPECT_EQ(e.model.heads, 16);
  EXPECT_EQ(e.model.kv_heads, 16);
  EXPECT_EQ(e.model.head_dim, 128);
  EXPECT_EQ(e.model.vocab, 50304);
  EXPECT_FALSE(e.router.renormalize);
  EXPECT_EQ(e.workload.source, WorkloadSource::synthetic);
  EXPECT_EQ(e.workload.batch, 2048);
}

TEST(LoadConfig, PromptLenRangeForm) {
  const Experiment e = default_experiment({"workload.prompt_len=64..256"});
  EXPECT_TRUE(e.workload.prompt_len_range);
  EXPECT_EQ(e.workload.prompt_len, (std::vector<int>{64, 256}));
}

TEST(LoadConfig, QuickstartFileMatchesBuiltIn) {
  const Experiment file = load_experiment_file(config_path("quickstart.yaml"), {});
  EXPECT_EQ(file.source_file, config_path("quickstart.yaml"));
  EXPECT_EQ(experiment_to_yaml(file), experiment_to_yaml(default_experiment({})));
}

// Every experiment YAML in the tree (hardware profiles excepted) must use only keys the loader accepts.
TEST(LoadConfig, EveryShippedExperimentLoads) {
  std::vector<std::string> files;
  for (const char* dir : {"", "experiments", "regression"}) {
    const std::filesystem::path folder = config_path(dir);
    if (!std::filesystem::is_directory(folder)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.is_regular_file() && entry.path().extension() == ".yaml") files.push_back(entry.path().string());
    }
  }
  EXPECT_GE(files.size(), 4u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    EXPECT_NO_THROW(load_experiment_file(f, {}));
  }
}

TEST(LoadConfig, ScalarOverrides) {
  const Experiment e = default_experiment({"model.top_k=4", "router.capacity_factor=2", "name=tuned",
                                           "workload.seed=18446744073709551615", "router.gating=sinkhorn",
                                           "router.renormalize=false", "router.group_mask_fill=0",
                                           "hardware=a100-sxm", "model.top_k=3"});
  EXPECT_EQ(e.model.top_k, 3);  // applied in order: the last one wins
  EXPECT_DOUBLE_EQ(e.router.capacity_factor, 2.0);
  EXPECT_EQ(e.name, "tuned");
  EXPECT_EQ(e.workload.seed, 18446744073709551615ull);
  EXPECT_EQ(e.router.gating, Gating::sinkhorn);
  EXPECT_FALSE(e.router.renormalize);
  EXPECT_EQ(e.router.group_mask_fill, GroupMaskFill::zero);
  EXPECT_EQ(e.hardware.name, "a100-sxm");
  EXPECT_EQ(e.model.hidden, 4096);  // untouched keys keep the file's values
}

TEST(LoadConfig, ListOverrides) {
  const Experiment e = default_experiment({"workload.source=decoder", "workload.batch=3",
                                           "workload.prompt_len=[16, 32, 48]", "placement.devices=2",
                                           "placement.policy=map", "placement.map=[0, 1, 0, 1, 0, 1, 1, 1]"});
  EXPECT_EQ(e.workload.prompt_len, (std::vector<int>{16, 32, 48}));
  EXPECT_FALSE(e.workload.prompt_len_range);
  EXPECT_EQ(e.placement.map, (std::vector<int>{0, 1, 0, 1, 0, 1, 1, 1}));
  const Experiment r = default_experiment({"workload.prompt_len=32..512"});
  EXPECT_TRUE(r.workload.prompt_len_range);
  EXPECT_EQ(r.workload.prompt_len, (std::vector<int>{32, 512}));
  const Experiment f = default_experiment({"workload.prompt_len=[8, 64]", "workload.prompt_len_range=true"});
  EXPECT_TRUE(f.workload.prompt_len_range);
  EXPECT_EQ(f.workload.prompt_len, (std::vector<int>{8, 64}));
}

TEST(LoadConfig, MapOverrides) {
  // A map for a section sets only the keys it names.
  const Experiment m = default_experiment({"model={experts: 16, top_k: 4}"});
  EXPECT_EQ(m.model.experts, 16);
  EXPECT_EQ(m.model.top_k, 4);
  EXPECT_EQ(m.model.hidden, 4096);
  // hardware and expect are replaced whole.
  const Experiment h = default_experiment({"hardware={peak_tflops: {bf16: 989.4}, bandwidth_gb_s: 3350}"});
  EXPECT_EQ(h.hardware.name, "");
  EXPECT_NE(h.hardware.inline_yaml.find("bandwidth_gb_s: 3350"), std::string::npos);
  const Experiment h2 = load_experiment_text(experiment_to_yaml(h), "h.yaml", {"hardware.peak_tflops.bf16=500"});
  EXPECT_NE(h2.hardware.inline_yaml.find("bf16: 500"), std::string::npos);
  EXPECT_NE(h2.hardware.inline_yaml.find("bandwidth_gb_s: 3350"), std::string::npos);
  const Experiment x = default_experiment({"expect={imbalance: {max: 1.5, aggregate: p95, strategy: hash}}"});
  ASSERT_EQ(x.expect.size(), 1u);
  EXPECT_EQ(x.expect[0].metric, "imbalance");
  EXPECT_EQ(x.expect[0].aggregate, "p95");
  EXPECT_EQ(x.expect[0].strategy, "hash");
  EXPECT_DOUBLE_EQ(*x.expect[0].max, 1.5);
  // `last`: the last batch or record, beside the headline `value`.
  const Experiment last = default_experiment({"expect={imbalance: {max: 1.5, aggregate: last}}"});
  ASSERT_EQ(last.expect.size(), 1u);
  EXPECT_EQ(last.expect[0].aggregate, "last");
  EXPECT_EQ(load_experiment_text(experiment_to_yaml(last), "l.yaml", {}).expect[0].aggregate, "last");
  // One bound of a map-form expect block.
  const Experiment d = default_experiment({"expect.drop_rate.max=0.1", "expect.cv.min=0"});
  ASSERT_EQ(d.expect.size(), 2u);
  EXPECT_EQ(d.expect[0].metric, "drop_rate");
  EXPECT_DOUBLE_EQ(*d.expect[0].max, 0.1);
  EXPECT_EQ(d.expect[1].metric, "cv");
  EXPECT_DOUBLE_EQ(*d.expect[1].min, 0.0);
}

TEST(LoadConfig, ApplyOverrideRevalidates) {
  Experiment e = default_experiment({});
  apply_override(e, "model.top_k=1");
  EXPECT_EQ(e.model.top_k, 1);
  EXPECT_EQ(e.source_file, "<built-in>");
  const std::string before = experiment_to_yaml(e);
  EXPECT_THROW(apply_override(e, "model.top_k=9"), ConfigError);
  EXPECT_EQ(experiment_to_yaml(e), before);  // unchanged on error
}

TEST(LoadConfig, RoundTripDefault) {
  const Experiment e = default_experiment({});
  const std::string yaml = experiment_to_yaml(e);
  const Experiment back = load_experiment_text(yaml, "effective.yaml", {});
  EXPECT_EQ(experiment_to_yaml(back), yaml);
}

TEST(LoadConfig, RoundTripShippedConfigs) {
  for (const char* name : {"mixtral-8x7b.yaml", "deepseek-v3.yaml", "olmoe-1b-7b.yaml", "quickstart.yaml"}) {
    SCOPED_TRACE(name);
    const std::string yaml = experiment_to_yaml(load_experiment_file(config_path(name), {}));
    EXPECT_EQ(experiment_to_yaml(load_experiment_text(yaml, name, {})), yaml);
  }
}

// Every key away from its default, so that a key the emitter forgets or misreads shows up.
TEST(LoadConfig, RoundTripEveryKey) {
  const std::string text = R"(name: "~"
model: {name: m, hidden: 1000, ffn: 3000, experts: 12, top_k: 3, shared_experts: 2, layers: 5,
        heads: 6, kv_heads: 3, head_dim: 40, vocab: 777, dtype: fp16}
router: {gating: group_limited, score: sigmoid, renormalize: true, pre_softmax: false,
         capacity_factor: 0.1, min_capacity: 4, drop_policy: score, priority: token_major,
         capacity_scope: sequence, renormalize_after_drop: true, layout: block, block_size: 16,
         noise_std: 0.3, sinkhorn_iterations: 7, sinkhorn_tolerance: 1e-9, groups: 4, topk_groups: 2,
         group_mask_fill: "0", bias_update_rate: 0.125, routed_scaling_factor: 1.7}
workload: {source: logits, batch: 99, batches: 3, prompt_len: 10..20, decode_steps: 0, seed: 12345678901,
           skew: 0, topics: 2, path: "data/x.json", profile_key: "mistral/expert_counts/arxiv"}
hardware: {name: custom, peak_tflops: {bf16: 100}, bandwidth_gb_s: 900}
placement: {kind: expert_parallel, policy: hierarchical, devices: 6, replicas: 6, nodes: 3, groups: 6,
            spread_replicas: true, rebalance_every: 10, load_estimator: ema, ema_weight: 0.25}
execute: {enabled: false, hidden: 64, ffn: 96, layers: 2, repeats: 1, dtype: bf16}
expect:
  - {metric: imbalance, min: 1, max: 3.5, aggregate: p95, strategy: group_limited}
  - {metric: modeled_time_s, max: 0.001}
)";
  const Experiment e = load_experiment_text(text, "every.yaml", {});
  const Experiment labelled =
      load_experiment_text("expect:\n  cv: {max: 1, strategy: token_choice capacity_factor=1.5 drop_policy=score}\n",
                           "label.yaml", {});
  EXPECT_EQ(labelled.expect.at(0).strategy, "token_choice capacity_factor=1.5 drop_policy=score");
  EXPECT_EQ(e.name, "~");
  EXPECT_EQ(e.model.dtype, Dtype::fp16);
  EXPECT_EQ(e.router.priority, Priority::token_major);
  EXPECT_DOUBLE_EQ(e.router.sinkhorn_tolerance, 1e-9);
  EXPECT_EQ(e.workload.seed, 12345678901ull);
  EXPECT_EQ(e.workload.profile_key, "mistral/expert_counts/arxiv");
  EXPECT_EQ(e.hardware.name, "");
  EXPECT_FALSE(e.execute.enabled);
  ASSERT_EQ(e.expect.size(), 2u);
  EXPECT_EQ(e.expect[1].aggregate, "value");
  const std::string yaml = experiment_to_yaml(e);
  const Experiment back = load_experiment_text(yaml, "effective.yaml", {});
  EXPECT_EQ(experiment_to_yaml(back), yaml);
  EXPECT_EQ(back.name, "~");
  EXPECT_EQ(back.placement.policy, PlacementPolicy::hierarchical);
  EXPECT_EQ(back.placement.nodes, 3);
  EXPECT_EQ(back.placement.groups, 6);
  EXPECT_TRUE(back.placement.spread_replicas);
  EXPECT_EQ(back.placement.load_estimator, LoadEstimator::ema);
  EXPECT_DOUBLE_EQ(back.placement.ema_weight, 0.25);
  // A map needs policy map (and no replicas): its own round trip.
  const Experiment m = load_experiment_text(
      "placement: {kind: expert_parallel, policy: map, devices: 3, map: [0, 1, 2, 0, 1, 2, 0, 1]}\n", "map.yaml", {});
  const Experiment m_back = load_experiment_text(experiment_to_yaml(m), "effective.yaml", {});
  EXPECT_EQ(m_back.placement.map, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 1}));
  EXPECT_EQ(m_back.placement.policy, PlacementPolicy::map);
  EXPECT_EQ(back.hardware.inline_yaml, e.hardware.inline_yaml);
  EXPECT_DOUBLE_EQ(back.router.bias_update_rate, 0.125);
  EXPECT_EQ(back.workload.prompt_len, (std::vector<int>{10, 20}));
  EXPECT_TRUE(back.workload.prompt_len_range);
}

TEST(LoadConfig, CrossFieldErrorNamesWhereTheKeyWasSet) {
  const std::string text = "model:\n  experts: 8\n  top_k: 2\n";
  // top_k is fine in the file; an override of experts makes it invalid: the error points at top_k's line.
  const std::string e1 = load_error(text, {"model.experts=1"});
  EXPECT_NE(e1.find("exp.yaml:3: model.top_k: expected an integer in [1, 1] (model.experts), got 2"),
            std::string::npos)
      << e1;
  const std::string e2 = load_error(text, {"model.top_k=9"});
  EXPECT_NE(e2.find("--set model.top_k=9: model.top_k: expected an integer in [1, 8] (model.experts), got 9"),
            std::string::npos)
      << e2;
  const std::string e3 = load_error("name: x\nmodel:\n  experts: 8\n  top_k: 9\n");
  EXPECT_NE(e3.find("exp.yaml:4: model.top_k: expected an integer in [1, 8] (model.experts), got 9"),
            std::string::npos)
      << e3;
}

// The hardware reference remembers where its name was given, for the profile loader's errors: the file
// line or the --set, kept through apply_override while the reference is unchanged.
TEST(LoadConfig, HardwareOriginNamesTheFileLineOrTheSet) {
  Experiment e = load_experiment_text("name: x\nhardware: a100-80gb\n", "exp.yaml", {});
  EXPECT_EQ(e.hardware.origin, "exp.yaml:2: hardware");
  apply_override(e, "model.top_k=1");
  EXPECT_EQ(e.hardware.origin, "exp.yaml:2: hardware");
  apply_override(e, "hardware=h200");
  EXPECT_EQ(e.hardware.origin, "--set hardware=h200: hardware");
  EXPECT_EQ(default_experiment({"hardware=nosuch"}).hardware.origin, "--set hardware=nosuch: hardware");
  // Not part of the experiment's text.
  EXPECT_EQ(experiment_to_yaml(e).find("--set"), std::string::npos);
}

TEST(LoadConfig, MissingFileIsAnError) {
  EXPECT_THROW(load_experiment_file(config_path("no-such-experiment.yaml"), {}), ConfigError);
  EXPECT_THROW(load_experiment_file(config_path(""), {}), ConfigError);
}

struct BadConfig {
  const char* what;
  std::string text;
  std::vector<std::string> overrides;
  std::vector<std::string> message_parts;  // each must appear in the message
};

TEST(LoadConfig, BadConfigsAreRejectedWithKeyAndLine) {
  const std::string ok = "model:\n  experts: 8\n";
  const std::vector<BadConfig> cases = {
      {"unknown top-level key", "name: x\nmodle:\n  experts: 8\n", {}, {"exp.yaml:2:", "modle: unknown key (did you mean model?)"}},
      {"unknown nested key", "router:\n  gating: hash\n  topk: 3\n", {}, {"exp.yaml:3:", "router.topk: unknown key (did you mean router.topk_groups?)"}},
      {"unknown key in an expect bound", "expect:\n  imbalance: {max: 2, maxx: 3}\n", {}, {"exp.yaml:2:", "expect.imbalance.maxx: unknown key"}},
      {"unknown metric", "expect:\n  imbalanse: {max: 2}\n", {}, {"exp.yaml:2:", "expect.imbalanse: unknown key"}},
      {"float for an integer", "model:\n  experts: 1.5\n", {}, {"exp.yaml:2:", "model.experts: expected an integer", "'1.5'"}},
      {"text for an integer", "model:\n  hidden: abc\n", {}, {"exp.yaml:2:", "model.hidden: expected an integer", "'abc'"}},
      {"bool for an integer", "\n\nmodel:\n  layers: true\n", {}, {"exp.yaml:4:", "model.layers: expected an integer", "'true'"}},
      {"quoted number for an integer", "model:\n  experts: \"8\"\n", {}, {"exp.yaml:2:", "model.experts"}},
      {"integer for a bool", "router:\n  renormalize: 1\n", {}, {"exp.yaml:2:", "router.renormalize: expected true or false"}},
      {"list for a scalar", "model:\n  ffn: [1, 2]\n", {}, {"exp.yaml:2:", "model.ffn", "got a list"}},
      {"integer overflow", "model:\n  hidden: 99999999999999999999999\n", {}, {"exp.yaml:2:", "model.hidden"}},
      {"top_k above experts", "model:\n  experts: 4\n  top_k: 5\n", {}, {"exp.yaml:3:", "model.top_k: expected an integer in [1, 4] (model.experts), got 5"}},
      {"experts zero", "model:\n  experts: 0\n", {}, {"exp.yaml:2:", "model.experts: expected an integer in [1, 65536], got 0"}},
      {"hidden above the limit", "model:\n  hidden: 2000000\n", {}, {"exp.yaml:2:", "model.hidden"}},
      {"capacity_factor below zero", "router:\n  capacity_factor: -0.5\n", {}, {"exp.yaml:2:", "router.capacity_factor: expected a finite number >= 0"}},
      {".nan", "router:\n  noise_std: .nan\n", {}, {"exp.yaml:2:", "router.noise_std: expected a finite number", "'.nan'"}},
      {".inf", "router:\n  capacity_factor: .inf\n", {}, {"exp.yaml:2:", "router.capacity_factor", "'.inf'"}},
      {"-.inf", "workload:\n  skew: -.inf\n", {}, {"exp.yaml:2:", "workload.skew"}},
      {"float overflow", "router:\n  noise_std: 1e999\n", {}, {"exp.yaml:2:", "router.noise_std"}},
      {"sinkhorn_tolerance zero", "router:\n  sinkhorn_tolerance: 0\n", {}, {"exp.yaml:2:", "router.sinkhorn_tolerance: expected a finite number > 0"}},
      {"routed_scaling_factor zero", "router:\n  routed_scaling_factor: 0\n", {}, {"exp.yaml:2:", "router.routed_scaling_factor"}},
      {"empty text", "", {}, {"exp.yaml", "expected a YAML map", "empty document"}},
      {"only a comment", "# nothing here\n", {}, {"exp.yaml", "empty document"}},
      {"not a map", "- model\n- router\n", {}, {"exp.yaml:1:", "expected a YAML map", "got a list"}},
      {"a scalar document", "hello\n", {}, {"exp.yaml:1:", "got 'hello'"}},
      {"two documents", "name: a\n---\nname: b\n", {}, {"exp.yaml:3:", "one YAML document"}},
      {"syntax error", "model:\n  experts: [1, 2\nrouter: {}\n", {}, {"exp.yaml:", "invalid YAML"}},
      {"bad enum value", "router:\n  gating: top_k_please\n", {}, {"exp.yaml:2:", "router.gating: expected one of token_choice|", "'top_k_please'"}},
      {"bad dtype", "model:\n  dtype: fp64\n", {}, {"exp.yaml:2:", "model.dtype: expected one of fp32|tf32|bf16|fp16|fp8|int8"}},
      {"section not a map", "model: 5\n", {}, {"exp.yaml:1:", "model: expected a map"}},
      {"duplicate key", "model:\n  experts: 8\n  experts: 4\n", {}, {"exp.yaml:3:", "model.experts: duplicate key"}},
      {"groups not dividing experts", "router:\n  gating: group_limited\n  groups: 3\n", {}, {"exp.yaml:3:", "router.groups: expected a divisor of model.experts (8) for group_limited gating, got 3"}},
      {"topk_groups above groups", "router:\n  gating: aux_free_bias\n  groups: 2\n  topk_groups: 3\n", {}, {"exp.yaml:4:", "router.topk_groups: expected an integer in [1, 2] (router.groups), got 3"}},
      {"group-limited top_k unreachable", "model:\n  top_k: 4\nrouter:\n  gating: group_limited\n  groups: 4\n  topk_groups: 1\n", {}, {"exp.yaml:2:", "model.top_k", "= 2 for group_limited"}},
      {"kv_heads not dividing heads", "model:\n  heads: 32\n  kv_heads: 5\n", {}, {"exp.yaml:3:", "model.kv_heads: expected a divisor of model.heads (32), got 5"}},
      {"batch zero", "workload:\n  batch: 0\n", {}, {"exp.yaml:2:", "workload.batch: expected an integer in [1, 1000000000], got 0"}},
      {"batch above 1e9", "workload:\n  batch: 1000000001\n", {}, {"exp.yaml:2:", "workload.batch"}},
      {"negative seed", "workload:\n  seed: -1\n", {}, {"exp.yaml:2:", "workload.seed"}},
      {"zero prompt length", "workload:\n  prompt_len: [128, 0]\n", {}, {"exp.yaml:2:", "workload.prompt_len[1]: expected an integer in [1, "}},
      {"empty prompt_len list", "workload:\n  prompt_len: []\n", {}, {"exp.yaml:2:", "workload.prompt_len", "empty list"}},
      {"reversed prompt range", "workload:\n  prompt_len: 512..64\n", {}, {"exp.yaml:2:", "workload.prompt_len", "'512..64'"}},
      {"range contradicting prompt_len_range", "workload:\n  prompt_len: 8..64\n  prompt_len_range: false\n", {}, {"exp.yaml:3:", "workload.prompt_len_range"}},
      {"prompt lengths not one per sequence", "workload:\n  source: decoder\n  batch: 4\n  prompt_len: [1, 2, 3]\n", {}, {"exp.yaml:4:", "workload.prompt_len: expected one length or workload.batch (4) lengths"}},
      {"trace without a path", "workload:\n  source: trace\n", {}, {"exp.yaml:2:", "workload.path: expected a file path for source trace"}},
      {"placement map of the wrong length", "placement:\n  devices: 2\n  policy: map\n  map: [0, 1]\n", {}, {"exp.yaml:4:", "placement.map: expected 8 entries"}},
      {"placement map device out of range", ok + "placement:\n  devices: 2\n  policy: map\n  map: [0, 1, 2, 0, 1, 0, 1, 0]\n", {}, {"exp.yaml:6:", "placement.map[2]: expected a device in [0, 1] (placement.devices), got 2"}},
      {"placement map without policy map", "placement:\n  devices: 2\n  map: [0, 1, 0, 1, 0, 1, 0, 1]\n", {}, {"exp.yaml:3:", "placement.map: expected no map for placement.policy auto (contiguous without replicas) (set placement.policy: map to use it), got 8 entries"}},
      {"placement policy map without a map", "placement:\n  kind: expert_parallel\n  policy: map\n", {}, {"exp.yaml:", "placement.map: expected one device per expert, or a placement file, for placement.policy map, got no map"}},
      {"unknown placement policy", "placement:\n  policy: greedy\n", {}, {"exp.yaml:2:", "placement.policy: expected one of auto|contiguous|global|hierarchical|round_robin|map", "'greedy'"}},
      {"devices not dividing experts + replicas", "placement:\n  kind: expert_parallel\n  policy: global\n  devices: 3\n", {}, {"exp.yaml:4:", "placement.devices: expected a divisor of model.experts + placement.replicas (8) for placement.policy global, got 3"}},
      {"devices not dividing experts + replicas (replicas set last)", "placement:\n  kind: expert_parallel\n  devices: 4\n  replicas: 2\n", {}, {"exp.yaml:", "placement.devices: expected a divisor of model.experts + placement.replicas (10)"}},
      {"nodes not dividing groups", "router:\n  groups: 4\nplacement:\n  kind: expert_parallel\n  policy: hierarchical\n  devices: 8\n  nodes: 3\n", {}, {"exp.yaml:7:", "placement.nodes: expected a divisor of router.groups (4) for placement.policy hierarchical, got 3"}},
      {"placement groups not dividing experts", "placement:\n  kind: expert_parallel\n  policy: hierarchical\n  devices: 8\n  groups: 3\n", {}, {"exp.yaml:5:", "placement.groups: expected a divisor of model.experts (8) for placement.policy hierarchical, got 3"}},
      {"nodes not dividing devices", "placement:\n  kind: expert_parallel\n  policy: hierarchical\n  devices: 2\n  groups: 4\n  nodes: 4\n", {}, {"exp.yaml:6:", "placement.nodes: expected a divisor of placement.devices (2)"}},
      {"round_robin with replicas", "placement:\n  kind: expert_parallel\n  policy: round_robin\n  devices: 2\n  replicas: 2\n", {}, {"exp.yaml:5:", "placement.replicas: expected 0 for placement.policy round_robin"}},
      {"rebalancing a round_robin placement", "placement:\n  kind: expert_parallel\n  policy: round_robin\n  rebalance_every: 2\n", {}, {"exp.yaml:4:", "placement.rebalance_every: expected 0 for placement.policy round_robin"}},
      {"rebalancing the static default", "placement:\n  kind: expert_parallel\n  rebalance_every: 2\n", {}, {"exp.yaml:3:", "placement.rebalance_every: expected 0 for placement.policy auto (contiguous without replicas)"}},
      {"rebalancing a load profile", "workload:\n  source: load_profile\n  path: x.json\nplacement:\n  kind: expert_parallel\n  policy: global\n  rebalance_every: 2\n", {}, {"exp.yaml:7:", "placement.rebalance_every: expected 0 for workload.source load_profile"}},
      {"a plan profile without plan_from profile", "placement:\n  kind: expert_parallel\n  policy: global\n  plan_profile: x.json\n", {}, {"exp.yaml:4:", "placement.plan_profile: expected no file for placement.plan_from past"}},
      {"plan_from profile without a file", "placement:\n  kind: expert_parallel\n  policy: global\n  plan_from: profile\n", {}, {"exp.yaml:4:", "placement.plan_profile: expected a load-profile file for placement.plan_from profile"}},
      {"spread with more slots than experts x devices", "placement:\n  kind: expert_parallel\n  devices: 2\n  replicas: 10\n  spread_replicas: true\n", {}, {"exp.yaml:5:", "placement.spread_replicas: expected false, or placement.replicas <= model.experts x (placement.devices - 1) = 8, got true with 10 replicas"}},
      {"ema_weight above 1", "placement:\n  ema_weight: 1.5\n", {}, {"exp.yaml:2:", "placement.ema_weight: expected a number in (0, 1], got 1.5"}},
      {"ema_weight zero", "placement:\n  ema_weight: 0\n", {}, {"exp.yaml:2:", "placement.ema_weight"}},
      {"unknown load estimator", "placement:\n  load_estimator: median\n", {}, {"exp.yaml:2:", "placement.load_estimator: expected one of window|ema"}},
      {"expect without a bound", "expect:\n  drop_rate: {aggregate: p95}\n", {}, {"exp.yaml:2:", "expect.drop_rate: expected at least one of min, max"}},
      {"expect min above max", "expect:\n  cv: {min: 2, max: 1}\n", {}, {"exp.yaml:2:", "expect.cv.max"}},
      {"expect unknown strategy", "expect:\n  cv: {max: 1, strategy: greedy}\n", {}, {"exp.yaml:2:", "expect.cv.strategy: expected a gating name"}},
      {"expect strategy with a non-router key", "expect:\n  cv: {max: 1, strategy: hash top_k=2}\n", {}, {"exp.yaml:2:", "expect.cv.strategy"}},
      {"expect unknown aggregate", "expect:\n  cv: {max: 1, aggregate: p99}\n", {}, {"exp.yaml:2:", "expect.cv.aggregate: expected one of value|last|mean|p50|p95|max, got 'p99'"}},
      {"expect list item without metric", "expect:\n  - {metric: cv, max: 1}\n  - {max: 2}\n", {}, {"exp.yaml:3:", "expect[1]: expected a metric: key"}},
      {"expect list item unknown metric", "expect:\n  - {metric: speed, max: 1}\n", {}, {"exp.yaml:2:", "expect[0].metric"}},
      {"hardware missing", "hardware:\n", {}, {"exp.yaml:1:", "hardware: expected a profile name"}},
      {"hardware a list", "hardware: [a, b]\n", {}, {"exp.yaml:1:", "hardware:", "got a list"}},
      {"malformed --set", ok, {"router.top_k"}, {"--set router.top_k: expected KEY.PATH=VALUE"}},
      {"--set with an empty key part", ok, {"router..top_k=2"}, {"--set router..top_k=2: expected KEY.PATH=VALUE"}},
      {"--set unknown key", ok, {"router.topk=3"}, {"--set router.topk=3: unknown key router.topk"}},
      {"--set unknown section", ok, {"modle.experts=3"}, {"--set modle.experts=3: unknown key modle.experts"}},
      {"--set too deep", ok, {"model.experts.x=3"}, {"--set model.experts.x=3: unknown key model.experts.x"}},
      {"--set wrong type", ok, {"model.experts=abc"}, {"--set model.experts=abc: model.experts: expected an integer", "'abc'"}},
      {"--set .nan", ok, {"router.capacity_factor=.nan"}, {"--set router.capacity_factor=.nan: router.capacity_factor"}},
      {"--set invalid YAML", ok, {"workload.prompt_len=[1, 2"}, {"--set workload.prompt_len=[1, 2: invalid YAML"}},
      {"--set unknown key inside a section map", ok, {"router={gating: hash, topk: 2}"}, {"--set router={gating: hash, topk: 2}: unknown key router.topk"}},
      {"--set a hardware key of a named profile", ok, {"hardware.bandwidth_gb_s=1"}, {"unknown key hardware.bandwidth_gb_s"}},
      {"--set an unknown expect metric", ok, {"expect.speed.max=1"}, {"unknown key expect.speed"}},
      {"--set cross-field", ok, {"router.gating=group_limited", "router.groups=3"}, {"--set router.groups=3: router.groups: expected a divisor of model.experts (8) for group_limited gating, got 3"}},
  };
  ASSERT_GE(cases.size(), 20u);
  for (const BadConfig& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string message = load_error(c.text, c.overrides);
    ASSERT_FALSE(message.empty()) << "loaded without an error";
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string& part : c.message_parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

// The same bad values must also fail when they come through apply_override.
TEST(LoadConfig, ApplyOverrideRejectsBadValues) {
  Experiment e = default_experiment({});
  for (const char* bad : {"model.experts=0", "router.capacity_factor=-1", "router.noise_std=.inf", "workload.batch=1.5",
                          "router.topk=2", "router.top_k"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(apply_override(e, bad), ConfigError);
  }
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// workload.prompt_len as serve --isl and step --lengths take lengths: uniform:LO:HI is the LO..HI range,
// lognormal:MEDIAN:SIGMA and file:PATH draw each sequence's length from the seed (a file relative to the
// experiment's folder, kept absolute), and the effective experiment writes them back as read.
TEST(LoadConfig, PromptLengthsFromADistributionOrAFile) {
  const Experiment u = default_experiment({"workload.prompt_len=uniform:32:512"});
  EXPECT_TRUE(u.workload.prompt_len_range);
  EXPECT_EQ(u.workload.prompt_len, (std::vector<int>{32, 512}));

  const Experiment l =
      default_experiment({"workload.source=decoder", "workload.batch=64", "workload.prompt_len=lognormal:100:0.5"});
  EXPECT_EQ(l.workload.prompt_dist.kind, LengthKind::lognormal);
  const std::vector<int> lens = decoder_prompt_lengths(l.workload);
  ASSERT_EQ(lens.size(), 64u);
  for (size_t b = 0; b < lens.size(); ++b)
    EXPECT_EQ(lens[b], l.workload.prompt_dist.draw(1, l.workload.seed, b)) << b;
  EXPECT_GT(*std::max_element(lens.begin(), lens.end()), *std::min_element(lens.begin(), lens.end()));
  const Experiment back = load_experiment_text(experiment_to_yaml(l), "effective.yaml", {});
  EXPECT_EQ(decoder_prompt_lengths(back.workload), lens);

  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/lens.csv", "tokens\n5\n9\n2\n");
  testing::write_text(dir + "/exp.yaml", "workload: {source: decoder, batch: 7, prompt_len: 'file:lens.csv'}\n");
  const Experiment f = load_experiment_file(dir + "/exp.yaml", {});
  EXPECT_EQ(decoder_prompt_lengths(f.workload), (std::vector<int>{5, 9, 2, 5, 9, 2, 5}));
  EXPECT_EQ(decoder_prompt_tokens(f.workload), 37.0);
  EXPECT_TRUE(std::filesystem::path(prompt_len_file(f.workload)).is_absolute());
  // Read back from another folder, the effective experiment names the same file.
  const Experiment f2 = load_experiment_text(experiment_to_yaml(f), "elsewhere/effective.yaml", {});
  EXPECT_EQ(decoder_prompt_lengths(f2.workload), decoder_prompt_lengths(f.workload));
  // A later plain length replaces the distribution.
  const Experiment plain = load_experiment_file(dir + "/exp.yaml", {"workload.prompt_len=12"});
  EXPECT_EQ(plain.workload.prompt_dist.kind, LengthKind::fixed);
  EXPECT_EQ(decoder_prompt_lengths(plain.workload), std::vector<int>(7, 12));
}

// A bad spec or file is one line naming the file, the line, the key and what was expected.
TEST(LoadConfig, BadPromptLengthSpecsNameTheKey) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/bad.csv", "tokens\n5\nx\n");
  const auto error_of = [&](const std::string& value) {
    testing::write_text(dir + "/exp.yaml", "workload:\n  source: decoder\n  prompt_len: '" + value + "'\n");
    try {
      load_experiment_file(dir + "/exp.yaml", {});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string lognormal = error_of("lognormal:0:1");
  EXPECT_NE(lognormal.find("exp.yaml:3"), std::string::npos) << lognormal;
  EXPECT_NE(lognormal.find("workload.prompt_len: expected fixed, uniform:LO:HI"), std::string::npos) << lognormal;
  EXPECT_EQ(lognormal.find('\n'), std::string::npos) << lognormal;
  const std::string missing = error_of("file:nope.csv");
  EXPECT_NE(missing.find("nope.csv: cannot open the lengths file"), std::string::npos) << missing;
  const std::string bad = error_of("file:bad.csv");
  EXPECT_NE(bad.find("bad.csv:3: tokens: expected an integer"), std::string::npos) << bad;
  const std::string device = error_of("file:/dev/zero");
  EXPECT_NE(device.find("expected a regular file of lengths"), std::string::npos) << device;
}

}  // namespace
}  // namespace moesim
