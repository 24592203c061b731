// Tests of a step run's memory rules (issue 18): `--records` adds the per-record list to the json report
// and without it the list is absent while every other field is the same; a run kept to the last record's
// full cost and per-expert vectors (RunOptions::records false) reports exactly what a run keeping every
// record does, for traces, the decoder and load profiles alike, and its per-expert totals are the sums of
// the records' own; the flat parser gives parse_trace's batches; `--memory-limit` below the estimate exits
// 3 with one line before the trace is replayed, and the estimate counts the records' report. Peak memory
// itself is measured by scripts/bench-trace-memory.sh, never here. Seeds: the trace generator's, 11.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/record_spool.hpp"
#include "src/report/report.hpp"
#include "src/workload/trace_replay.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

// A decode trace of `steps` steps x 4 layers x `tokens` tokens, top-2 of 8 experts, lines shuffled within
// each step so that the parser's grouping is exercised; prefill for step 0.
std::string make_trace(int steps, int tokens, bool logits) {
  std::mt19937_64 rng(11);
  std::ostringstream os;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::string> lines;
    for (int l = 0; l < 4; ++l) {
      for (int t = 0; t < tokens; ++t) {
        const int a = static_cast<int>(rng() % 8);
        const int b = (a + 1 + static_cast<int>(rng() % 7)) % 8;
        const double p = 0.5 + static_cast<double>(rng() % 1000) / 2000.0;
        std::ostringstream line;
        line << "{\"step\": " << s << ", \"layer\": " << l << ", \"token\": " << t << ", \"phase\": \""
             << (s == 0 ? "prefill" : "decode") << "\", \"experts\": [" << a << ", " << b << "], \"weights\": [" << p
             << ", " << 1 - p << "]";
        if (logits) {
          line << ", \"logits\": [";
          for (int e = 0; e < 8; ++e) line << (e ? ", " : "") << static_cast<double>(rng() % 100) / 25.0;
          line << "]";
        }
        line << "}\n";
        lines.push_back(line.str());
      }
    }
    std::shuffle(lines.begin(), lines.end(), rng);
    for (const std::string& x : lines) os << x;
  }
  return os.str();
}

// A trace experiment file beside the trace; returns the YAML's path.
std::string write_experiment(const std::string& dir, const std::string& trace) {
  testing::write_text(dir + "/t.jsonl", trace);
  testing::write_text(dir + "/t.yaml",
                      "name: trace-records\n"
                      "model: {hidden: 4096, ffn: 14336, experts: 8, top_k: 2, layers: 32, heads: 32, kv_heads: 8, "
                      "head_dim: 128, dtype: bf16}\n"
                      "router: {capacity_factor: 1.25}\n"
                      "workload: {source: trace, path: t.jsonl}\n"
                      "placement: {kind: expert_parallel, devices: 4}\n");
  return dir + "/t.yaml";
}

TEST(TraceRecords, FlatParserGivesTheSameBatches) {
  const std::string text = make_trace(5, 3, true);
  const Trace t = parse_trace(text, "t.jsonl", 8);
  const FlatTrace f = parse_flat_trace(text, "t.jsonl", 8);
  ASSERT_EQ(f.num_batches(), t.batches.size());
  ASSERT_EQ(t.batches.size(), 20u);
  for (size_t i = 0; i < t.batches.size(); ++i) {
    const TraceBatch a = f.batch(i);
    const TraceBatch& b = t.batches[i];
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.phase, b.phase);
    EXPECT_EQ(a.token, b.token);
    EXPECT_EQ(a.line, b.line);
    EXPECT_EQ(a.offsets, b.offsets);
    EXPECT_EQ(a.expert, b.expert);
    EXPECT_EQ(a.weight, b.weight);
    EXPECT_EQ(a.logits, b.logits);
    EXPECT_EQ(b.token, (std::vector<int64_t>{0, 1, 2})) << "tokens ascending within the batch";
  }
}

