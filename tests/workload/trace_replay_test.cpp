// Tests of trace replay: recorded decisions (with capacity drops) written and read back reproduce every
// assignment exactly, through the parser and through the pipeline; a trace with logits is re-routed by
// the variant's strategy; every malformed line is an InputError naming the file and line (exit 2). A replay
// applies router.capacity_factor and the drop policy to the recorded assignments (hand-worked drops below).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "router/route.hpp"
#include "tests/support/run_cli.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/synthetic_logits.hpp"
#include "src/workload/trace_replay.hpp"

namespace moesim {
namespace {

struct Recorded {
  int64_t step;
  int layer;
  Routing routing;
  std::vector<float> logits;
  std::vector<int64_t> token_ids;
};

// Routings of a few (step, layer) batches: top-2 of 6 experts with capacity factor 1 (some drops).
std::vector<Recorded> record_batches(uint64_t seed) {
  RouterConfig cfg;
  cfg.capacity_factor = 1.0;
  std::vector<Recorded> out;
  int i = 0;
  for (int64_t step : {0, 1, 2}) {
    for (int layer : {0, 3}) {
      Recorded r{step, layer, {}, {}, {}};
      const int64_t n = step == 0 ? 11 : 4;
      r.logits = synthetic_logits(n, 6, 1.5, seed + i);
      r.token_ids = synthetic_token_ids(n, 100, seed + i);
      RouteRequest req;
      req.logits = r.logits.data();
      req.num_tokens = n;
      req.num_experts = 6;
      req.top_k = 2;
      r.routing = route_omp(cfg, req, nullptr);
      out.push_back(r);
      ++i;
    }
  }
  return out;
}

std::string write_trace(const std::vector<Recorded>& rs, bool with_logits) {
  std::string text;
  for (const Recorded& r : rs) {
    text += format_trace_lines(r.routing, with_logits ? r.logits.data() : nullptr, r.step, r.layer,
                               r.step == 0 ? "prefill" : "decode", r.token_ids.data());
  }
  return text;
}

TEST(TraceReplay, ReproducesRecordedAssignmentsExactly) {
  const uint64_t seed = 31;
  const std::vector<Recorded> rs = record_batches(seed);
  int64_t drops = 0;
  for (const Recorded& r : rs)
    for (uint8_t k : r.routing.kept) drops += k ? 0 : 1;
  ASSERT_GT(drops, 0) << "the fixture should exercise kept flags";
  const Trace trace = parse_trace(write_trace(rs, false), "rec.jsonl", 6);
  EXPECT_FALSE(trace.has_logits);
  ASSERT_EQ(trace.batches.size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    const TraceBatch& b = trace.batches[i];
    EXPECT_EQ(b.step, rs[i].step);
    EXPECT_EQ(b.layer, rs[i].layer);
    EXPECT_EQ(b.phase, rs[i].step == 0 ? "prefill" : "decode");
    EXPECT_EQ(b.token_ids, rs[i].token_ids);
    const Routing r = recorded_routing(b, 6, 2);
    const Routing& want = rs[i].routing;
    EXPECT_EQ(r.token, want.token) << "seed " << seed << ", batch " << i;
    EXPECT_EQ(r.expert, want.expert) << "seed " << seed << ", batch " << i;
    EXPECT_EQ(r.kept, want.kept) << "seed " << seed << ", batch " << i;
    EXPECT_EQ(r.weight, want.weight) << "9 significant digits read back to the same float";
  }
}

TEST(TraceReplay, PipelineReplaysOrReRoutes) {
  const std::vector<Recorded> rs = record_batches(7);
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/decisions.jsonl", write_trace(rs, false));
  testing::write_text(dir + "/logits.jsonl", write_trace(rs, true));
  // E = 6 on the built-in 8 devices: round-robin (EPLB's policies need D to divide E + R).
  const std::vector<std::string> base = {"workload.source=trace", "model.experts=6", "model.top_k=2",
                                         "placement.policy=round_robin"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return default_experiment(extra);
  };
  // Decisions only: replayed as recorded, whatever the variant's gating.
  Experiment e = with({"workload.path=" + dir + "/decisions.jsonl", "router.gating=balanced"});
  RunOptions keep;
  keep.records = true;  // every record's loads, read below
  RunResult r = run_experiment(e, own_variant(e), keep);
  EXPECT_TRUE(r.trace_replayed);
  ASSERT_EQ(r.variants[0].per_batch.size(), rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    const BalanceMetrics want = compute_balance_metrics(rs[i].routing, nullptr, Layout::dropless, 64);
    EXPECT_EQ(r.variants[0].per_batch[i].load, want.load) << i;
    EXPECT_EQ(r.variants[0].per_batch[i].demand, want.demand) << i;
    EXPECT_EQ(r.variants[0].records[i].phase, i < 2 ? "prefill" : "decode");
  }
  // With logits: the variant routes them (here dropless token choice and balanced gating).
  e = with({"workload.path=" + dir + "/logits.jsonl", "router.capacity_factor=0"});
  RouterConfig balanced = e.router;
  balanced.gating = Gating::balanced;
  r = run_experiment(e, {own_variant(e)[0], {"balanced", balanced}}, keep);
  EXPECT_FALSE(r.trace_replayed);
  for (size_t i = 0; i < rs.size(); ++i) {
    RouteRequest req;
    req.logits = rs[i].logits.data();
    req.num_tokens = rs[i].routing.num_tokens;
    req.num_experts = 6;
    req.top_k = 2;
    const Routing again = route_omp(e.router, req, nullptr);
    EXPECT_EQ(r.variants[0].per_batch[i].load, compute_balance_metrics(again, nullptr, Layout::dropless, 64).load) << i;
    EXPECT_TRUE(r.variants[0].per_batch[i].has_logits);
    const std::vector<int64_t>& bl = r.variants[1].per_batch[i].load;
    EXPECT_LE(*std::max_element(bl.begin(), bl.end()) - *std::min_element(bl.begin(), bl.end()), 1) << i;
  }
}

TEST(TraceReplay, MalformedLinesNameTheLine) {
  const std::string ok = "{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1, 2], \"weights\": [0.5, 0.5]}\n";
  struct Case {
    std::string line;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [1, 2], \"weights\": [0.5]}", "\"weights\": expected 2"},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [1, 6], \"weights\": [0.5, 0.5]}", "model.experts = 6"},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [1, 1], \"weights\": [0.5, 0.5]}", "expert 1 twice"},
      {"{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [3], \"weights\": [1]}", "already appears on line 1"},
      {"{\"step\": -1, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [1]}", "\"step\": expected an integer"},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"weights\": [1]}", "missing \"experts\""},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [1], \"logits\": [1,2,3,4,5,6]}",
       "logits on every line or on none"},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [1], \"score\": 2}", "unknown key \"score\""},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [\"x\"]}", "\"weights\": expected"},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [1], \"kept\": [2]}", "\"kept\": expected"},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [1], \"phase\": \"train\"}", "\"phase\""},
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [1]", "invalid JSON: line 1"},
      {"[1, 2]", "expected one JSON object per line"},
  };
  for (const Case& c : cases) {
    const std::string text = ok + "\n" + c.line + "\n";  // line 2 is blank: the bad line is line 3
    try {
      parse_trace(text, "t.jsonl", 6);
      ADD_FAILURE() << "no error for: " << c.line;
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("t.jsonl:3: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(parse_trace("\n\n", "empty.jsonl", 6), InputError);
}

TEST(TraceReplay, MalformedTraceExitsTwoThroughTheCli) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/bad.jsonl",
                      "{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [1, 2], \"weights\": [0.5, 0.5]}\n"
                      "{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [1, 9], \"weights\": [0.5, 0.5]}\n");
  const testing::CliResult r =
      testing::run_cli("run --set workload.source=trace --set workload.path=" + dir + "/bad.jsonl");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("bad.jsonl:2:"), std::string::npos) << r.err;
}

