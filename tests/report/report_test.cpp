// The headline value of a run (docs/design.md, "One number per metric: the headline value") on results
// built by hand, each expected value worked out here from the inputs: a step run's rates weighted by
// tokens, its counts summed, the losses over the records with logits, per-expert sums; one record and
// batch runs unchanged; records without tokens; the last record under its own key and aggregate; and
// rank_variants' competition ranking with ties in served time and imbalance. Host only.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/config/load_config.hpp"
#include "src/report/report.hpp"
#include "src/report/report_html.hpp"

namespace moesim {
namespace {

constexpr int kTopK = 2;

ModeledPlacement single(double time_s, double balanced_s) {
  ModeledPlacement p;
  p.placement = "single";
  p.cost.actual.quantized_s = time_s;
  p.cost.balanced.quantized_s = balanced_s;
  p.cost.batching_efficiency = balanced_s / time_s;
  p.cost.erosion.actual_s = time_s;
  return p;
}

// One batch on E = 4 experts with top_k 2: its loads, drops and the few scalars the tests read.
BalanceMetrics batch(std::vector<int64_t> load, int64_t num_tokens, int64_t dropped, double imbalance) {
  BalanceMetrics m;
  m.load = load;
  m.demand = load;
  m.demand[0] += dropped;
  m.imbalance = imbalance;
  m.demand_imbalance = imbalance;
  m.max_vio = imbalance - 1.0;
  m.dropped = dropped;
  m.drop_rate = static_cast<double>(dropped) / static_cast<double>(num_tokens * kTopK);
  m.active_experts = 0;
  for (size_t e = 0; e < load.size(); ++e) {
    m.active_experts += load[e] > 0 ? 1 : 0;
    m.utilization.push_back(static_cast<double>(load[e]) / (num_tokens * kTopK / 4.0));
  }
  m.dead_experts = 4 - m.active_experts;
  return m;
}

StepRecord record(const std::string& phase, int step, int64_t num_tokens, double time_s) {
  StepRecord r;
  r.phase = phase;
  r.step = step;
  r.num_tokens = num_tokens;
  r.modeled = {single(time_s, time_s * 0.5)};
  r.batching_efficiency = 0.5;
  r.modeled_layer_s = time_s;
  return r;
}

// A hand-built step variant's per-expert totals, as run_steps.cpp adds them record by record.
void fill_totals(VariantResult& v) {
  v.totals = ExpertTotals{};
  for (size_t i = 0; i < v.records.size(); ++i) add_to_totals(v.totals, v.records[i], v.per_batch[i]);
}

RunResult run_of(std::vector<VariantResult> variants) {
  RunResult run;
  run.experiment = default_experiment({"model.experts=4", "model.top_k=2", "placement.kind=single"});
  run.num_tokens = 20;
  run.variants = std::move(variants);
  return run;
}

// A prefill of 100 tokens and two decode steps of 20: imbalance 1.1, 1.5, 2.0; dropped 10, 4, 0;
// tokens_unrouted 3, 1, 0; padding_waste 7, 0, 5; losses on the first two records only.
VariantResult step_variant() {
  VariantResult v;
  v.variant.label = "token_choice";
  v.per_batch = {batch({60, 50, 40, 40}, 100, 10, 1.1), batch({12, 10, 8, 6}, 20, 4, 1.5),
                 batch({20, 10, 10, 0}, 20, 0, 2.0)};
  v.per_batch[0].tokens_unrouted = 3;
  v.per_batch[1].tokens_unrouted = 1;
  v.per_batch[0].padding_waste = 7;
  v.per_batch[2].padding_waste = 5;
  v.per_batch[0].has_logits = v.per_batch[1].has_logits = true;
  v.per_batch[0].aux_loss = 2.0;
  v.per_batch[1].aux_loss = 2.5;
  v.per_batch[2].aux_loss = 9.0;  // has_logits is false: never read
  v.records = {record("prefill", 0, 100, 4e-3), record("decode", 1, 20, 1e-3), record("decode", 2, 20, 3e-3)};
  fill_totals(v);
  // The mean decode-step MoE layer, as run_steps.cpp summarizes it: times (1e-3 + 3e-3) / 2.
  v.modeled = {single(2e-3, 1e-3)};
  return v;
}

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

TEST(HeadlineValue, StepRunWeightsRatesByTokensAndSumsCounts) {
  const RunResult run = run_of({step_variant()});
  const VariantResult& v = run.variants[0];
  auto value = [&](const char* m) { return metric_value(run, v, m, "value"); };
  // 4 ulps: the expected sums are grouped differently from the report's.
  EXPECT_DOUBLE_EQ(*value("imbalance"), (100 * 1.1 + 20 * 1.5 + 20 * 2.0) / 140);
  EXPECT_DOUBLE_EQ(*value("demand_imbalance"), (100 * 1.1 + 20 * 1.5 + 20 * 2.0) / 140);
  EXPECT_DOUBLE_EQ(*value("active_experts"), (100 * 4 + 20 * 4 + 20 * 3) / 140.0);
  EXPECT_DOUBLE_EQ(*value("dead_experts"), (20 * 1) / 140.0);
  // drop_rate: the weighted mean of 10/200, 4/40, 0/40 is the total 14 dropped of 280 assignments.
  EXPECT_DOUBLE_EQ(*value("drop_rate"), 14.0 / 280.0);
  EXPECT_EQ(*value("dropped"), 14.0);
  EXPECT_EQ(*value("tokens_unrouted"), 4.0);
  EXPECT_EQ(*value("padding_waste"), 12.0);
  EXPECT_DOUBLE_EQ(*value("aux_loss"), (100 * 2.0 + 20 * 2.5) / 120);
  EXPECT_EQ(*value("modeled_time_s"), 2e-3);
  EXPECT_EQ(*value("batching_efficiency"), 0.5);
  // The other aggregates: the last record, and the unweighted ones over the records.
  EXPECT_EQ(*metric_value(run, v, "imbalance", "last"), 2.0);
  EXPECT_FALSE(metric_value(run, v, "aux_loss", "last"));
  EXPECT_EQ(*metric_value(run, v, "dropped", "last"), 0.0);
  EXPECT_EQ(*metric_value(run, v, "modeled_time_s", "last"), 3e-3);
  EXPECT_DOUBLE_EQ(*metric_value(run, v, "imbalance", "mean"), (1.1 + 1.5 + 2.0) / 3);
  EXPECT_EQ(*metric_value(run, v, "imbalance", "max"), 2.0);
  EXPECT_FALSE(metric_value(run, v, "imbalance", "p99"));

  const nlohmann::json s = run_to_json(run)["strategies"][0];
  const nlohmann::json& m = s["metrics"];
  EXPECT_EQ(m["imbalance"].get<double>(), *value("imbalance"));
  EXPECT_EQ(m["dropped"].get<double>(), 14.0);
  EXPECT_EQ(m["modeled_time_s"].get<double>(), 2e-3);
  EXPECT_EQ(m["load"], (std::vector<int64_t>{92, 70, 58, 46}));
  EXPECT_EQ(m["demand"], (std::vector<int64_t>{106, 70, 58, 46}));
  // Utilization of the summed loads: load / (140 tokens x 2 / 4 experts).
  const std::vector<double> u = m["utilization"].get<std::vector<double>>();
  ASSERT_EQ(u.size(), 4u);
  for (size_t e = 0; e < 4; ++e) EXPECT_DOUBLE_EQ(u[e], m["load"][e].get<double>() / 70.0) << e;
  const nlohmann::json& last = s["last_record_metrics"];
  EXPECT_EQ(last["imbalance"].get<double>(), 2.0);
  EXPECT_TRUE(last["aux_loss"].is_null());
  EXPECT_EQ(last["load"], (std::vector<int64_t>{20, 10, 10, 0}));
  EXPECT_EQ(last["modeled_time_s"].get<double>(), 3e-3);
  EXPECT_EQ(last["batching_efficiency"].get<double>(), 0.5);

  // The CSV row and the HTML row show the headline.
  const std::string csv = format_run(run, ReportFormat::csv);
  const std::string row = csv.substr(csv.find("\ntoken_choice,") + 1);
  EXPECT_EQ(row.rfind("token_choice," + fixed(*value("imbalance"), 3) + ",", 0), 0u) << csv;
  EXPECT_NE(row.find("," + fixed(14.0 / 280.0, 4) + ",4,"), std::string::npos) << csv;
  const std::string html = render_html_report(run_to_json(run), "run.json");
  EXPECT_NE(html.find("<tr><td>token_choice</td><td>" + fixed(*value("imbalance"), 3) + "</td>"), std::string::npos);
  EXPECT_NE(html.find("summed over the 3 records"), std::string::npos);
}

TEST(HeadlineValue, OneRecordIsItselfAndABatchRunAggregatesItsBatches) {
  VariantResult one = step_variant();
  one.per_batch.resize(1);
  one.records.resize(1);
  fill_totals(one);
  one.modeled = one.records[0].modeled;  // the mean of one record's cost is that cost
  VariantResult batches = step_variant();
  batches.records.clear();  // synthetic batches: no step records, every batch of one size
  const RunResult run = run_of({one, batches});
  const nlohmann::json j = run_to_json(run);
  // One record: every aggregate is that record, and the JSON metrics are its own.
  for (const std::string& m : scalar_metric_names())
    EXPECT_EQ(metric_value(run, one, m, "value"), metric_value(run, run.variants[0], m, "last")) << m;
  const nlohmann::json want = metrics_to_json(one.per_batch.back());
  for (auto it = want.begin(); it != want.end(); ++it)
    EXPECT_EQ(j["strategies"][0]["metrics"][it.key()], it.value()) << it.key();
  EXPECT_EQ(*metric_value(run, run.variants[0], "imbalance", "value"), 1.1);
  // Three batches: rates are their plain mean (batches weigh alike), counts their sum; the last batch keeps
  // its own values under last_record_metrics and aggregate last.
  const VariantResult& b = run.variants[1];
  EXPECT_DOUBLE_EQ(*metric_value(run, b, "imbalance", "value"), (1.1 + 1.5 + 2.0) / 3);
  EXPECT_DOUBLE_EQ(*metric_value(run, b, "max_vio", "value"), (0.1 + 0.5 + 1.0) / 3);
  EXPECT_EQ(*metric_value(run, b, "dropped", "value"), 14.0);
  EXPECT_EQ(*metric_value(run, b, "imbalance", "last"), 2.0);
  EXPECT_DOUBLE_EQ(j["strategies"][1]["metrics"]["imbalance"].get<double>(), (1.1 + 1.5 + 2.0) / 3);
  ASSERT_TRUE(j["strategies"][1].contains("last_record_metrics"));
  EXPECT_EQ(j["strategies"][1]["last_record_metrics"]["imbalance"].get<double>(), 2.0);
  EXPECT_TRUE(j["strategies"][0].contains("last_record_metrics"));
}

TEST(HeadlineValue, RecordsWithoutTokensWeighAlike) {
  VariantResult v;
  v.variant.label = "token_choice";
  // Empty batches: by the metrics' convention imbalance 1, nothing dropped; say 1 and 3 to see the mean.
  v.per_batch = {batch({0, 0, 0, 0}, 1, 0, 1.0), batch({0, 0, 0, 0}, 1, 0, 3.0)};
  v.records = {record("trace", 0, 0, 1e-3), record("trace", 1, 0, 1e-3)};
  fill_totals(v);
  v.modeled = {single(1e-3, 1e-3)};
  const RunResult run = run_of({v});
  EXPECT_EQ(*metric_value(run, run.variants[0], "imbalance", "value"), 2.0);
  EXPECT_FALSE(metric_value(run, run.variants[0], "aux_loss", "value"));  // no record has logits
  EXPECT_TRUE(run_to_json(run)["strategies"][0]["metrics"]["aux_loss"].is_null());
}

// A batch-run variant with a given modeled time, drop rate and imbalance, owing 1000 assignments: its
// erosion serves the kept ones, less k = 2 for each of `unrouted` tokens left with no expert and no drop
// (expert choice).
VariantResult ranked(const std::string& label, double time_s, double drop_rate, double imbalance, int unrouted = 0) {
  VariantResult v;
  v.variant.label = label;
  BalanceMetrics m;
  m.load = {1, 1, 1, 1};
  m.demand = m.load;
  m.utilization = {1, 1, 1, 1};
  m.drop_rate = drop_rate;
  m.imbalance = imbalance;
  v.per_batch = {m};
  v.modeled = {single(time_s, time_s)};
  Erosion& x = v.modeled[0].cost.erosion;
  x.actual_s = time_s;
  x.undelivered = std::max(1000 * drop_rate, 2.0 * unrouted);
  x.served = 1000 - x.undelivered;
  return v;
}

TEST(RankVariants, EqualServedTimeAndImbalanceShareARank) {
  std::vector<VariantResult> vs = {
      ranked("a", 1e-3, 0, 1.2),
      ranked("b", 1e-3, 0, 1.2),                          // a's twin
      ranked("c", 1e-3, 0, 1.3),                          // as fast, less even
      ranked("d", 0.9e-3, 0.25, 1.0),                     // faster, but serves 0.9e-3 / 0.75 = 1.2e-3
      ranked("e", 1e-3 * (1 + 1e-13), 0, 1.2 * (1 + 1e-13)),  // a within 1e-12: the same numbers
      ranked("f", 1e-3 * (1 + 1e-9), 0, 1.0),             // slower than a beyond 1e-12: evenness does not help
      ranked("g", 1e-3, 1.0, 1.0),                        // drops everything: served time infinite
      ranked("h", 1e-3, 1.0, 1.0),
  };
  // A step run whose last record drops nothing and is perfectly even: it ranks on its aggregate placement,
  // the mean over its records, which served 625 of 1000 assignments on average: 1e-3 / 0.625 = 1.6e-3.
  VariantResult s = ranked("s", 1e-3, 0.375, 1.0);
  s.per_batch = {s.per_batch[0], s.per_batch[0]};
  s.per_batch[0].drop_rate = 0.5;
  s.per_batch[1].drop_rate = 0;
  s.records = {record("trace", 0, 3, 1e-3), record("trace", 1, 1, 1e-3)};
  fill_totals(s);
  vs.push_back(s);
  // Expert choice: nothing dropped, but 100 tokens unrouted: 0.95e-3 / 0.8 = 1.1875e-3, after f, before d.
  vs.push_back(ranked("i", 0.95e-3, 0, 1.0, 100));
  const RunResult run = run_of(vs);
  EXPECT_EQ(rank_variants(run), (std::vector<int>{1, 1, 4, 7, 1, 5, 9, 9, 8, 6}));
  const nlohmann::json j = run_to_json(run);
  EXPECT_EQ(j["strategies"][1]["rank"], 1);
  EXPECT_EQ(j["strategies"][8]["rank"], 8);
}

}  // namespace
}  // namespace moesim