TEST(TraceRecords, KeepingOnlyTheLastRecordsCostChangesNoResult) {
  for (const bool logits : {false, true}) {
    SCOPED_TRACE(logits ? "re-routed" : "replayed");
    const std::string dir = testing::make_temp_dir();
    const Experiment e = load_experiment_file(write_experiment(dir, make_trace(6, 5, logits)), {});
    RunOptions all, last;
    all.records = true;
    const RunResult a = run_experiment(e, own_variant(e), all);
    const RunResult b = run_experiment(e, own_variant(e), last);
    EXPECT_TRUE(a.records_listed);
    EXPECT_FALSE(b.records_listed);
    const VariantResult& va = a.variants.at(0);
    const VariantResult& vb = b.variants.at(0);
    ASSERT_EQ(va.records.size(), 24u);
    ASSERT_EQ(vb.records.size(), va.records.size());
    for (size_t i = 0; i + 1 < vb.records.size(); ++i) EXPECT_TRUE(vb.records[i].modeled.empty()) << i;
    EXPECT_FALSE(vb.records.back().modeled.empty());
    // Without the records list, the json reports are the same byte for byte.
    RunResult a_unlisted = a;
    a_unlisted.records_listed = false;
    EXPECT_EQ(testing::without_provenance(format_run(a_unlisted, ReportFormat::json)),
              testing::without_provenance(format_run(b, ReportFormat::json)));
    EXPECT_EQ(format_run(a_unlisted, ReportFormat::table), format_run(b, ReportFormat::table));
  }
}

// Runs e keeping every record and keeping the last record's detail only: the kept run's json and table
// reports, with the record list left out, are the other's byte for byte; only the last record keeps its
// modeled placements and per-expert vectors; the totals are the sums over the kept run's records.
void expect_last_record_detail_changes_no_result(const Experiment& e, size_t num_records) {
  RunOptions all, last;
  all.execute = last.execute = false;  // measured times differ run to run
  all.records = true;
  const RunResult a = run_experiment(e, own_variant(e), all);
  const RunResult b = run_experiment(e, own_variant(e), last);
  const VariantResult& va = a.variants.at(0);
  const VariantResult& vb = b.variants.at(0);
  ASSERT_EQ(va.records.size(), num_records);
  ASSERT_EQ(vb.records.size(), num_records);
  for (size_t i = 0; i + 1 < num_records; ++i) {
    EXPECT_TRUE(vb.records[i].modeled.empty()) << i;
    EXPECT_TRUE(vb.per_batch[i].load.empty() && vb.per_batch[i].demand.empty() && vb.per_batch[i].utilization.empty())
        << i;
    EXPECT_EQ(vb.per_batch[i].imbalance, va.per_batch[i].imbalance) << i << ": the scalars stay";
  }
  EXPECT_FALSE(vb.records.back().modeled.empty());
  EXPECT_EQ(vb.per_batch.back().load, va.per_batch.back().load);
  // The totals, summed here independently from the kept run's records.
  std::vector<int64_t> load(e.model.experts, 0), demand(e.model.experts, 0);
  std::map<int, std::vector<int64_t>> layer_load;
  for (size_t i = 0; i < num_records; ++i) {
    std::vector<int64_t>& l = layer_load[va.records[i].layer];
    l.resize(e.model.experts, 0);
    for (int x = 0; x < e.model.experts; ++x) {
      load[x] += va.per_batch[i].load[x];
      demand[x] += va.per_batch[i].demand[x];
      l[x] += va.per_batch[i].load[x];
    }
  }
  EXPECT_EQ(vb.totals.load, load);
  EXPECT_EQ(vb.totals.demand, demand);
  ASSERT_EQ(vb.totals.layers.size(), layer_load.size());
  for (const auto& [layer, l] : layer_load) EXPECT_EQ(vb.totals.layers.at(layer).load, l) << layer;
  RunResult a_unlisted = a;
  a_unlisted.records_listed = false;
  EXPECT_EQ(testing::without_provenance(format_run(a_unlisted, ReportFormat::json)),
            testing::without_provenance(format_run(b, ReportFormat::json)));
  EXPECT_EQ(format_run(a_unlisted, ReportFormat::table), format_run(b, ReportFormat::table));

  // Spooled as they are made (what `--records` does), the records are written into the report byte for byte
  // where the kept run lists them, while the run itself keeps the last record's detail only.
  RecordSpool spool;
  RunOptions spooled = last;
  spooled.record_sink = [&spool](size_t variant, const StepRecord& rec, const BalanceMetrics& m,
                                 const DecoderStepFigures* d) { spool.add(variant, record_to_json(rec, m, d)); };
  const RunResult c = run_experiment(e, own_variant(e), spooled);
  EXPECT_TRUE(c.variants.at(0).per_batch.front().load.empty() || num_records == 1);
  std::string text;
  size_t pieces = 0;
  write_run_json(c, spool, [&](const std::string& piece) {
    text += piece;
    ++pieces;
  });
  EXPECT_GT(pieces, 2u);
  // Byte for byte but the second the provenance was stamped.
  auto undated = [](std::string s) {
    const std::string key = "\"date_utc\": \"";
    const size_t at = s.find(key);
    if (at != std::string::npos) s.replace(at + key.size(), 20, "YYYY-MM-DDTHH:MM:SSZ");
    return s;
  };
  EXPECT_EQ(undated(text), undated(format_run(a, ReportFormat::json)));
}