// 6 tokens, 3 experts, top-2; capacity_factor 1 gives C = ceil(1.0 * 6 * 2 / 3) = 4. Expert 0 is asked by
// six assignments (slot 0 of t0, t1, t2, t4; slot 1 of t3, t5), expert 1 by four, expert 2 by two, so only
// expert 0 drops, two of its six.
const char* const kSixTokens =
    "{\"step\": 0, \"layer\": 0, \"token\": 0, \"experts\": [0, 1], \"weights\": [0.6, 0.4]}\n"
    "{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [0, 2], \"weights\": [0.7, 0.3]}\n"
    "{\"step\": 0, \"layer\": 0, \"token\": 2, \"experts\": [0, 1], \"weights\": [0.55, 0.45]}\n"
    "{\"step\": 0, \"layer\": 0, \"token\": 3, \"experts\": [1, 0], \"weights\": [0.35, 0.65]}\n"
    "{\"step\": 0, \"layer\": 0, \"token\": 4, \"experts\": [0, 2], \"weights\": [0.9, 0.1]}\n"
    "{\"step\": 0, \"layer\": 0, \"token\": 5, \"experts\": [1, 0], \"weights\": [0.65, 0.35]}\n";

Routing replay_six(const std::string& text, const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.experts=3", "model.top_k=2", "router.capacity_factor=1",
                                  "placement.kind=single"};
  all.insert(all.end(), sets.begin(), sets.end());
  const Experiment e = default_experiment(all);
  const Trace t = parse_trace(text, "six.jsonl", 3);
  return replay_routing(t.batches.at(0), "six.jsonl", 3, 2, e.router, 5);
}

