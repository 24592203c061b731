// Every config key either acts or is named as having no effect (src/config/key_effects.hpp). One row per
// key of the schema: a context where it must act (the computed results of the moesim binary change when
// the key takes a non-default value) and, unless it acts everywhere, a context where it cannot (the
// results stay the same byte for byte, stderr names the key and why, the exit code stays 0, and --strict
// makes it exit 2). A schema key without a row here or in key_effects() fails KeyEffects.EveryKeyHasARow.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/config/key_effects.hpp"
#include "src/config/load_config.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using nlohmann::json;
using testing::run_cli;

// A small, fast run of the built-in experiment (token_choice, capacity factor 1.25, 8 experts on 8
// modeled devices), two batches of 64 tokens through a 16 x 32 executed layer.
const std::string kBase =
    " --format json --set workload.batch=64 --set workload.batches=2 --set execute.hidden=16"
    " --set execute.ffn=32 --set execute.repeats=1";
// The decoder: 2 sequences of 4 prompt tokens and 2 decode steps.
const std::string kDecoder =
    " --set workload.source=decoder --set workload.batch=2 --set workload.prompt_len=4 --set workload.decode_steps=2";
const std::string kDropless = " --set router.capacity_factor=0";

// The files some contexts read, written once: two logits .csv files of 64 tokens x 8 experts, and the
// root of the source tree (configs/olmoe-profile.yaml: a recorded load profile).
struct Files {
  std::string logits_a, logits_b, root;
};
const Files& files() {
  static const Files f = [] {
    Files out;
    const std::string dir = testing::make_temp_dir();
    out.logits_a = dir + "/a.csv";
    out.logits_b = dir + "/b.csv";
    for (const auto& [path, salt] : {std::pair<std::string, int>{out.logits_a, 1}, {out.logits_b, 5}}) {
      std::string text;
      for (int t = 0; t < 64; ++t) {
        for (int e = 0; e < 8; ++e) text += (e ? "," : "") + std::to_string(((t * 7 + e * salt * 3) % 11) * 0.25);
        text += "\n";
      }
      testing::write_text(path, text);
    }
    out.root = std::string(MOESIM_TEST_DATA) + "/../..";
    return out;
  }();
  return f;
}

// "{A}", "{B}", "{ROOT}" in a command stand for the files above.
std::string expand(std::string s) {
  const Files& f = files();
  for (const auto& [mark, value] : std::map<std::string, std::string>{{"{A}", f.logits_a}, {"{B}", f.logits_b},
                                                                      {"{ROOT}", f.root}}) {
    for (size_t at = s.find(mark); at != std::string::npos; at = s.find(mark)) s.replace(at, mark.size(), value);
  }
  return s;
}

// What a run computed: the report without the echo of its experiment (experiment, model, the workload's
// and the executed layer's settings, the profile's name), its provenance, and the measured times and
// noise notes (which vary run to run); the executed layer's output digest and the repeats it timed stay.
void strip_measured(json& j) {
  if (j.is_array()) {
    for (json& x : j) strip_measured(x);
    return;
  }
  if (!j.is_object()) return;
  for (auto it = j.begin(); it != j.end();) {
    if (it.key().rfind("measured_", 0) == 0) {  // metrics.measured_layer_s, measured_batching_efficiency
      it = j.erase(it);
      continue;
    }
    if (it.key() == "measured" && it->is_object()) {
      json kept = json::object();
      for (const char* k : {"output_digest", "repeats"})
        if (it->contains(k)) kept[k] = (*it)[k];
      *it = kept;
    } else {
      strip_measured(*it);
    }
    ++it;
  }
}

// The first path where two computed results differ ("" when equal), for the failure messages.
std::string first_difference(const std::string& a, const std::string& b) {
  const json ja = json::parse(a, nullptr, false), jb = json::parse(b, nullptr, false);
  if (ja.is_discarded() || jb.is_discarded()) return a == b ? "" : "(text differs)";
  const json patch = json::diff(ja, jb);
  return patch.empty() ? "" : patch[0].value("path", "?");
}

