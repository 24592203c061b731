// Tests of trace replay: recorded decisions (with capacity drops) written and read back reproduce every
// assignment exactly, through the parser and through the pipeline; a trace with logits is re-routed by
// the variant's strategy; every malformed line is an InputError naming the file and line (exit 2).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "router/route.hpp"
#include "tests/support/run_cli.hpp"
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
  RunResult r = run_experiment(e, own_variant(e), RunOptions{});
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
  r = run_experiment(e, {own_variant(e)[0], {"balanced", balanced}}, RunOptions{});
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
      {"{\"step\": 0, \"layer\": 0, \"token\": 1, \"experts\": [3], \"weights\": [1]", "parse error"},
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

}  // namespace
}  // namespace moesim
