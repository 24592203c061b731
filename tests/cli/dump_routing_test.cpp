// Tests of `route --dump-routing` and `run --dump-routing`: the dump is a trace (docs/workloads.md "Trace
// format") whose lines are the routing the command made; `run`'s dump replayed with workload.source trace
// gives the same loads, drops, metrics and modeled times (synthetic batches and the decoder, dropless and
// with capacity drops); refusals exit 2 with one line and leave no file. Runs the built binary. Host only.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "router/balance_metrics.hpp"
#include "router/route.hpp"
#include "src/workload/synthetic_logits.hpp"
#include "src/workload/trace_replay.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

std::string as_sets(const std::vector<std::string>& sets) {
  std::string out;
  for (const std::string& s : sets) out += " --set " + s;
  return out;
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every metric a record reports from its routing, and its modeled MoE time, must match exactly: the
// replay sees the same integers and the same float weights.
void expect_same_batch(const BalanceMetrics& want, const BalanceMetrics& got, const std::string& where) {
  EXPECT_EQ(got.load, want.load) << where;
  EXPECT_EQ(got.demand, want.demand) << where;
  EXPECT_EQ(got.capacity, want.capacity) << where;
  EXPECT_EQ(got.dropped, want.dropped) << where;
  EXPECT_EQ(got.drop_rate, want.drop_rate) << where;
  EXPECT_EQ(got.tokens_unrouted, want.tokens_unrouted) << where;
  EXPECT_EQ(got.padding_waste, want.padding_waste) << where;
  EXPECT_EQ(got.imbalance, want.imbalance) << where;
  EXPECT_EQ(got.cv, want.cv) << where;
  EXPECT_EQ(got.entropy_norm, want.entropy_norm) << where;
  EXPECT_EQ(got.active_experts, want.active_experts) << where;
}

void expect_same_cost(const std::vector<ModeledPlacement>& want, const std::vector<ModeledPlacement>& got,
                      const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t p = 0; p < want.size(); ++p) {
    EXPECT_EQ(got[p].cost.actual.quantized_s, want[p].cost.actual.quantized_s) << where << " placement " << p;
    EXPECT_EQ(got[p].cost.balanced.quantized_s, want[p].cost.balanced.quantized_s) << where << " placement " << p;
    EXPECT_EQ(got[p].cost.batching_efficiency, want[p].cost.batching_efficiency) << where << " placement " << p;
    EXPECT_EQ(got[p].cost.erosion.dropped_work_s, want[p].cost.erosion.dropped_work_s) << where << " placement " << p;
  }
}

const std::vector<std::string> kSynthetic = {"workload.batch=48", "workload.batches=3", "workload.seed=11",
                                             "model.experts=6",   "model.top_k=2",     "placement.policy=round_robin"};
const std::vector<std::string> kDecoder = {
    "workload.source=decoder", "workload.batch=4",  "workload.prompt_len=3..9", "workload.decode_steps=3",
    "workload.topics=3",       "workload.seed=5",   "model.experts=6",          "model.top_k=2",
    "execute.hidden=48",       "execute.ffn=32",    "execute.layers=2",         "placement.policy=round_robin"};

// `run --dump-routing` on `sets`, then the dump replayed in-process; returns both results.
std::pair<RunResult, RunResult> dump_and_replay(const std::vector<std::string>& sets, const std::string& tag) {
  const std::string dir = testing::make_temp_dir();
  const std::string dump = dir + "/" + tag + ".jsonl";
  const auto r = run_cli("run --no-execute --dump-routing " + dump + as_sets(sets));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dump)) << dump;
  const Experiment original = default_experiment(sets);
  RunOptions opts;
  opts.execute = false;
  opts.records = true;  // every record's loads and cost, compared below
  RunResult want = run_experiment(original, own_variant(original), opts);
  const Experiment replay = default_experiment(plus(sets, {"workload.source=trace", "workload.path=" + dump}));
  RunResult got = run_experiment(replay, own_variant(replay), opts);
  EXPECT_TRUE(got.trace_replayed);
  return {std::move(want), std::move(got)};
}