void strip(json& j) {
  if (j.contains("strategies")) {
    for (json& st : j["strategies"]) {  // the rows' labels echo router.gating
      st.erase("gating");
      st.erase("strategy");
    }
  }
  // `layout`: moesim train's echo of its train: section (the layout it computed is in its variants).
  for (const char* k : {"provenance", "experiment", "model", "moesim_version", "layout"}) j.erase(k);
  if (j.contains("workload")) j["workload"] = {{"num_tokens", j["workload"].value("num_tokens", json())}};
  if (j.contains("execute")) j["execute"] = {{"output_digest", j["execute"].value("output_digest", json())}};
  if (j.contains("hardware") && j["hardware"].is_object()) {
    j["hardware"].erase("name");
    j["hardware"].erase("digest");
  }
  strip_measured(j);
}

std::string computed(const std::string& out) {
  json j = json::parse(out, nullptr, false);
  if (j.is_discarded()) return out;  // a table (check): compared as printed
  strip(j);
  return j.dump(1);
}

struct Row {
  const char* key;
  const char* value;       // a non-default value
  std::string acts;        // a command where it must act
  std::string inert;       // a command where it cannot; "" where it acts in every run
  bool label = false;      // a label: the report, not a computed number, shows it
  bool cuda = false;       // it acts on the CUDA backend only: that half skips without a device
};

// workload.expert_map for the 64 experts of configs/olmoe-profile.yaml: slots 0 and 1 swapped.
const std::string& swap_first_two_experts() {
  static const std::string map = [] {
    std::string s = "[1,0";
    for (int e = 2; e < 64; ++e) s += "," + std::to_string(e);
    return s + "]";
  }();
  return map;
}

