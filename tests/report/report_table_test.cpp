// Tests the meas_eff column of the run table, CSV and Markdown (src/report/report_table.cpp): "-" with a
// legend line naming the strategy and the reason when the measured times are noisy, the ratio otherwise.
// Noise is forced deterministically (execute.repeats 1 is noisy by rule) or cleared through the results,
// which are plain data. Host only.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/report.hpp"
#include "src/report/text_format.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

RunResult one_repeat_run() {
  const Experiment e =
      default_experiment({"workload.batch=64", "execute.hidden=16", "execute.ffn=32", "execute.repeats=1"});
  return run_experiment(e, own_variant(e), RunOptions{});
}

// The cell of `column` in the first data row under the header that names it: an aligned table's cells
// split on spaces, CSV on commas, Markdown on '|' (cells trimmed).
std::string first_row_cell(const std::string& text, const std::string& column, ReportFormat format) {
  auto split = [&](const std::string& l) {
    std::vector<std::string> cells;
    std::istringstream in(l);
    std::string c;
    if (format == ReportFormat::table) {
      while (in >> c) cells.push_back(c);
      return cells;
    }
    while (std::getline(in, c, format == ReportFormat::csv ? ',' : '|')) {
      const size_t b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
    }
    return cells;
  };
  std::istringstream lines(text);
  std::vector<std::string> header;
  for (std::string line; std::getline(lines, line);) {
    const std::vector<std::string> cells = split(line);
    if (header.empty()) {
      for (const std::string& c : cells)
        if (c == column) header = cells;
      continue;
    }
    if (format == ReportFormat::markdown && line.find("---") != std::string::npos) continue;  // the rule row
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i)
      if (header[i] == column) return cells[i];
    break;
  }
  return "(no " + column + " cell)";
}