// kept flags token-major: t0 s0, t0 s1, t1 s0, ...
std::vector<uint8_t> kept_except(std::vector<int> dropped) {
  std::vector<uint8_t> k(12, 1);
  for (int a : dropped) k[a] = 0;
  return k;
}

TEST(TraceReplay, CapacityByPositionKMajor) {
  // k_major priority: the slot-0 assignments in token order (t0, t1, t2, t4), then slot 1 (t3, t5):
  // the last two, t3 slot 1 (assignment 7) and t5 slot 1 (assignment 11), drop.
  const Routing r = replay_six(kSixTokens, {"router.drop_policy=position", "router.priority=k_major"});
  EXPECT_EQ(r.capacity, 4);
  EXPECT_EQ(r.kept, kept_except({7, 11}));
  const BalanceMetrics m = compute_balance_metrics(r, nullptr, Layout::dropless, 64);
  EXPECT_EQ(m.load, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(m.demand, (std::vector<int64_t>{6, 4, 2}));
  EXPECT_EQ(m.dropped, 2);
  EXPECT_DOUBLE_EQ(m.drop_rate, 2.0 / 12.0);
}

TEST(TraceReplay, CapacityByPositionTokenMajor) {
  // token_major: assignment order t0 s0 (0), t1 s0 (2), t2 s0 (4), t3 s1 (7), t4 s0 (8), t5 s1 (11):
  // t4 slot 0 (8) and t5 slot 1 (11) drop.
  const Routing r = replay_six(kSixTokens, {"router.drop_policy=position", "router.priority=token_major"});
  EXPECT_EQ(r.kept, kept_except({8, 11}));
}

TEST(TraceReplay, CapacityByScore) {
  // Expert 0's recorded weights: t4 0.9, t1 0.7, t3 0.65, t0 0.6, t2 0.55, t5 0.35: the two lowest,
  // t2 slot 0 (4) and t5 slot 1 (11), drop.
  const Routing r = replay_six(kSixTokens, {"router.drop_policy=score"});
  EXPECT_EQ(r.kept, kept_except({4, 11}));
  // renormalize_after_drop: t2 keeps only 0.45 of its 1.0, rescaled to 1.0; t5 keeps 0.65 -> 1.0. The other
  // tokens keep their recorded weights.
  const Routing rn = replay_six(kSixTokens, {"router.drop_policy=score", "router.renormalize_after_drop=true"});
  EXPECT_EQ(rn.kept, r.kept);
  EXPECT_FLOAT_EQ(rn.weight[5], 1.0f);
  EXPECT_FLOAT_EQ(rn.weight[10], 1.0f);
  EXPECT_EQ(rn.weight[4], r.weight[4]) << "a dropped assignment keeps its weight";
  for (int a : {0, 1, 2, 3, 6, 7, 8, 9}) EXPECT_EQ(rn.weight[a], r.weight[a]) << a;
}

TEST(TraceReplay, CapacityRandomIsSeededAndDropsTwo) {
  const Routing a = replay_six(kSixTokens, {"router.drop_policy=random"});
  const Routing b = replay_six(kSixTokens, {"router.drop_policy=random"});
  EXPECT_EQ(a.kept, b.kept) << "seed 5";
  const BalanceMetrics m = compute_balance_metrics(a, nullptr, Layout::dropless, 64);
  EXPECT_EQ(m.load, (std::vector<int64_t>{4, 4, 2})) << "seed 5";
}

TEST(TraceReplay, RecordedDropsStayDroppedAndTakeNoCapacity) {
  // t0's expert 0 recorded as dropped: expert 0 has five live assignments for C = 4. By k_major position
  // t1, t2, t4 (slot 0), then t3 slot 1 are kept and only t5 slot 1 drops; had the recorded drop taken a
  // slot, t3 slot 1 would drop too.
  std::string text = kSixTokens;
  const std::string t0 = "\"weights\": [0.6, 0.4]}";
  text.replace(text.find(t0), t0.size(), "\"weights\": [0.6, 0.4], \"kept\": [0, 1]}");
  const Routing r = replay_six(text, {"router.drop_policy=position"});
  EXPECT_EQ(r.kept, kept_except({0, 11}));
  // Dropless (capacity_factor 0): the recorded flags only.
  const Routing d = replay_six(text, {"router.capacity_factor=0"});
  EXPECT_EQ(d.capacity, 0);
  EXPECT_EQ(d.kept, kept_except({0}));
}

TEST(TraceReplay, MinCapacityAndLayoutActOnReplay) {
  // min_capacity 5 lifts C to 5: expert 0 drops one (t5 slot 1, last by k_major position).
  const Routing r = replay_six(kSixTokens, {"router.min_capacity=5"});
  EXPECT_EQ(r.capacity, 5);
  EXPECT_EQ(r.kept, kept_except({11}));
  // Capacity layout: E x C - sum(load) = 3 * 5 - 11 = 4 padding rows.
  const BalanceMetrics m = compute_balance_metrics(r, nullptr, Layout::capacity, 64);
  EXPECT_EQ(m.padding_waste, 4);
}

TEST(TraceReplay, TopKMismatchNamesTheLine) {
  std::string text = kSixTokens;
  text += "{\"step\": 1, \"layer\": 0, \"token\": 0, \"experts\": [2], \"weights\": [1.0]}\n";
  const Trace t = parse_trace(text, "six.jsonl", 3);
  const Experiment e = default_experiment({"model.experts=3", "model.top_k=2", "placement.kind=single"});
  try {
    replay_routing(t.batches.at(1), "six.jsonl", 3, 2, e.router, 0);
    FAIL() << "a one-expert token under top_k 2 must be refused";
  } catch (const InputError& ex) {
    const std::string msg = ex.what();
    EXPECT_NE(msg.find("six.jsonl:7:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.top_k = 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got 1"), std::string::npos) << msg;
  }
}

TEST(TraceReplay, SequenceScopeCapacityIsRefused) {
  EXPECT_THROW(replay_six(kSixTokens, {"router.capacity_scope=sequence"}), InputError);
  // Dropless, the scope has nothing to act on.
  EXPECT_NO_THROW(replay_six(kSixTokens, {"router.capacity_scope=sequence", "router.capacity_factor=0"}));
}

TEST(TraceReplay, DirectoriesAreRefusedByEveryWorkloadReader) {
  const std::string dir = testing::make_temp_dir();
  try {
    read_trace_file(dir, 8);
    FAIL() << "a directory as the trace";
  } catch (const InputError& ex) {
    EXPECT_NE(std::string(ex.what()).find("cannot read a directory"), std::string::npos) << ex.what();
  }
  try {
    read_load_profile(dir, "", 8);
    FAIL() << "a directory as the load profile";
  } catch (const InputError& ex) {
    EXPECT_NE(std::string(ex.what()).find("cannot read a directory"), std::string::npos) << ex.what();
  }
}

TEST(TraceReplay, ReplayCapacityThroughThePipeline) {
  // The run reports the replay's drops (no longer a silent drop_rate 0) and its capacity.
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/six.jsonl", kSixTokens);
  const Experiment e = default_experiment({"workload.source=trace", "workload.path=" + dir + "/six.jsonl",
                                           "model.experts=3", "model.top_k=2", "router.capacity_factor=1",
                                           "placement.kind=single"});
  const RunResult r = run_experiment(e, own_variant(e), RunOptions{});
  ASSERT_EQ(r.variants.at(0).per_batch.size(), 1u);
  EXPECT_EQ(r.variants[0].per_batch[0].capacity, 4);
  EXPECT_EQ(r.variants[0].per_batch[0].dropped, 2);
  EXPECT_EQ(r.variants[0].per_batch[0].load, (std::vector<int64_t>{4, 4, 2}));
}

TEST(TraceReplay, GatingOnATraceWithoutLogitsExitsTwo) {
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/six.jsonl", kSixTokens);
  const std::string base = "--set workload.source=trace --set workload.path=" + dir +
                           "/six.jsonl --set model.experts=3 --set model.top_k=2 --set placement.kind=single";
  for (const std::string gating : {"all", "token_choice", "hash,random"}) {
    const testing::CliResult r = testing::run_cli("compare --no-execute " + base + " --gating " + gating);
    EXPECT_EQ(r.exit_code, 2) << gating << ": " << r.err;
    EXPECT_NE(r.err.find("\"logits\""), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("six.jsonl"), std::string::npos) << r.err;
  }
  // Plain replay stays the default, capacity variants included.
  const testing::CliResult ok =
      testing::run_cli("compare --no-execute " + base + " --vary router.capacity_factor=0,1");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  // Variants that differ in gating reach the pipeline through sweep as well.
  const testing::CliResult sweep =
      testing::run_cli("sweep " + base + " --vary router.gating=token_choice,hash");
  EXPECT_EQ(sweep.exit_code, 2) << sweep.out << sweep.err;
  EXPECT_NE(sweep.err.find("\"logits\""), std::string::npos) << sweep.err;
}

TEST(TraceReplay, DirectoryAsTraceThroughTheCli) {
  const std::string dir = testing::make_temp_dir();
  const testing::CliResult r =
      testing::run_cli("run --no-execute --set workload.source=trace --set workload.path=" + dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot read a directory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moesim