const std::vector<Row>& rows() {
  const std::string run = "run" + kBase;
  const std::string dec = run + kDecoder;
  // moesim train on the built-in experiment: 8 GPUs, EP 8, 2 micro-batches of 4096 tokens, 2 routed.
  const std::string train = "train --format json --set train.global_batch=16 --set train.routed_micro_batches=2";
  const std::string mla = train + " --set model.attention=mla --set model.kv_lora_rank=512 --set model.qk_rope_head_dim=64";
  const std::string route = "route --format json --logits {A}";
  const std::string profile = "run {ROOT}/configs/olmoe-profile.yaml --format json";
  const std::string logits = run + " --set workload.source=logits --set workload.path={A}";
  const std::string afb = run + " --set router.gating=aux_free_bias --set workload.batches=4";
  const std::string skewed = run + " --set workload.skew=1.5";  // many drops at capacity factor 1.25
  const std::string drawn = "run {ROOT}/configs/experiments/aiconfigurator-power-law.yaml --format json";
  const std::string eplb = run + " --set placement.policy=global";  // plans from loads (auto without replicas does not)
  static const std::vector<Row> table = {
      {"name", "other", run, "", true},
      {"model.name", "other", run, "", true},
      {"model.hidden", "2048", run, route},
      {"model.ffn", "7168", run, route},
      {"model.experts", "16", run, ""},
      {"model.top_k", "3", run, ""},
      {"model.shared_experts", "1", run, route},
      {"model.layers", "16", dec, run},
      {"model.moe_layers", "16", dec, run},
      {"model.heads", "16", dec, run},
      {"model.kv_heads", "4", dec, run},
      {"model.head_dim", "64", dec, run},
      {"model.vocab", "100", dec, run},  // the decoder caps its vocabulary at 512
      {"model.dtype", "fp8", run, route},
      {"model.weight_dtype", "int4", run, route},
      {"model.gated_experts", "false", run, route},
      {"model.dense_ffn", "20000", train + " --set model.moe_layers=16", train},
      {"model.mtp_layers", "1", train, run},
      {"model.attention", "mla", train + " --set model.kv_lora_rank=512 --set model.qk_rope_head_dim=64", run},
      {"model.q_lora_rank", "1536", mla, train},
      {"model.kv_lora_rank", "256", mla, train},
      {"model.qk_rope_head_dim", "32", mla, train},
      {"model.v_head_dim", "64", mla, train},
      {"model.hf_config", "{ROOT}/tests/data/hf/qwen3-30b-a3b/config.json", run, route},
      {"router.gating", "sinkhorn", run, profile},
      {"router.semantics", "megatron", run + " --set workload.batch=400 --set router.capacity_factor=1.1",
       run + " --no-execute" + kDropless},
      {"router.score", "sigmoid", run, run + " --set router.gating=hash"},
      {"router.renormalize", "false", run, run + " --set router.gating=hash"},
      {"router.pre_softmax", "false", run + " --set router.renormalize=false", run + " --set router.score=sigmoid"},
      {"router.capacity_factor", "2", run, profile},
      {"router.min_capacity", "100", run, run + kDropless},
      {"router.drop_policy", "random", skewed, run + kDropless},
      {"router.priority", "token_major", skewed, run + kDropless},
      {"router.capacity_scope", "sequence", dec, run},
      {"router.renormalize_after_drop", "true", skewed, run + kDropless},
      {"router.layout", "block", run, ""},
      {"router.block_size", "32", run + " --set router.layout=block", run},
      {"router.noise_std", "3", run + " --set router.gating=noisy_top_k", run},
      {"router.sinkhorn_iterations", "2", run + " --set router.gating=sinkhorn", run},
      {"router.sinkhorn_tolerance", "0.5", run + " --set router.gating=sinkhorn", run},
      {"router.groups", "4", run + " --set router.gating=group_limited", run},
      {"router.topk_groups", "2", run + " --set router.gating=group_limited", run},
      {"router.group_mask_fill", "0",
       run + " --set router.gating=aux_free_bias --set router.groups=4 --set router.bias_update_rate=0.05"
             " --set workload.batches=6",
       run + " --set router.gating=group_limited"},
      {"router.bias_update_rate", "0.5", afb, run},
      {"router.bias_update_counts", "kept", afb + " --set workload.skew=1.5", run},
      {"router.bias_update_arithmetic", "float32", afb, run},
      {"router.capacity_rounding", "float", run + " --set workload.batch=400 --set router.capacity_factor=1.1",
       run + kDropless},
      {"router.routed_scaling_factor", "2.5", run, run + " --no-execute"},
      {"workload.source", "decoder", run, ""},
      {"workload.batch", "128", run, logits},
      {"workload.batches", "3", run, dec},
      {"workload.prompt_len", "6", dec, run},
      {"workload.prompt_len_range", "true", dec + " --set workload.prompt_len=[3,8]",
       run + " --set workload.prompt_len=[3,8]"},
      {"workload.decode_steps", "3", dec, run},
      {"workload.seed", "11", run, profile},
      {"workload.skew", "1.5", run, logits},
      {"workload.popularity", "lognormal", run, logits},
      {"workload.group_skew", "0.5", run, logits},
      {"workload.drift", "0.5", run, dec},
      {"workload.batch_variation", "0.5", run, dec},
      {"workload.topics", "3", dec, run},
      {"workload.path", "{B}", logits, run},
      {"workload.profile_key", "olmoe/expert_counts/book", profile, run},
      // The report names the format and whether workload.format chose it (a JSON file read as JSON either way).
      {"workload.format", "moesim_json", profile, run, true},
      {"workload.expert_map", swap_first_two_experts().c_str(), profile, run},
      {"workload.distribution", "balanced", drawn, run},
      {"workload.power_law_alpha", "1.5", drawn, drawn + " --set workload.distribution=balanced"},
      {"hardware", "h200", run, route},
      {"placement.kind", "single", run, route},
      {"placement.policy", "round_robin", run + " --set placement.devices=4", run + " --set placement.kind=single"},
      {"placement.devices", "4", run, run + " --set placement.kind=single"},
      // The single placement: every placement honours it (the expert-parallel one in tensor_parallel_test).
      {"placement.tensor_parallel", "2", run + " --set placement.kind=single", route},
      {"placement.replicas", "8", run, run + " --set placement.kind=single"},
      {"placement.nodes", "2", run, run + " --set placement.kind=single"},
      {"placement.groups", "4", run + " --set placement.policy=hierarchical", run},
      {"placement.map", "[0,0,1,1,2,2,3,3]", run + " --set placement.policy=map --set placement.map=[0,1,2,3,4,5,6,7]",
       run + " --set placement.kind=single --set placement.policy=map"},
      {"placement.spread_replicas", "true",
       run + " --set placement.devices=4 --set placement.replicas=4 --set workload.skew=1.5", run},
      {"placement.plan_from", "oracle", eplb + " --set workload.skew=1.5", run},
      {"placement.plan_profile", "{ROOT}/data/routing-traces/olmoe-mixtral-expert-counts/expert_counts.json#"
                                 "mistral/expert_counts/github",
       eplb + " --set placement.plan_from=profile --set placement.plan_profile={ROOT}/data/routing-traces/"
              "olmoe-mixtral-expert-counts/expert_counts.json#mistral/expert_counts/arxiv",
       run + " --set placement.kind=single --set placement.plan_from=profile"},
      {"placement.warmup_batches", "1", eplb + " --set workload.skew=1.5", run},
      {"placement.rebalance_every", "1", eplb, eplb + " --set placement.kind=single"},
      {"placement.load_estimator", "ema", eplb + " --set placement.rebalance_every=1 --set workload.batches=4", eplb},
      {"placement.ema_weight", "0.9",
       eplb + " --set placement.rebalance_every=1 --set placement.load_estimator=ema --set workload.batches=4",
       eplb + " --set placement.rebalance_every=1"},
      {"placement.a2a_kernel", "low_latency", run, run + " --set placement.kind=single"},
      {"placement.dispatch_dtype", "fp8", run, run + " --set placement.kind=single"},
      {"placement.combine_dtype", "fp32", run, run + " --set placement.kind=single"},
      {"placement.overlap", "two_batch", run, run + " --set placement.kind=single"},
      // 12 sequences of 2..30 prompt tokens over 8 devices: greedy by KV tokens evens what round robin does not.
      {"placement.request_balance", "kv_tokens", dec + " --set workload.batch=12 --set workload.prompt_len=2..30", run},
      // 2 GPUs an attention rank: half the heads on each, over 4 ranks instead of 8.
      {"placement.attention_tp", "2", dec, run},
      {"execute.enabled", "false", run, run + " --no-execute"},
      {"execute.hidden", "24", run, run + " --no-execute"},
      {"execute.ffn", "48", run, run + " --no-execute"},
      // The decoder runs at the execute: size with or without --no-execute (its hidden states make the routing).
      {"execute.layers", "2", dec + " --no-execute", run},
      {"execute.repeats", "2", run, run + " --no-execute"},
      {"execute.dtype", "bf16", run + " --backend cuda", run, false, true},
      {"train.gpus", "16", train, run},
      {"train.tp", "2", train, run},
      {"train.pp", "2", train + " --set train.gpus=16", run},
      {"train.vpp", "2", train + " --set train.gpus=16 --set train.pp=2", run},
      {"train.ep", "4", train, run},
      {"train.etp", "2", train + " --set train.ep=4", run},
      {"train.cp", "2", train, run},
      {"train.seq_len", "2048", train, run},
      {"train.global_batch", "32", train, run},
      {"train.micro_batch", "2", train, run},
      {"train.precision", "fp8", train, run},
      {"train.recompute", "full", train, run},
      {"train.dispatcher", "deepep", train, train + " --set train.ep=1"},
      {"train.routing", "forced_balance", train, run},
      {"train.ep_overlap", "true", train, train + " --set train.ep=1"},
      {"train.tp_comm_overlap", "false", train + " --set train.tp=2", train},
      {"train.dp_overlap", "false", train, train + " --set train.gpus=1 --set train.ep=1"},
      {"train.routed_micro_batches", "3", train + " --set train.routing=rank_overload:1.2", run},
      {"expect", "{imbalance: {max: 1.0}}", "check {FILE}", run},
  };
  return table;
}