TEST(ReportTable, NoisyMeasEffIsADashWithTheReason) {
  const RunResult r = one_repeat_run();
  ASSERT_TRUE(r.variants.front().measured_noise.noisy);
  // The reason is an explanation of a shown column: with --explain, where meas_eff is in the table.
  const std::string table = format_run(r, ReportFormat::table, true, true);
  EXPECT_EQ(first_row_cell(table, "meas_eff", ReportFormat::table), "-") << table;
  EXPECT_NE(table.find("meas_eff -: token_choice: execute.repeats 1 < 3: a median of 1 has no spread"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("rerun on an idle machine with execute.repeats >= 3"), std::string::npos) << table;
  EXPECT_NE(first_row_cell(table, "measured_ms", ReportFormat::table), "-") << table;  // the time itself is still shown

  const std::string csv = format_run(r, ReportFormat::csv);
  EXPECT_EQ(first_row_cell(csv, "meas_eff", ReportFormat::csv), "") << csv;  // CSV: empty, not "-"
  const std::string md = format_run(r, ReportFormat::markdown, false, true);
  EXPECT_NE(md.find("- meas_eff -: token_choice: execute.repeats 1 < 3"), std::string::npos) << md;
  // Nothing is said of a column the table does not show: the default table leaves meas_eff out.
  const std::string narrow = format_run(r, ReportFormat::table, false, true);
  if (narrow.find(" meas_eff") == std::string::npos)
    EXPECT_EQ(narrow.find("meas_eff -:"), std::string::npos) << narrow;
  EXPECT_EQ(first_row_cell(md, "meas_eff", ReportFormat::markdown), "-") << md;
}

TEST(ReportTable, QuietMeasEffIsTheRatio) {
  RunResult r = one_repeat_run();
  VariantResult& v = r.variants.front();
  v.measured_noise = MeasuredNoise{};  // as a quiet run records it
  const std::string want = text::fixed(v.measured_balanced_layer_s / v.measured.layer_s, 2);
  const std::string table = format_run(r, ReportFormat::table, true);
  EXPECT_EQ(first_row_cell(table, "meas_eff", ReportFormat::table), want) << table;
  EXPECT_EQ(table.find("meas_eff -:"), std::string::npos) << table;
  EXPECT_EQ(first_row_cell(format_run(r, ReportFormat::csv), "meas_eff", ReportFormat::csv), want);
  EXPECT_EQ(first_row_cell(format_run(r, ReportFormat::markdown), "meas_eff", ReportFormat::markdown), want);
}

// The longest line of `text`.
size_t widest_line(const std::string& text) {
  size_t w = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) w = std::max(w, line.size());
  return w;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

TEST(ReportTable, TheTableFitsTheTerminalAndWideShowsEveryColumn) {
  const Experiment e = default_experiment({"workload.batch=256", "workload.batches=2", "execute.enabled=false"});
  std::vector<RouterVariant> variants;
  for (Gating g : all_gatings()) {
    RouterConfig r = e.router;
    r.gating = g;
    variants.push_back({to_string(g), r});
  }
  const RunResult run = run_experiment(e, variants, RunOptions{});
  const std::string table = format_run(run, ReportFormat::table);
  EXPECT_LE(widest_line(table), text::kTerminalWidth) << table;
  // The columns left out are named; --wide has them all, past 120 characters.
  // The columns left out are counted, not named (nothing is said about a column the table does not show).
  EXPECT_NE(table.find("--wide adds "), std::string::npos) << table;
  EXPECT_EQ(table.find("max_vio"), std::string::npos) << table;
  // The answer first: one line a strategy, then the title, the table and the short paragraph; at most 25 lines.
  EXPECT_EQ(table.rfind("token_choice: imbalance costs ", 0), 0u) << table;
  EXPECT_LE(std::count(table.begin(), table.end(), '\n'), 25) << table;
  const std::string wide = format_run(run, ReportFormat::table, true);
  for (const char* c : {"max_vio", "entropy_norm", "model_us", "ep_us", "rank_imb", "drop_us", "comm_us"})
    EXPECT_NE(wide.find(std::string(" ") + c), std::string::npos) << c;
  EXPECT_GT(widest_line(wide), text::kTerminalWidth);
  // Markdown has every column that applies, the verdicts first; --explain adds the legends as bullets.
  const std::string brief = format_run(run, ReportFormat::markdown);
  EXPECT_NE(brief.find("| max_vio |"), std::string::npos);
  EXPECT_EQ(brief.rfind("- token_choice: imbalance costs ", 0), 0u) << brief;
  EXPECT_EQ(brief.find("- strategies:"), std::string::npos) << brief;
  const std::string md = format_run(run, ReportFormat::markdown, false, true);
  EXPECT_NE(md.find("\n- ep_us = ref_us + save_us + imb_us"), std::string::npos) << md;
  EXPECT_NE(md.find("\n- strategies:\n  - token_choice: top-2"), std::string::npos) << md;
  EXPECT_NE(md.find("- placement: contiguous: static, no EPLB, 8 devices"), std::string::npos) << md;
  EXPECT_NE(md.find("- 2 batches: imbalance .. aux_loss are means over the batches"), std::string::npos) << md;
}

TEST(ReportTable, CsvNamesDoNotDependOnTheRun) {
  // One device and 8 or 32 devices: the same header, ep_us with a devices column, empty where nothing applies.
  auto csv_of = [](const std::vector<std::string>& sets) {
    std::vector<std::string> all = {"workload.batch=128", "workload.batches=1", "execute.enabled=false"};
    all.insert(all.end(), sets.begin(), sets.end());
    const Experiment e = default_experiment(all);
    return format_run(run_experiment(e, own_variant(e), RunOptions{}), ReportFormat::csv);
  };
  const std::string ep8 = csv_of({}), ep4 = csv_of({"placement.devices=4"}), one = csv_of({"placement.kind=single"});
  EXPECT_EQ(first_line(ep8), first_line(ep4));
  EXPECT_EQ(first_line(ep8), first_line(one));
  EXPECT_NE(first_line(ep8).find(",devices,ep_us,rank_imb,"), std::string::npos) << first_line(ep8);
  EXPECT_EQ(first_row_cell(ep8, "devices", ReportFormat::csv), "8");
  EXPECT_EQ(first_row_cell(ep4, "devices", ReportFormat::csv), "4");
  EXPECT_EQ(first_row_cell(one, "devices", ReportFormat::csv), "");
  EXPECT_EQ(first_row_cell(one, "ep_us", ReportFormat::csv), "");
  EXPECT_EQ(first_row_cell(one, "measured_ms", ReportFormat::csv), "");
  EXPECT_EQ(ep8.find(",-"), std::string::npos) << ep8;  // no "-" for a missing value
}

TEST(ReportTable, ManyLayersWrapWithinTheTerminal) {
  // A 32-layer load profile's per-layer summary (it was one line of about 1,900 characters) is wrapped, one
  // line per 120 characters at most, every layer still there.
  const std::string dir = testing::make_temp_dir();
  std::string json = "{\"p\": {";
  for (int l = 0; l < 32; ++l)
    json += (l ? ", " : "") + std::string("\"") + std::to_string(l) + "\": [" + std::to_string(100 + 7 * l) +
            ", 90, 80, 70, 60, 50, 40, 30]";
  json += "}}";
  testing::write_text(dir + "/loads.json", json);
  testing::write_text(dir + "/e.yaml", "name: deep\nmodel: {experts: 8, top_k: 2, layers: 32}\n"
                                       "workload: {source: load_profile, path: loads.json, profile_key: p, batch: 256}\n");
  const Experiment e = load_experiment_file(dir + "/e.yaml", {});
  const RunResult run = run_experiment(e, own_variant(e), RunOptions{});
  // The per-layer loads come with --explain.
  EXPECT_EQ(format_run(run, ReportFormat::table).find(" L31 "), std::string::npos);
  const std::string table = format_run(run, ReportFormat::table, false, true);
  EXPECT_LE(widest_line(table), text::kTerminalWidth) << table;
  EXPECT_NE(table.find(" L31 "), std::string::npos) << table;
  EXPECT_NE(table.find("\n    "), std::string::npos) << table;  // continuation lines, indented under the strategy
}

}  // namespace
}  // namespace moesim