void check_batches_round_trip(const std::vector<std::string>& sets, const std::string& tag, bool expect_drops) {
  const auto [want, got] = dump_and_replay(sets, tag);
  const VariantResult& w = want.variants.at(0);
  const VariantResult& g = got.variants.at(0);
  ASSERT_EQ(g.per_batch.size(), w.per_batch.size()) << tag;
  int64_t dropped = 0;
  for (size_t i = 0; i < w.per_batch.size(); ++i) {
    expect_same_batch(w.per_batch[i], g.per_batch[i], tag + " batch " + std::to_string(i));
    dropped += w.per_batch[i].dropped;
  }
  EXPECT_EQ(dropped > 0, expect_drops) << tag << ": the fixture should " << (expect_drops ? "" : "not ") << "drop";
  // A batch run models every batch, the replay each record: the last ones agree, and so do their means (the
  // headline of both).
  expect_same_cost(w.last_modeled, g.records.back().modeled, tag + " last");
  expect_same_cost(w.modeled, g.modeled, tag + " mean");
}

TEST(DumpRouting, SyntheticRoundTripDropless) {
  check_batches_round_trip(plus(kSynthetic, {"router.capacity_factor=0"}), "synthetic_dropless", false);
}

TEST(DumpRouting, SyntheticRoundTripWithCapacityDrops) {
  // Capacity 1.0 on skewed logits drops; the replay applies the same capacity and keeps the recorded drops.
  check_batches_round_trip(plus(kSynthetic, {"router.capacity_factor=1", "workload.skew=1.5"}), "synthetic_capacity",
                           true);
  check_batches_round_trip(
      plus(kSynthetic, {"router.capacity_factor=1", "workload.skew=1.5", "router.drop_policy=score",
                        "router.renormalize_after_drop=true", "router.layout=capacity"}),
      "synthetic_score", true);
}

TEST(DumpRouting, LogitsFileRoundTripWithCapacityDrops) {
  // A user's logits file (40 tokens x 6 experts, skewed so that capacity 1.0 drops): one batch.
  const std::string dir = testing::make_temp_dir();
  const std::vector<float> logits = synthetic_logits(40, 6, 1.5, 3);
  std::string text;
  for (int t = 0; t < 40; ++t) {
    for (int e = 0; e < 6; ++e) text += (e ? "," : "") + std::to_string(logits[t * 6 + e]);
    text += "\n";
  }
  testing::write_text(dir + "/logits.csv", text);
  check_batches_round_trip(plus(kSynthetic, {"workload.source=logits", "workload.path=" + dir + "/logits.csv",
                                             "router.capacity_factor=1"}),
                           "logits_file", true);
}

void check_decoder_round_trip(const std::vector<std::string>& sets, const std::string& tag, bool expect_drops) {
  const auto [want, got] = dump_and_replay(sets, tag);
  const VariantResult& w = want.variants.at(0);
  const VariantResult& g = got.variants.at(0);
  // Prefill (step 0) and decode steps 1..3, each over both executed MoE layers.
  ASSERT_EQ(w.records.size(), 8u) << tag;
  ASSERT_EQ(g.records.size(), w.records.size()) << tag;
  int64_t dropped = 0;
  for (size_t i = 0; i < w.records.size(); ++i) {
    const std::string where = tag + " record " + std::to_string(i);
    EXPECT_EQ(g.records[i].phase, w.records[i].phase) << where;
    EXPECT_EQ(g.records[i].step, w.records[i].step) << where;
    EXPECT_EQ(g.records[i].layer, w.records[i].layer) << where;
    EXPECT_EQ(g.records[i].num_tokens, w.records[i].num_tokens) << where;
    expect_same_batch(w.per_batch[i], g.per_batch[i], where);
    expect_same_cost(w.records[i].modeled, g.records[i].modeled, where);
    dropped += w.per_batch[i].dropped;
  }
  EXPECT_EQ(dropped > 0, expect_drops) << tag;
  // Phase totals of the MoE layers (the replay has no attention to model).
  ASSERT_EQ(g.phases.size(), w.phases.size()) << tag;
  for (size_t p = 0; p < w.phases.size(); ++p) {
    EXPECT_EQ(g.phases[p].phase, w.phases[p].phase) << tag;
    EXPECT_EQ(g.phases[p].tokens, w.phases[p].tokens) << tag;
    EXPECT_EQ(g.phases[p].modeled_moe_s, w.phases[p].modeled_moe_s) << tag;
  }
}