// The command with `key=value` set.
std::string with(const std::string& cmd, const Row& r) {
  return cmd + " --set '" + std::string(r.key) + "=" + r.value + "'";
}

// `check` needs a file: the built-in experiment, small, as `moesim config` prints it (every key given, each
// at its built-in value, so none counts as set by the user).
std::string check_command(const std::string& cmd, const std::string& extra) {
  static const std::string file = [] {
    const std::string path = testing::make_temp_dir() + "/small.yaml";
    const auto r = run_cli("config --set workload.batch=64 --set execute.enabled=false --set expect=[]");
    testing::write_text(path, r.out);
    return path;
  }();
  std::string c = cmd;
  c.replace(c.find("{FILE}"), 6, file);
  return c + extra;
}

const Row* find_row(const std::string& key) {
  for (const Row& r : rows())
    if (key == r.key) return &r;
  return nullptr;
}

// The decoder's shape keys act under --no-execute too, and no warning says otherwise; execute.repeats does
// not (only the timing repeats).
TEST(KeyEffects, DecoderShapeActsWithoutTheTimedLayer) {
  const std::string dec = "run" + kBase + kDecoder + " --no-execute";
  for (const char* kv : {"execute.hidden=24", "execute.ffn=48", "execute.layers=2"}) {
    const auto a = run_cli(dec), b = run_cli(dec + " --set " + kv);
    ASSERT_EQ(b.exit_code, 0) << kv << ": " << b.err;
    const std::string key = std::string(kv).substr(0, std::string(kv).find('='));
    EXPECT_EQ(b.err.find(key + " has no effect"), std::string::npos) << kv << ": " << b.err;
    EXPECT_NE(computed(a.out), computed(b.out)) << kv;
  }
  const auto r = run_cli(dec + " --set execute.repeats=2");
  EXPECT_NE(r.err.find("execute.repeats has no effect"), std::string::npos) << r.err;
}