TEST(TraceRecords, EveryStepRunKeepsOnlyTheLastRecordsDetail) {
  {
    SCOPED_TRACE("decoder");
    const Experiment e = default_experiment({"workload.source=decoder", "workload.batch=4", "workload.prompt_len=3..9",
                                             "workload.decode_steps=3", "model.experts=6", "model.top_k=2",
                                             "router.capacity_factor=1", "execute.hidden=48", "execute.ffn=32",
                                             "execute.layers=2", "placement.kind=expert_parallel",
                                             "placement.devices=3"});
    expect_last_record_detail_changes_no_result(e, 8);
  }
  {
    SCOPED_TRACE("load profile");
    const Experiment e =
        load_experiment_file(std::string(MOESIM_SOURCE_DIR) + "/configs/mixtral-profile.yaml", {});
    expect_last_record_detail_changes_no_result(e, 3);
  }
  {
    SCOPED_TRACE("trace");
    const std::string dir = testing::make_temp_dir();
    expect_last_record_detail_changes_no_result(load_experiment_file(write_experiment(dir, make_trace(6, 5, true)), {}),
                                                24);
  }
}

TEST(TraceRecords, RecordsFlagAddsTheRecordList) {
  const std::string dir = testing::make_temp_dir();
  const std::string yaml = write_experiment(dir, make_trace(4, 2, false));
  const auto plain = run_cli("run " + yaml + " --format json --out " + dir + "/plain.json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto listed = run_cli("run " + yaml + " --format json --records --out " + dir + "/listed.json");
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  nlohmann::json p = nlohmann::json::parse(testing::read_text(dir + "/plain.json"));
  nlohmann::json l = nlohmann::json::parse(testing::read_text(dir + "/listed.json"));
  nlohmann::json& ps = p["strategies"][0];
  nlohmann::json& ls = l["strategies"][0];
  EXPECT_FALSE(ps.contains("records"));
  ASSERT_TRUE(ls.contains("records"));
  EXPECT_EQ(ls["records"].size(), 16u);
  EXPECT_EQ(ps["num_records"], 16);
  EXPECT_EQ(ls["num_records"], 16);
  EXPECT_EQ(ls["records"].back()["metrics"]["imbalance"], ps["last_record_metrics"]["imbalance"]);
  // Everything else is the same.
  ls.erase("records");
  p.erase("provenance");
  l.erase("provenance");
  EXPECT_EQ(p.dump(), l.dump());

  // The records are spooled in TMPDIR: one that cannot be written is a one-line resource error (exit 3), and
  // the report file is left as it was.
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir ? old_tmpdir : "";
  ::setenv("TMPDIR", (dir + "/no-such-folder").c_str(), 1);
  const auto no_tmp = run_cli("run " + yaml + " --format json --records --out " + dir + "/plain.json");
  if (old_tmpdir) ::setenv("TMPDIR", saved.c_str(), 1); else ::unsetenv("TMPDIR");
  EXPECT_EQ(no_tmp.exit_code, 3) << no_tmp.err;
  EXPECT_EQ(std::count(no_tmp.err.begin(), no_tmp.err.end(), '\n'), 1) << no_tmp.err;
  EXPECT_NE(no_tmp.err.find(dir + "/no-such-folder"), std::string::npos) << no_tmp.err;
  EXPECT_EQ(nlohmann::json::parse(testing::read_text(dir + "/plain.json"))["strategies"][0]["num_records"], 16);

  // compare takes it too, per strategy row.
  const auto cmp = run_cli("compare " + yaml + " --vary router.capacity_factor=1,2 --format json --records");
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const nlohmann::json rows = nlohmann::json::parse(cmp.out);  // named: a range over a temporary's member dangles
  for (const auto& s : rows["strategies"]) EXPECT_EQ(s["records"].size(), 16u);

  // Where it would be ignored it is refused, one line, exit 2.
  const auto table = run_cli("run " + yaml + " --records");
  EXPECT_EQ(table.exit_code, 2) << table.err;
  EXPECT_NE(table.err.find("--records: expected together with --format json"), std::string::npos) << table.err;
  const auto synthetic = run_cli("run --no-execute --format json --records");
  EXPECT_EQ(synthetic.exit_code, 2) << synthetic.err;
  EXPECT_NE(synthetic.err.find("got synthetic"), std::string::npos) << synthetic.err;
}

TEST(TraceRecords, MemoryLimitBelowTheEstimateExitsThree) {
  const std::string dir = testing::make_temp_dir();
  const std::string yaml = write_experiment(dir, make_trace(50, 2, false));
  const Experiment e = load_experiment_file(yaml, {});
  const double plain = estimate_run_bytes(e, false, 1);
  const double listed = estimate_run_bytes(e, true, 1);
  EXPECT_GT(plain, 0);
  EXPECT_GT(listed, plain) << "the records' report is counted";
  EXPECT_GT(estimate_run_bytes(e, false, 3), plain) << "every variant's results are counted";

  const auto tiny = run_cli("run " + yaml + " --format json --memory-limit 1MiB");
  EXPECT_EQ(tiny.exit_code, 3) << tiny.err;
  EXPECT_EQ(tiny.out, "");
  EXPECT_EQ(std::count(tiny.err.begin(), tiny.err.end(), '\n'), 1) << tiny.err;
  EXPECT_NE(tiny.err.find("t.yaml"), std::string::npos) << tiny.err;
  EXPECT_NE(tiny.err.find("--memory-limit"), std::string::npos) << tiny.err;
  EXPECT_NE(tiny.err.find("workload.path"), std::string::npos) << tiny.err;

  // Between the two estimates: the run fits, and so does the run with --records, whose records are spooled
  // to a temporary file (record_spool.hpp), not kept; the library run that keeps them does not fit.
  const std::string between = std::to_string(static_cast<int64_t>((plain + listed) / 2)) + "B";
  const auto fits = run_cli("run " + yaml + " --format json --memory-limit " + between);
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  const auto spooled = run_cli("run " + yaml + " --format json --records --memory-limit " + between);
  EXPECT_EQ(spooled.exit_code, 0) << spooled.err;
  EXPECT_EQ(nlohmann::json::parse(spooled.out)["strategies"][0]["records"].size(), 200u);  // 50 steps x 4 layers
  RunOptions kept;
  kept.records = true;
  kept.memory_limit_bytes = (plain + listed) / 2;
  EXPECT_THROW(run_experiment(e, own_variant(e), kept), ResourceError);
}

}  // namespace
}  // namespace moesim