TEST(DumpRouting, DecoderRoundTripDropless) {
  check_decoder_round_trip(plus(kDecoder, {"router.capacity_factor=0"}), "decoder_dropless", false);
}

TEST(DumpRouting, DecoderRoundTripWithCapacityDrops) {
  check_decoder_round_trip(plus(kDecoder, {"router.capacity_factor=0.6", "router.min_capacity=0"}), "decoder_capacity",
                           true);
}

TEST(DumpRouting, TraceRunDumpsItsReplay) {
  // A dropless trace replayed under capacity 1 and dumped: the dump carries the replay's drops and replays
  // dropless to the same loads.
  const std::string dir = testing::make_temp_dir();
  const std::string src = dir + "/src.jsonl";
  ASSERT_EQ(run_cli("run --no-execute --dump-routing " + src +
                    as_sets(plus(kSynthetic, {"router.capacity_factor=0", "workload.skew=1.5"})))
                .exit_code,
            0);
  const std::vector<std::string> trace_sets =
      plus(kSynthetic, {"workload.source=trace", "workload.path=" + src, "router.capacity_factor=1"});
  const std::string again = dir + "/again.jsonl";
  const auto r = run_cli("run --no-execute --dump-routing " + again + as_sets(trace_sets));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Experiment capped = default_experiment(trace_sets);
  const RunResult want = run_experiment(capped, own_variant(capped), RunOptions{});
  const Experiment dropless = default_experiment(
      plus(kSynthetic, {"workload.source=trace", "workload.path=" + again, "router.capacity_factor=0"}));
  const RunResult got = run_experiment(dropless, own_variant(dropless), RunOptions{});
  int64_t dropped = 0;
  for (size_t i = 0; i < want.variants[0].per_batch.size(); ++i) {
    EXPECT_EQ(got.variants[0].per_batch[i].load, want.variants[0].per_batch[i].load) << i;
    EXPECT_EQ(got.variants[0].per_batch[i].dropped, want.variants[0].per_batch[i].dropped) << i;
    dropped += want.variants[0].per_batch[i].dropped;
  }
  EXPECT_GT(dropped, 0);
}