TEST(KeyEffects, EveryKeyHasARow) {
  for (const std::string& key : schema_key_paths()) {
    bool in_table = false;
    for (const KeyEffect& k : key_effects()) in_table |= key == k.key;
    EXPECT_TRUE(in_table) << key << ": no row in key_effects() (src/config/key_effects.cpp)";
    EXPECT_NE(find_row(key), nullptr) << key << ": no row in this test";
  }
  EXPECT_EQ(key_effects().size(), schema_key_paths().size());
  EXPECT_EQ(rows().size(), schema_key_paths().size());
}

class KeyEffectsRow : public ::testing::TestWithParam<std::string> {};

TEST_P(KeyEffectsRow, ActsWhereItMustAndIsNamedWhereItCannot) {
  const Row& r = *find_row(GetParam());
  const std::string line = "moesim: " + std::string(r.key) + " has no effect";
  if (!r.inert.empty()) {
    // Where it cannot act: the same results, one stderr line naming it, exit 0; --strict exits 2.
    const std::string inert_cmd = expand(with(r.inert, r));
    const auto plain = run_cli(expand(r.inert));
    const auto inert = run_cli(inert_cmd);
    ASSERT_EQ(plain.exit_code, 0) << r.inert << "\n" << plain.err;
    ASSERT_EQ(inert.exit_code, 0) << inert_cmd << "\n" << inert.err;
    EXPECT_EQ(first_difference(computed(plain.out), computed(inert.out)), "") << inert_cmd << ": the results changed";
    EXPECT_NE(inert.err.find(line), std::string::npos) << inert_cmd << "\n" << inert.err;
    const auto strict = run_cli(inert_cmd + " --strict");
    EXPECT_EQ(strict.exit_code, 2) << inert_cmd << " --strict\n" << strict.err;
    EXPECT_NE(strict.err.find(std::string(r.key) + " has no effect"), std::string::npos) << strict.err;
    EXPECT_TRUE(strict.out.empty()) << "--strict must stop before any report";
  }
  // Where it must act: the computed results change, and stderr does not name it.
  const bool check = r.acts.rfind("check", 0) == 0;
  const std::string base_cmd = expand(check ? check_command(r.acts, "") : r.acts);
  const std::string set_cmd = check ? check_command(r.acts, std::string(" --set '") + r.key + "=" + r.value + "'")
                                    : expand(with(r.acts, r));
  const auto before = run_cli(base_cmd);
  if (r.cuda && before.exit_code == 3) GTEST_SKIP() << r.key << " acts on the CUDA backend: " << before.err;
  const auto after = run_cli(set_cmd);
  ASSERT_EQ(before.exit_code, 0) << base_cmd << "\n" << before.err;
  ASSERT_LE(after.exit_code, 1) << set_cmd << "\n" << after.err;
  EXPECT_EQ(after.err.find(line), std::string::npos) << set_cmd << "\n" << after.err;
  if (r.label) {
    EXPECT_NE(before.out, after.out) << set_cmd;
  } else if (check) {
    EXPECT_NE(before.exit_code, after.exit_code) << set_cmd << "\n" << after.out;
  } else {
    EXPECT_NE(first_difference(computed(before.out), computed(after.out)), "") << set_cmd << ": the results did not change";
  }
}

std::vector<std::string> row_keys() {
  std::vector<std::string> keys;
  for (const Row& r : rows()) keys.push_back(r.key);
  return keys;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n;
  for (char c : info.param) n += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(EveryKey, KeyEffectsRow, ::testing::ValuesIn(row_keys()), test_name);

TEST(KeyEffects, ConfigOutputFedBackSetsOnlyWhatDiffersFromTheDefaults) {
  // `moesim config` prints every key; loaded back, only those that differ from the defaults count as set.
  const auto round_trip = [](const std::vector<std::string>& sets) {
    const Experiment e = load_experiment_text("{}\n", "plain.yaml", sets);
    return user_set_keys(load_experiment_text(experiment_to_yaml(e), "printed.yaml", {}));
  };
  EXPECT_EQ(round_trip({}), std::vector<std::string>{});
  EXPECT_EQ(round_trip({"router.noise_std=3"}), std::vector<std::string>{"router.noise_std"});
  // A preset's keys are printed with the preset's values: under it they are its defaults, not set.
  EXPECT_EQ(round_trip({"router.semantics=megatron"}), std::vector<std::string>{"router.semantics"});
  // The built-in experiment's own keys are not the user's; a --set is.
  EXPECT_EQ(user_set_keys(default_experiment({})), std::vector<std::string>{});
  EXPECT_EQ(user_set_keys(default_experiment({"router.noise_std=3"})), std::vector<std::string>{"router.noise_std"});
}

TEST(KeyEffects, CompareWarnsOnlyWhereNoRowUsesTheKey) {
  // noise_std acts in the noisy_top_k row of --gating all, so nothing is said.
  const auto all = run_cli("compare --gating all --no-execute --set router.noise_std=3" + kBase.substr(14));
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.err.find("router.noise_std"), std::string::npos) << all.err;
  const auto two = run_cli("compare --gating token_choice,hash --no-execute --set router.noise_std=3" + kBase.substr(14));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.err.find("moesim: router.noise_std has no effect with router.gating=token_choice"), std::string::npos)
      << two.err;
}

TEST(KeyEffects, ATraceWithoutLogitsNamesTheRouterKeysAndTakesTheCapacity) {
  // A dumped routing replays as recorded: the router's keys have no effect, the capacity acts on it.
  const std::string trace = testing::make_temp_dir() + "/routing.jsonl";
  const auto dump = run_cli("run --no-execute --dump-routing " + trace +
                            " --set workload.batch=64 --set workload.batches=2 --set router.capacity_factor=0");
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  const std::string replay = "run --format json --set workload.source=trace --set workload.path=" + trace;
  const auto plain = run_cli(replay);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto gated = run_cli(replay + " --set router.gating=sinkhorn");
  ASSERT_EQ(gated.exit_code, 0) << gated.err;
  EXPECT_NE(gated.err.find("moesim: router.gating has no effect with workload.source=trace without logits"),
            std::string::npos)
      << gated.err;
  EXPECT_EQ(first_difference(computed(plain.out), computed(gated.out)), "");
  const auto capped = run_cli(replay + " --set router.capacity_factor=1");
  ASSERT_EQ(capped.exit_code, 0) << capped.err;
  EXPECT_EQ(capped.err.find("router.capacity_factor"), std::string::npos) << capped.err;
  EXPECT_NE(first_difference(computed(plain.out), computed(capped.out)), "");
}

TEST(KeyEffects, ExplainListsEveryKey) {
  const auto r = run_cli("config --explain");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& key : schema_key_paths()) EXPECT_NE(r.out.find(key), std::string::npos) << key;
  const auto md = run_cli("config --explain --format markdown");
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("| `router.noise_std` | gating noisy_top_k |"), std::string::npos) << md.out;
}

TEST(KeyEffects, ReadmeQuotesTheTable) {
  const std::string readme = testing::read_text(std::string(MOESIM_SOURCE_DIR) + "/README.md");
  const std::string begin = "<!-- key-effects:begin -->\n", end = "<!-- key-effects:end -->";
  const auto from = readme.find(begin), to = readme.find(end);
  ASSERT_NE(from, std::string::npos) << "README.md lost its key-effects markers";
  ASSERT_NE(to, std::string::npos);
  EXPECT_EQ(readme.substr(from + begin.size(), to - from - begin.size()), explain_key_effects(true))
      << "regenerate the README table: moesim config --explain --format markdown";
}

}  // namespace
}  // namespace moesim