TEST(DumpRouting, RouteDumpIsTheRouting) {
  // 5 tokens x 4 experts; top-2 with capacity factor 1: C = ceil(5 * 2 / 4) = 3.
  const std::string dir = testing::make_temp_dir();
  const std::string csv = dir + "/logits.csv";
  const std::vector<float> logits = {3, 2, 1, 0, 3, 1, 2, 0, 3, 0, 2, 1, 3, 2, 0, 1, 0, 1, 2, 3};
  std::string text;
  for (int t = 0; t < 5; ++t) {
    for (int e = 0; e < 4; ++e) text += (e ? "," : "") + std::to_string(static_cast<int>(logits[t * 4 + e]));
    text += "\n";
  }
  testing::write_text(csv, text);
  const std::string dump = dir + "/route.jsonl";
  auto r = run_cli("route --logits " + csv + " --capacity-factor 1 --dump-routing " + dump);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Trace t = read_trace_file(dump, 4);
  ASSERT_EQ(t.batches.size(), 1u);
  EXPECT_FALSE(t.has_logits) << "logits only with --dump-logits";
  const TraceBatch& b = t.batches[0];
  EXPECT_EQ(b.step, 0);
  EXPECT_EQ(b.layer, 0);
  // Top-2: t0 (0, 1), t1 (0, 2), t2 (0, 2), t3 (0, 1), t4 (3, 2). Expert 0 is asked four times for C = 3:
  // by k_major position t0, t1, t2 keep it and t3 drops it (assignment 6); the others stay within 3.
  const Experiment e = default_experiment({"model.experts=4", "model.top_k=2", "router.capacity_factor=1",
                                           "router.groups=1", "router.topk_groups=1", "placement.kind=single"});
  RouteRequest req;
  req.logits = logits.data();
  req.num_tokens = 5;
  req.num_experts = 4;
  req.top_k = 2;
  req.seed = e.workload.seed;
  const Routing want = route_omp(e.router, req, nullptr);
  const Routing got = recorded_routing(b, 4, 2);
  EXPECT_EQ(got.expert, want.expert);
  EXPECT_EQ(got.weight, want.weight);
  EXPECT_EQ(got.kept, want.kept);
  EXPECT_EQ(got.expert, (std::vector<int32_t>{0, 1, 0, 2, 0, 2, 0, 1, 3, 2}));
  EXPECT_EQ(got.kept, (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 0, 1, 1, 1}));
  // --dump-logits adds the logits as read.
  r = run_cli("route --logits " + csv + " --capacity-factor 1 --dump-routing " + dump + " --dump-logits");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Trace tl = read_trace_file(dump, 4);
  EXPECT_TRUE(tl.has_logits);
  EXPECT_EQ(tl.batches.at(0).logits, logits);
}

TEST(DumpRouting, RefusalsExitTwoAndLeaveNoFile) {
  const std::string dir = testing::make_temp_dir();
  const std::string dump = dir + "/d.jsonl";
  struct Case {
    std::string args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"run " + std::string(MOESIM_SOURCE_DIR) + "/configs/olmoe-profile.yaml --no-execute --dump-routing " + dump,
       "--dump-routing: workload.source load_profile"},
      {"run --no-execute --dump-logits", "--dump-logits: expected together with --dump-routing"},
      {"run --no-execute --set router.gating=expert_choice --dump-routing " + dump + as_sets(kSynthetic),
       "expected model.top_k = 2"},
      {"run --no-execute --dump-routing " + dir + "/missing/d.jsonl", "missing/d.jsonl"},
  };
  for (const Case& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_TRUE(fs::is_empty(dir)) << "no dump and no temporary file after a refusal";
  // Expert choice with its logits is written (a replay re-routes them).
  const auto ok = run_cli("run --no-execute --set router.gating=expert_choice --dump-routing " + dump +
                          " --dump-logits" + as_sets(kSynthetic));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(read_trace_file(dump, 6).has_logits);
}

TEST(DumpRouting, FailedRunKeepsTheOldFile) {
  // A run that fails after the dump began (a replay whose second batch lists one expert under top_k 2)
  // leaves an existing file as it was and no temporary beside it.
  const std::string dir = testing::make_temp_dir();
  const std::string dump = dir + "/d.jsonl";
  testing::write_text(dump, "old\n");
  testing::write_text(dir + "/t.jsonl",
                      "{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1, 2], \"weights\": [0.5, 0.5]}\n"
                      "{\"step\": 1, \"layer\": 0, \"token\": 0, \"experts\": [1], \"weights\": [1]}\n");
  const auto r = run_cli("run --no-execute --set workload.source=trace --set workload.path=" + dir +
                         "/t.jsonl --set model.experts=6 --set model.top_k=2 --set placement.kind=single "
                         "--dump-routing " + dump);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("t.jsonl:2:"), std::string::npos) << r.err;
  EXPECT_EQ(testing::read_text(dump), "old\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);
}

}  // namespace
}  // namespace moesim
